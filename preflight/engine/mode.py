"""How a run treats a node busy with a job: the plain run does not look (every selected check runs
on every node); `ops.sweep.Sweep` is the other mode. The runner asks a mode through these public
methods only, at fixed points: which checks to gather beyond the selection (before the run), how
busy a node is (once, after its gathering: NodeRun.busy), why a check is held off a node (node
checks: a skip; cluster checks: the node left out of the context, with a skip), and what a
check's findings on a busy node read as."""
from __future__ import annotations

from typing import Any, Mapping

from ..checkapi import Finding
from ..registry import CheckInfo


class RunMode:
    """The plain run."""

    def gathered(self, every: Mapping[str, CheckInfo]) -> list[str]:
        """Checks to gather on every node though not selected (reported only if selected)."""
        return []

    def busy(self, facts: Mapping[str, Any]) -> int:
        """How many processes of a job hold the node's devices, from its facts (0: idle)."""
        return 0

    def blocked(self, info: CheckInfo, busy: int) -> str | None:
        """Why `info` is held off a node this busy (None: it runs)."""
        return None

    def findings(self, info: CheckInfo, busy: int, findings: list[Finding]) -> list[Finding]:
        """`info`'s findings on a node this busy, as the run reports them."""
        return findings
