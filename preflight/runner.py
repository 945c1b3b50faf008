"""Select checks -> gather probes per node -> parse/evaluate -> plan cluster probes -> evaluate -> Report.

Gather once, check many: every check's probes for a node are deduplicated and sent as one batch
(a second batch only for follow-ups that depend on the first). Nodes run concurrently, bounded by
`forks`; one node's failure, hang or garbage never blocks or hides the others; `deadline` bounds the
whole run and what a node finished before it is kept.

This module puts the run together (workers, waiting, the deadline); the parts are in
preflight.engine: selection, node_phase, cluster_phase, assemble.
"""
from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import wait
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from .engine import assemble
from .engine.cluster_phase import ClusterPhase
from .engine.mode import RunMode
from .engine.node_phase import NodePhase
from .engine.selection import Selection, validate_parameters
from .engine.state import NodeRun, Shared
from .inventory import Inventory
from .limits import forks_within, raise_nofile
from .model import NodeStateKind, Report, Status
from .pool import DaemonPool, all_done
from .registry import discover, select
from .transport import Transport

CUT_GRACE_S = 0.5  # after a cut, how long workers get to record what they finished (their channels are closed)
# A run ends even when nobody gave a deadline (env, fix, run without --deadline): a node that
# answers forever cannot hold it; the operator raises it with --deadline or the config's `deadline`.
DEFAULT_DEADLINE_S = 3600.0


@dataclass
class Options:
    checks: list[str] | None = None
    skip: list[str] | None = None
    forks: int = 64
    deadline: float | None = None
    strict: bool = False
    started: float | None = None  # time.monotonic() the deadline counts from (the CLI: process start)


class Runner:
    """One run over an inventory. `mode` says how busy nodes are treated (ops.sweep.Sweep for
    `run --sweep`); `every`, `reported` and `active` may be changed before run() (tests do)."""

    def __init__(self, inventory: Inventory, transport: Transport, options: Options | None = None,
                 cancel: threading.Event | None = None, progress: Callable[[int, int, int], None] | None = None,
                 recorder=None, mode: RunMode | None = None):
        self.inv = inventory
        self.transport = transport
        self.opts = options or Options()
        self.cancel = cancel or threading.Event()
        self.progress = progress
        self.recorder = recorder
        self.mode = mode or RunMode()
        self.every = discover()
        self.reported, self.active = select(self.opts.checks, self.opts.skip)
        for cid in self.mode.gathered(self.every):
            if cid not in self.active:
                self.active.append(cid)  # gathered for the mode's decision, reported only if selected
        validate_parameters(inventory)
        self.runs = {n.name: NodeRun(n) for n in inventory.nodes}
        # At most `forks` connections at a time: when every node fits, sessions stay open for the
        # cluster's plan rounds; otherwise each closes after its node phase and a plan round
        # reconnects (another handshake, but sockets and paramiko threads stay bounded).
        self.forks = forks_within(self.opts.forks, raise_nofile())
        self.keep_sessions = len(self.runs) <= self.forks
        self.interrupted = False
        self.run_id = str(uuid.uuid4())
        self._lock = threading.Lock()
        self._finished = 0
        self._failed = 0

    def run(self) -> Report:
        from .gcwindow import fewer_collections

        with fewer_collections():  # the run's data only grows: GC passes here free nothing
            return self._run()

    def _run(self) -> Report:
        started = _now()
        origin = self.opts.started if self.opts.started is not None else time.monotonic()
        t_end = origin + (self.opts.deadline or DEFAULT_DEADLINE_S)
        shared = Shared(self.inv, self.transport, self.cancel, self.recorder,
                        Selection.of(self.every, self.active, self.reported), self.keep_sessions, self.forks,
                        self.cut_reason, self.mode)
        nodes, cluster = NodePhase(shared), ClusterPhase(shared, self.runs)
        # A transport may say how many workers can help it (replay: one; it never waits on a
        # network, so more threads would only take turns at the GIL). Sessions stay as --forks says.
        useful = getattr(self.transport, "workers", None) or self.forks
        pool = DaemonPool(min(self.forks, len(self.runs), useful))
        try:
            self._wait([pool.submit(self._node, nodes, r) for r in self.runs.values()], t_end)
            if not self.cancel.is_set():
                cluster.run(pool, lambda futures: self._wait(futures, t_end))
        finally:
            self.cancel_if_deadline(t_end)
            pool.shutdown()
            self._close_sessions()
        return assemble.report(self.inv, shared.selection, self.runs, cluster.results, assemble.RunFacts(
            started, _now(), self.cut_reason(), self.opts.strict, self.interrupted, self.run_id))

    def cancel_if_deadline(self, t_end: float | None) -> None:
        if t_end is not None and time.monotonic() >= t_end:
            self.cancel.set()

    def cut_reason(self) -> str:
        return "interrupted" if self.interrupted else "cut off by --deadline"

    def _node(self, phase: NodePhase, run: NodeRun) -> None:
        try:
            phase.run(run)
        finally:
            self._tick(run)

    def _wait(self, futures, t_end: float | None) -> None:
        finished = all_done(futures)  # one event, not concurrent.futures.wait on every pending future 5 times a second
        while not finished.is_set():
            timeout = 0.2 if t_end is None else max(0.0, min(0.2, t_end - time.monotonic()))
            finished.wait(timeout)
            if self.cancel.is_set():
                break
            if t_end is not None and time.monotonic() >= t_end:
                self.cancel.set()
                break
        pending = {f for f in futures if not f.done()}
        if pending:
            for r in self.runs.values():  # unblock readers now: a closed channel makes the node kill its probes
                if not r.done:
                    r.close()
            abort = getattr(self.transport, "abort", None)
            if abort is not None:  # and handshakes still waiting for a silent sshd
                abort()
            wait(pending, timeout=CUT_GRACE_S)

    def _tick(self, run: NodeRun) -> None:
        with self._lock:
            self._finished += 1
            if run.state is not NodeStateKind.OK or any(r.status is Status.FAIL for r in run.results):
                self._failed += 1
            if self.progress:
                self.progress(self._finished, len(self.runs), self._failed)

    def _close_sessions(self) -> None:
        for r in self.runs.values():
            r.close()
        try:
            self.transport.close()
        except Exception:  # noqa: BLE001
            pass


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run(inventory: Inventory, transport: Transport, options: Options | None = None, **kw) -> Report:
    return Runner(inventory, transport, options, **kw).run()
