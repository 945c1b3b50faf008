"""Sweep mode (`preflight run --sweep`): the nightly run over a cluster where jobs may be running.

Why: at 03:00 some nodes are busy training. A busy node is not a broken node, so it must be
reported busy, not failed, and the sweep must not disturb the job: no all-reduce, no device ping
mesh, no full-content hashing of the data set on it, and no port check (the job holds its own
HCCL ports). Busy is decided from npu.idle's facts (the npu-smi process table lists processes),
gathered in the same batch as everything else, so the decision costs no extra round trip.

How it hooks in: `SweepRunner` is the runner with three small overrides: node checks on a busy
node are skipped through the runner's `_blocked` hook (where REQUIRES blocking lives), npu.idle's
finding becomes a skip that keeps the process list, and cluster checks that are disruptive see
the busy nodes removed from their context (each gets a per-node skip).
"""
from __future__ import annotations

from typing import Any

from .checkapi import ClusterContext
from .model import Result, Status
from .registry import CheckInfo
from .runner import NodeRun, Runner

IDLE_ID = "npu.idle"
DISRUPTIVE = ("smoke.allreduce", "hccn.ping_mesh", "storage.consistency")
BUSY_NODE_SKIPS = ("net.ports",)  # would only see the job's own MASTER_PORT / HCCL ports
BUSY = "busy: a job is running on the node"


def is_busy(facts: Any) -> bool:
    """npu.idle's Facts: a readable process table with at least one process."""
    return facts is not None and not isinstance(facts, BaseException) and \
        not getattr(facts, "unavailable", None) and bool(getattr(facts, "processes", ()))


class SweepRunner(Runner):
    """The runner in sweep mode; npu.idle's probes always run (its facts decide "busy")."""

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        if IDLE_ID in self.every and IDLE_ID not in self.active:
            self.active.append(IDLE_ID)  # gathered for the decision, reported only if selected
        self.busy: set[str] = set()
        self._busy_skips: list[Result] = []

    def _busy(self, run: NodeRun) -> bool:
        return is_busy(run.facts.get(IDLE_ID))

    def _blocked(self, run: NodeRun, info: CheckInfo) -> str | None:
        if info.id in BUSY_NODE_SKIPS and self._busy(run):
            return f"{BUSY} (sweep mode: its ports are in use by the job)"
        return super()._blocked(run, info)

    def _evaluate_node(self, run: NodeRun, info: CheckInfo) -> None:
        before = len(run.results)
        super()._evaluate_node(run, info)
        if info.id != IDLE_ID or not self._busy(run):
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
        if info.id not in DISRUPTIVE:
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
