"""Run one framed batch over any byte stream and collect its outputs (shared by SSH and local)."""
from __future__ import annotations

import threading
import time
from typing import Callable

from ..model import CommandOutput
from . import unfinished
from .batch import DEFAULT_CAP, FrameParser, ProbeSpec, driver_script, new_nonce

POLL_S = 1.0  # how often a waiting reader looks at `cancel`; the runner also closes sessions at once
IDLE_SLACK_S = 15.0
CANCELLED = "cancelled (run deadline or interrupt)"  # beyond a probe's own timeout: the remote `timeout` should have fired by then


def collect(probes: list[ProbeSpec], start: Callable[[str], None], read: Callable[[], bytes | None],
            stop: Callable[[], None], cancel: threading.Event, cap: int = DEFAULT_CAP
            ) -> dict[str, CommandOutput]:
    """`start(script)` launches the driver, `read()` returns bytes, b"" at EOF, None when nothing is
    there yet (after a short wait); `stop()` closes the stream, which makes the node kill the probes."""
    nonce = new_nonce()
    parser = FrameParser(nonce, probes, cap)
    done: dict[str, CommandOutput] = {}
    start(driver_script(probes, nonce, cap))
    idle_limit = max((p.timeout for p in probes), default=1.0) + IDLE_SLACK_S
    last = time.monotonic()
    try:
        while len(done) < len(probes):
            if cancel.is_set():
                return unfinished(probes, done, CANCELLED)
            data = read()
            if data is None:
                if time.monotonic() - last > idle_limit:
                    return unfinished(probes, done, f"no output for {idle_limit:.0f}s (node hung)")
                continue
            if data == b"":
                why = CANCELLED if cancel.is_set() else "connection lost before the probe finished"
                return unfinished(probes, done, why)
            last = time.monotonic()
            for i, out in parser.feed(data):
                done[probes[i].key] = out
        return done
    finally:
        stop()
