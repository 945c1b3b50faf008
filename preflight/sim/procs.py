"""Processes the simulator starts: spawn, identify, stop -- always by PID, always bounded.

Each record carries the PID and its start time, so a PID reused by an unrelated process after a
crash is never signalled.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any, Sequence

import psutil


def describe(pid: int, what: str, node: str | None) -> dict[str, Any]:
    try:
        ctime = psutil.Process(pid).create_time()
    except psutil.Error:
        ctime = 0.0
    return {"pid": pid, "ctime": ctime, "what": what, "node": node}


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    except OSError:
        pass


def alive(rec: dict[str, Any]) -> bool:
    _reap(rec["pid"])
    try:
        p = psutil.Process(rec["pid"])
        if rec.get("ctime") and abs(p.create_time() - rec["ctime"]) > 1.0:
            return False  # the PID was reused
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def spawn(argv: Sequence[str], log: str | os.PathLike[str] | None = None,
          stdin_text: str | None = None) -> subprocess.Popen:
    out = open(log, "ab") if log else subprocess.DEVNULL
    try:
        return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True, close_fds=True)
    finally:
        if log:
            out.close()  # type: ignore[union-attr]


def stop(recs: Sequence[dict[str, Any]], timeout: float = 3.0) -> list[dict[str, Any]]:
    """SIGTERM, wait up to timeout, SIGKILL, wait again. Returns the records still alive (none, normally)."""
    live = _signal_and_wait([r for r in recs if alive(r)], signal.SIGTERM, timeout)
    return _signal_and_wait(live, signal.SIGKILL, 2.0)


def _signal_and_wait(live: list[dict[str, Any]], sig: int, timeout: float) -> list[dict[str, Any]]:
    for r in live:
        try:
            os.kill(r["pid"], sig)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while live and time.monotonic() < deadline:
        time.sleep(0.02)
        live = [r for r in live if alive(r)]
    return live


def kill_pids(pids: Sequence[int], timeout: float = 2.0) -> None:
    """Stop bare PIDs found inside a namespace we own (leftovers of a crashed run)."""
    stop([{"pid": p, "ctime": 0.0, "what": "leftover", "node": None} for p in pids], timeout)


def run(argv: Sequence[str], timeout: float = 20.0, input: str | None = None,
        check: bool = True) -> subprocess.CompletedProcess:
    cp = subprocess.run(list(argv), input=input, capture_output=True, text=True, timeout=timeout)
    if check and cp.returncode != 0:
        raise SimError(f"{' '.join(argv[:6])}: exit {cp.returncode}: {(cp.stderr or cp.stdout).strip()[:300]}")
    return cp


class SimError(RuntimeError):
    """The simulator could not do what was asked (bring-up, a fault, tear-down)."""
