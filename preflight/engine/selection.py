"""Which checks a run gathers and reports, in which order, with which parameters.

Worked out once per run, not per node: every node asks the same selection (a test or the sweep may
add to `active` before the run starts, so the runner builds it when the run begins)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..inventory import Inventory
from ..node import Node
from ..registry import CONNECT_ID, CheckInfo, check_parameters


@dataclass(frozen=True)
class Selection:
    every: Mapping[str, CheckInfo]  # every check discovered (a reported id always has its CheckInfo here)
    reported: tuple[str, ...]  # the checks whose results the report holds
    active: tuple[str, ...]  # the checks gathered: the reported ones and what they USE or REQUIRE
    node_checks: tuple[CheckInfo, ...]  # the active checks with probes (ssh.connect sends none), each after
    #                                    those it USES: gathering order, so their facts are parsed first
    ordered: tuple[CheckInfo, ...]  # the same, each after those it REQUIRES: evaluation order
    cluster: tuple[CheckInfo, ...]  # the active cluster checks
    plans: bool  # a reported cluster check plans probes: sessions may be kept for its rounds
    early: frozenset[str]  # node checks parsed right after round 1: no follow-up, nor does any check they use

    @classmethod
    def of(cls, every: Mapping[str, CheckInfo], active: list[str], reported: list[str]) -> "Selection":
        checks = first([every[c] for c in active if c != CONNECT_ID and every[c].has("probes")], "uses")
        plans = any(every[c].scope == "cluster" and every[c].has("plan") for c in reported)
        early: set[str] = set()
        gathered = {c.id for c in checks}
        for c in checks:  # each after those it USES
            if not c.has("followup") and all(u in early for u in c.uses if u in gathered):
                early.add(c.id)
        return cls(every, tuple(reported), tuple(active), tuple(checks), tuple(first(checks, "requires")),
                   tuple(every[c] for c in active if every[c].scope == "cluster"), plans, frozenset(early))

    def reports(self, check_id: str) -> bool:
        return check_id in self.reported


def params(node: Node, info: CheckInfo) -> dict[str, Any]:
    """A node check's parameters on that node: its DEFAULTS under the inventory's."""
    return node.check_params(info.id, info.defaults)


def cluster_params(inv: Inventory, info: CheckInfo) -> dict[str, Any]:
    """A cluster check's parameters: its DEFAULTS under the inventory's top-level `checks:`."""
    out = dict(info.defaults)
    out.update(inv.checks.get(info.id, {}))
    return out


def validate_parameters(inv: Inventory) -> None:
    """Every check parameter the inventory sets names a parameter of a known check (SelectionError,
    naming file:line, otherwise); one set below the top level must be a per-node parameter."""
    check_parameters(inv.checks, inv.path)
    for n in inv.nodes:
        check_parameters(_below_top(n, inv), f"{inv.path}:{n.source_line or '?'} (node {n.name})", per_node=True)


def _below_top(node: Node, inv: Inventory) -> dict[str, dict[str, Any]]:
    """The node's check parameters that did not come from the top-level `checks:` (set in
    defaults, a group or the node itself): for a cluster check those would be ignored."""
    unset = object()
    return {cid: {k: v for k, v in params.items() if inv.checks.get(cid, {}).get(k, unset) != v}
            for cid, params in node.params.items()}


def first(checks: list[CheckInfo], after: str) -> list[CheckInfo]:
    """The checks in an order in which each comes after those it names in `after` ("requires":
    evaluation order; "uses": parsing order), depth first, otherwise in the given order."""
    by_id = {c.id: c for c in checks}
    out: list[CheckInfo] = []
    seen: set[str] = set()

    def visit(c: CheckInfo) -> None:
        if c.id in seen:
            return
        seen.add(c.id)
        for dep in getattr(c, after):
            if dep in by_id:
                visit(by_id[dep])
        out.append(c)

    for c in checks:
        visit(c)
    return out
