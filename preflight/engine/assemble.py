"""The finished Report: every node's state, a result for every reported check on every node
(the missing ones named: unreachable, cut off, not finished), secrets redacted, actions assigned."""
from __future__ import annotations

import dataclasses

from .. import __version__, actions, backend as backends, redact
from ..model import NodeState, NodeStateKind, Report, Result, Status
from ..registry import CONNECT_ID
from .outcomes import NODE_UNREACHABLE, REMEDY
from .selection import Selection
from .state import NodeRun


@dataclasses.dataclass(frozen=True)
class RunFacts:
    """What the report says about the run itself."""

    started: str
    finished: str
    cut: str  # why a node or check not finished was cut: "interrupted" or "cut off by --deadline"
    strict: bool
    interrupted: bool
    run_id: str


def report(inv, selection: Selection, runs: dict[str, NodeRun], cluster_results: list[Result],
           run: RunFacts) -> Report:
    nodes, results = [], []
    every, cut = selection.every, run.cut
    node_checks = [c for c in selection.reported if every[c].scope == "node"]
    for name, r in runs.items():
        if not r.done and r.state is NodeStateKind.OK:
            r.state, r.error = NodeStateKind.TIMEOUT, f"{cut} before the node finished"
        results.extend(node_results(r, node_checks, cut))  # may name an internal error as the state's
        nodes.append(NodeState(name, r.node.host, r.state, r.error,
                               r.node.backend if r.node.backend in backends.NAMES else None))
    results.extend(cluster_results)
    for c in selection.reported:
        if every[c].scope == "cluster" and not any(x.check == c for x in cluster_results):
            results.append(Result(c, None, Status.ERROR, f"not evaluated: {cut}"))
    for env in {tuple(sorted(redact.secrets(n.env).items())) for n in inv.nodes} - {()}:
        results = [redacted(x, dict(env)) for x in results]
    if redact.has_shape([(x.summary, x.details, x.remediation) for x in results]):  # a key id, a URL password
        results = [redacted(x, {}) for x in results]
    results = actions.assign(results, {c: every[c].actions for c in {r.check for r in results}
                                       if c in every})  # only the checks that ran: each is an import
    return Report(started_at=run.started, finished_at=run.finished, inventory_path=inv.path,
                  inventory_sha256=inv.sha256, nodes=tuple(nodes), results=tuple(results),
                  cluster=inv.cluster, tool_version=__version__, strict=run.strict,
                  interrupted=run.interrupted, run_id=run.run_id,
                  internal_errors=tuple(f"{r.node.name}: {r.internal}" for r in runs.values() if r.internal))


def node_results(r: NodeRun, node_checks: list[str], cut: str) -> list[Result]:
    """One node's results in selection order, with ssh.connect's first and a result for every
    reported node check (skipped on a node not reached, an error where it did not finish)."""
    name = r.node.name
    if r.internal and not any(x.check == CONNECT_ID for x in r.results):  # never reached the node
        r.state, r.error = NodeStateKind.UNREACHABLE, r.internal
        return [Result(CONNECT_ID, name, Status.ERROR, r.internal, {"internal": True})] + \
               [Result(c, name, Status.SKIP, NODE_UNREACHABLE) for c in node_checks if c != CONNECT_ID]
    if r.state in (NodeStateKind.UNREACHABLE, NodeStateKind.AUTH_FAILED, NodeStateKind.HOSTKEY_REJECTED):
        return [Result(CONNECT_ID, name, Status.ERROR, f"{r.state.value}: {r.error}",
                       remediation=REMEDY.get(r.state))] + \
               [Result(c, name, Status.SKIP, NODE_UNREACHABLE) for c in node_checks if c != CONNECT_ID]
    have = {x.check for x in r.results}
    out = list(r.results)
    if CONNECT_ID not in have:
        out.insert(0, Result(CONNECT_ID, name, Status.ERROR, f"timeout: {r.error or cut}",
                             remediation=REMEDY[NodeStateKind.TIMEOUT]))
    why = r.internal or cut
    out += [Result(c, name, Status.ERROR, f"not finished: {why}") for c in node_checks if c not in have]
    order = {c: i for i, c in enumerate(node_checks)}
    return sorted(out, key=lambda x: order.get(x.check, len(order)))


def redacted(r: Result, env: dict[str, str]) -> Result:
    """A result with the inventory's secrets (preflight.redact) taken out of every text it holds."""
    return dataclasses.replace(r, summary=redact.deep(r.summary, env), details=redact.deep(r.details, env),
                               remediation=redact.deep(r.remediation, env))
