"""Group identical results across nodes (ClusterShell's dshbak idea): one line for node[01-64]."""
from __future__ import annotations

from dataclasses import dataclass

from .. import backend as backends
from ..model import SEVERITY, Report, Status
from ..nodeset import fold

CLUSTER = "_cluster"


@dataclass(frozen=True)
class Group:
    check: str
    status: Status
    summary: str
    remediation: str | None
    nodes: tuple[str, ...]
    action: str | None = None
    flapping: bool = False  # passes now, failed in a recent stored run
    ack: tuple[str, str] | None = None  # (until, reason) of the acknowledgement that covers it

    @property
    def note(self) -> str:
        """What the history adds to the line: the ack, or the sticky flapping mark."""
        if self.ack:
            return f"acknowledged until {self.ack[0]}: {self.ack[1]}"
        return "flapping: failed in a recent run" if self.flapping else ""

    @property
    def label(self) -> str:
        return fold(self.nodes) if self.nodes != (CLUSTER,) else "cluster"


def grouped(report: Report) -> list[Group]:
    """Failures first; within a status, check order of the report; identical lines folded."""
    order = {c: i for i, c in enumerate(dict.fromkeys(r.check for r in report.results))}
    buckets: dict[tuple, list[str]] = {}
    for r in report.results:
        ack = (r.ack["until"], r.ack["reason"]) if r.ack else None
        key = (r.check, r.status, r.summary, r.remediation, r.action, r.flapping, ack)
        buckets.setdefault(key, []).append(r.node or CLUSTER)
    groups = [Group(*key[:4], tuple(nodes), *key[4:]) for key, nodes in buckets.items()]
    return sorted(groups, key=lambda g: (-SEVERITY[g.status], order[g.check]))


def condensed(groups: list[Group]) -> list[Group]:
    """Passing lines of one check that differ only in node-specific words (an address, a count)
    become one line, so a 128-node checklist stays about failures; the other backend's checks
    skipped on a node are one line per backend (backend_skips); the JSON keeps every result."""
    groups = backend_skips(groups)
    out: list[Group] = []
    first: dict[str, tuple[int, Group]] = {}  # check -> (position, its first passing group)
    for g in groups:
        if g.status is not Status.PASS or g.nodes == (CLUSTER,) or g.flapping:
            out.append(g)
        elif g.check not in first:
            first[g.check] = (len(out), g)
            out.append(g)
        else:
            i, head = first[g.check]
            nodes = out[i].nodes + g.nodes
            more = len(nodes) - len(head.nodes)
            where = fold(head.nodes)
            out[i] = Group(g.check, g.status, f"{head.summary} (as on {where}; {more} more alike)",
                           head.remediation, nodes)
    return out


def backend_skips(groups: list[Group]) -> list[Group]:
    """The skips of checks of the other backend (`NVIDIA check: this is an Ascend node (...)`,
    one line per check and way the backend was decided) -> one line per pair of backends, where
    the first of them stood: `SKIP  5 NVIDIA checks  node[01-04]  not applicable on Ascend nodes
    (gpu.health, ...)`. Nothing for an operator to read there, every run, on a one-backend cluster."""
    folds: dict[tuple[str, str], tuple[dict[str, None], dict[str, None]]] = {}  # -> (checks, nodes), ordered
    out: list[Group | tuple[str, str]] = []
    for g in groups:
        pair = backends.skipped_for_backend(g.summary) if g.status is Status.SKIP else None
        if pair is None:
            out.append(g)
            continue
        if pair not in folds:
            folds[pair] = ({}, {})
            out.append(pair)
        checks, nodes = folds[pair]
        checks[g.check] = None
        nodes.update(dict.fromkeys(g.nodes))
    result = []
    for item in out:
        if isinstance(item, Group):
            result.append(item)
            continue
        checks, nodes = (list(d) for d in folds[item])
        what, where = (backends.NAMES[b] for b in item)
        label = f"{len(checks)} {what} checks" if len(checks) > 1 else checks[0]
        result.append(Group(label, Status.SKIP, f"not applicable on {where} nodes ({', '.join(checks)})", None, tuple(nodes)))
    return result


def sections(report: Report, groups: list[Group]) -> list[tuple[str | None, list[Group]]]:
    """Grouped lines split by backend when the report has both Ascend and NVIDIA nodes:
    [("Ascend nodes", ...), ("NVIDIA nodes", ...), ("cluster", ...)]; one unnamed section otherwise.
    A line folded across both backends (the same pass on every node) is split into one per backend."""
    kinds = {n.name: n.backend for n in report.nodes if n.backend}
    present = list(dict.fromkeys(kinds[n.name] for n in report.nodes if n.name in kinds))
    if len(present) < 2:
        return [(None, groups)]
    names = {"ascend": "Ascend nodes", "nvidia": "NVIDIA nodes"}
    out: dict[str, list[Group]] = {b: [] for b in present}
    cluster: list[Group] = []
    other: list[Group] = []
    for g in groups:
        if g.nodes == (CLUSTER,):
            cluster.append(g)
            continue
        for b in present:
            mine = tuple(n for n in g.nodes if kinds.get(n) == b)
            if mine:
                out[b].append(Group(g.check, g.status, g.summary, g.remediation, mine))
        rest = tuple(n for n in g.nodes if n not in kinds)
        if rest:
            other.append(Group(g.check, g.status, g.summary, g.remediation, rest))
    result = [(names[b], out[b]) for b in present if out[b]]
    if other:
        result.append(("nodes of unknown backend", other))
    if cluster:
        result.append(("cluster", cluster))
    return result


def by_node(report: Report) -> dict[str, dict[str, Status]]:
    """node -> check -> worst status, for the matrix view."""
    matrix: dict[str, dict[str, Status]] = {}
    for r in report.results:
        row = matrix.setdefault(r.node or CLUSTER, {})
        if r.check not in row or SEVERITY[r.status] > SEVERITY[row[r.check]]:
            row[r.check] = r.status
    return matrix
