"""Over-allocate and select: from an allocation of N+k nodes, the N a job should run on.

Order (stable): nodes with no warning first, then by fewest warnings, then in allocation order;
unusable nodes (unreachable, any fail or error; with strict any warning) are never chosen.
"""
from __future__ import annotations

from ..model import Report, Status
from .drain import findings


def choose(report: Report, need: int, strict: bool = False) -> list[str]:
    """Up to `need` usable node names, best first (fewer than `need` when not enough are usable)."""
    bad = findings(report, strict)
    warns = {n.name: 0 for n in report.nodes}
    for r in report.results:
        if r.node in warns and r.status is Status.WARN:
            warns[r.node] += 1
    usable = [(warns[n.name], i, n.name) for i, n in enumerate(report.nodes) if n.name not in bad]
    return [name for _, _, name in sorted(usable)[:need]]
