"""A node's driver over any byte stream (SSH channel, local pipe): start it once, feed it rounds.

The first `run()` starts the driver with its probes; later ones send more probes to the same
driver, so a node costs one exec (one login-shell start-up) for the whole run. A round that did not
finish cleanly (hung, connection lost, cancelled) closes the stream: the node's watcher then kills
what still runs, and a later round starts a fresh driver.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Protocol

from ..model import CommandOutput
from . import jobbatch, unfinished
from .batch import DEFAULT_CAP, FrameParser, ProbeSpec, driver_script, new_nonce, round_script

POLL_S = 1.0  # how often a waiting reader looks at `cancel`; the runner also closes sessions at once
IDLE_SLACK_S = 15.0  # beyond a probe's own timeout: the remote `timeout` should have fired by then
CANCELLED = "cancelled (run deadline or interrupt)"
# What an honest driver can send: per probe one frame of at most four capped files (`head -q -c
# CAP+1` over stdout, the priv note, stderr, a marker), base64 at worst (4/3), and its header.
FRAME_FILES, FRAME_SLACK = 4, 4096
NODE_BYTES_MAX = 256 << 20  # per node and run, all rounds: far past what every probe's cap allows


@dataclass
class Budget:
    """The bytes a node may still send in this run (every round takes its share)."""
    left: int = NODE_BYTES_MAX


def round_bytes(probes: list[ProbeSpec], cap: int) -> int:
    """The most bytes an honest driver sends for one round of `probes`."""
    return sum(FRAME_FILES * ((p.cap or cap) + 1) * 4 // 3 + FRAME_SLACK for p in probes)


class Stream(Protocol):
    def send(self, data: bytes) -> None: ...

    def read(self) -> bytes | None:
        """Bytes; b"" at EOF; None when nothing came within POLL_S."""

    def close(self) -> None: ...


def collect(stream: Stream, nonce: str, probes: list[ProbeSpec], cancel: threading.Event,
            cap: int = DEFAULT_CAP, budget: Budget | None = None) -> tuple[dict[str, CommandOutput], str | None]:
    """Read one round's frames from `stream`: (outputs so far, why the round did not finish or None).

    A hostile or broken node cannot hold the run: the probes run one after another on the node,
    each under its own timeout, so the idle timer restarts only when a probe's frame completes
    (bytes that finish no frame, a trickle, never reset it); and the round reads at most what an
    honest driver could send (round_bytes) and at most what the node's `budget` has left."""
    budget = budget or Budget()
    got = [0]
    try:
        return _collect(stream, nonce, probes, cancel, cap, min(budget.left, round_bytes(probes, cap)), got)
    finally:
        budget.left -= got[0]


def _collect(stream: Stream, nonce: str, probes: list[ProbeSpec], cancel: threading.Event, cap: int, limit: int,
             got: list[int]) -> tuple[dict[str, CommandOutput], str | None]:
    parser = FrameParser(nonce, probes, cap)
    done: dict[str, CommandOutput] = {}
    idle_limit = max(p.timeout for p in probes) + IDLE_SLACK_S
    last = time.monotonic()
    while len(done) < len(probes):
        if cancel.is_set():
            return done, CANCELLED
        if time.monotonic() - last > idle_limit:
            return done, f"no probe finished for {idle_limit:.0f}s (node hung, or sending without end)"
        data = stream.read()
        if data is None:
            continue
        if data == b"":
            return done, CANCELLED if cancel.is_set() else "connection lost before the probe finished"
        got[0] += len(data)
        if got[0] > limit:
            return done, f"sent more than {limit} bytes, more than its probes' caps allow (node output refused)"
        for i, out in parser.feed(data):
            done[probes[i].key] = out
            last = time.monotonic()
    return done, None


class Batcher:
    def __init__(self, open_stream: Callable[[str], Stream], cap: int = DEFAULT_CAP):
        self._open = open_stream
        self._stream: Stream | None = None
        self._nonce = new_nonce()
        self._lock = threading.Lock()
        self.cap = cap
        self.budget = Budget()

    def run(self, probes: list[ProbeSpec], cancel: threading.Event) -> dict[str, CommandOutput]:
        """Every probe's output by key; job-side probes travel as one runtime call per container
        (preflight.transport.jobbatch), unwrapped here."""
        return jobbatch.run_split(probes, self.cap, lambda sent: self._run(sent, cancel))

    def _run(self, probes: list[ProbeSpec], cancel: threading.Event) -> dict[str, CommandOutput]:
        if not probes:
            return {}
        with self._lock:
            try:
                if self._stream is None:
                    self._stream = self._open(driver_script(probes, self._nonce, self.cap))
                else:
                    self._stream.send(round_script(probes, self._nonce).encode())
                done, why = collect(self._stream, self._nonce, probes, cancel, self.cap, self.budget)
            except (OSError, EOFError) as exc:
                done, why = {}, f"connection lost: {exc or type(exc).__name__}"
            if why:
                self._close()
                return unfinished(probes, done, why)
            return done

    def _close(self) -> None:
        if self._stream is not None:
            try:
                self._stream.close()  # stdin EOF on the node: its watcher kills what still runs
            except (OSError, EOFError):
                pass
            self._stream = None

    def close(self) -> None:
        self._close()
