"""Sweep mode (`preflight run --sweep`): the nightly run over a cluster where jobs may be running.

Why: at 03:00 some nodes are busy training. A busy node is not a broken node, so it must be
reported busy, not failed, and the sweep must not disturb the job: no all-reduce, no device ping
mesh, no full-content hashing of the data set on it, and no port check (the job holds its own
HCCL ports). Busy is decided from the facts of the checks whose policy says on_busy="report" (npu.idle:
the npu-smi process table lists processes), gathered in the same batch as everything else, so the
decision costs no extra round trip.

How it hooks in: `Sweep` is a run mode (preflight.engine.mode) handed to the runner
(`Runner(..., mode=Sweep())`), driven by the checks' own Policy (on_busy, busy_reason,
disruptive): the runner gathers the deciding checks' probes on every node and sets each node's
`busy` once from their facts; a check with on_busy="skip", or a disruptive one, is held off a busy
node (a node check skips there; a cluster check's context leaves the node out, with a per-node
skip); and the deciding check's failures on a busy node read as a skip that keeps its details.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..checkapi import Finding
from ..engine.mode import RunMode
from ..model import Status
from ..registry import CheckInfo, busy_deciders

BUSY = "busy: a job is running on the node"


class Sweep(RunMode):
    """The sweep's mode; the probes of the checks that decide busy always run."""

    def __init__(self) -> None:
        self.deciders: list[CheckInfo] = []

    def gathered(self, every: Mapping[str, CheckInfo]) -> list[str]:
        self.deciders = [c for c in busy_deciders() if c.id in every]
        return [c.id for c in self.deciders]

    def busy(self, facts: Mapping[str, Any]) -> int:
        for c in self.deciders:
            f = facts.get(c.id)
            if f is not None and not isinstance(f, BaseException) and (n := c.module.busy(f)):
                return int(n)
        return 0

    def blocked(self, info: CheckInfo, busy: int) -> str | None:
        if not busy:
            return None
        if info.on_busy == "skip":
            return f"{BUSY} (sweep mode: {info.busy_reason})"
        if info.disruptive:
            return f"{BUSY} (sweep mode: {info.id} is disruptive)"
        return None

    def findings(self, info: CheckInfo, busy: int, findings: list[Finding]) -> list[Finding]:
        if info.on_busy != "report" or not busy:
            return findings
        return [Finding(Status.SKIP, f"{BUSY}: {busy} process(es) on NPUs (sweep mode: not checked disruptively)",
                        {**f.details, "busy": True}) if f.status is Status.FAIL else f for f in findings]
