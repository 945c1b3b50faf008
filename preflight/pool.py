"""A bounded pool of daemon worker threads for node work.

Why not ThreadPoolExecutor: the interpreter joins its workers at exit, so one worker blocked in a
handshake with a silent sshd (up to connect + banner timeout) holds the whole process long after
`--deadline` and the report. These workers are daemon threads: the process ends when the report is
out. At most `workers` threads exist, started as work arrives.
"""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable


class DaemonPool:
    def __init__(self, workers: int, name: str = "preflight-node"):
        self._max = max(1, workers)
        self._name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("pool is shut down")
            self._queue.put((future, fn, args))
            if len(self._threads) < self._max:
                t = threading.Thread(target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True)
                self._threads.append(t)
                t.start()
        return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(exc)

    def shutdown(self) -> None:
        """Cancel what has not started; running work finishes on its own (never waited for)."""
        with self._lock:
            self._closed = True
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
            for _ in self._threads:
                self._queue.put(None)


def all_done(futures: list[Future]) -> threading.Event:
    """An event set once every future is done: waiting on it costs the same for 8 futures or 1,000
    (concurrent.futures.wait adds and removes a waiter on each pending future at every call)."""
    event = threading.Event()
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_: Future) -> None:
        with lock:
            left[0] -= 1
            if left[0] == 0:
                event.set()

    if not futures:
        event.set()
    for f in futures:
        f.add_done_callback(one_done)
    return event
