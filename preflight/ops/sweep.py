"""Sweep mode (`preflight run --sweep`): the nightly run over a cluster where jobs may be running.

Why: at 03:00 some nodes are busy training. A busy node is not a broken node, so it must be
reported busy, not failed, and the sweep must not disturb the job: no all-reduce, no device ping
mesh, no full-content hashing of the data set on it, and no port check (the job holds its own
HCCL ports). Busy is decided from the facts of the checks that declare ON_BUSY = "report" (npu.idle:
the npu-smi process table lists processes), gathered in the same batch as everything else, so the
decision costs no extra round trip.

How it hooks in: `SweepRunner` is the runner with three small overrides, each driven by the checks'
own policy (checkapi: ON_BUSY, BUSY_REASON, DISRUPTIVE): a node check with ON_BUSY = "skip" is
skipped on a busy node through the runner's `_blocked` hook (where REQUIRES blocking lives); the
check that decides busy (ON_BUSY = "report", with `busy(facts)`) reports a busy node as a skip that
keeps the process list; and a DISRUPTIVE cluster check sees the busy nodes removed from its
context (each gets a per-node skip).
"""
from __future__ import annotations

from typing import Any

from ..checkapi import ClusterContext
from ..model import Result, Status
from ..registry import CheckInfo, busy_deciders
from ..runner import NodeRun, Runner

BUSY = "busy: a job is running on the node"


class SweepRunner(Runner):
    """The runner in sweep mode; the probes of the checks that decide busy always run."""

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.deciders = [c for c in busy_deciders() if c.id in self.every]
        for c in self.deciders:
            if c.id not in self.active:
                self.active.append(c.id)  # gathered for the decision, reported only if selected
        self.busy: set[str] = set()
        self._busy_skips: list[Result] = []

    def _busy(self, run: NodeRun) -> bool:
        for c in self.deciders:
            facts = run.facts.get(c.id)
            if facts is not None and not isinstance(facts, BaseException) and c.module.busy(facts):
                return True
        return False

    def _blocked(self, run: NodeRun, info: CheckInfo) -> str | None:
        if info.on_busy == "skip" and self._busy(run):
            return f"{BUSY} (sweep mode: {info.busy_reason})"
        if info.disruptive and self._busy(run):
            return f"{BUSY} (sweep mode: {info.id} is disruptive)"
        return super()._blocked(run, info)

    def _evaluate_node(self, run: NodeRun, info: CheckInfo) -> None:
        before = len(run.results)
        super()._evaluate_node(run, info)
        if info.on_busy != "report" or not self._busy(run):
            return
        with self._lock:
            self.busy.add(run.node.name)
        for i in range(before, len(run.results)):
            r = run.results[i]
            if r.status is Status.FAIL and r.details.get("processes"):
                procs = r.details["processes"]
                run.results[i] = Result(r.check, r.node, Status.SKIP,
                                        f"{BUSY}: {len(procs)} process(es) on NPUs (sweep mode: not checked "
                                        f"disruptively)", {**r.details, "busy": True}, None, r.duration_s)

    def _context(self, info: CheckInfo, ok: dict[str, NodeRun]) -> ClusterContext:
        if not info.disruptive:
            return super()._context(info, ok)
        busy = {n for n, r in ok.items() if self._busy(r)}
        if busy and info.id in self.reported:
            for n in sorted(busy):
                self._busy_skips.append(Result(info.id, n, Status.SKIP,
                                               f"{BUSY} (sweep mode: {info.id} is disruptive)"))
        return super()._context(info, {n: r for n, r in ok.items() if n not in busy})

    def _cluster_phase(self, pool, t_end) -> None:
        super()._cluster_phase(pool, t_end)
        self.cluster_results.extend(self._busy_skips)  # after the summaries, so they never stand in for one
