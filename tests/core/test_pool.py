"""The runner's worker pool (preflight/pool.py): work is handed out, and waiting for it ends on time."""
from __future__ import annotations

import threading
from concurrent.futures import Future

from preflight.pool import DaemonPool, all_done


def test_all_done_is_set_by_the_last_future_and_not_before():
    futures = [Future() for _ in range(3)]
    futures[0].set_result(None)  # done before the wait starts
    event = all_done(futures)
    futures[2].set_exception(RuntimeError("a node worker's bug is still 'done'"))
    assert not event.wait(0.05)
    futures[1].set_result(None)
    assert event.is_set()


def test_all_done_of_nothing_is_set_at_once():
    assert all_done([]).is_set()


def test_all_done_follows_work_finishing_on_pool_threads():
    pool = DaemonPool(4)
    gate = threading.Event()
    try:
        futures = [pool.submit(gate.wait, 10) for _ in range(16)]
        event = all_done(futures)
        assert not event.wait(0.1)
        gate.set()
        assert event.wait(10)
        assert all(f.result() is True for f in futures)
    finally:
        gate.set()
        pool.shutdown()
