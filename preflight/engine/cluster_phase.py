"""The cluster phase, over the nodes the node phase reached: each cluster check's plan() rounds
(targeted probes sent per node, reconnecting a node whose session the node phase closed), then
its evaluate(ctx) into a summary and the nodes it blames."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

from ..checkapi import ClusterContext, Finding, Probe
from ..model import CommandOutput, NodeStateKind, Result, Status, worst
from ..pool import DaemonPool
from ..registry import CheckInfo
from ..transport import ConnectError
from . import batches
from .outcomes import ProbesNotRun, error_finding, result
from .selection import cluster_params
from .state import NodeRun, Shared


class ClusterPhase:
    def __init__(self, shared: Shared, runs: dict[str, NodeRun]):
        self.shared = shared
        self.runs = runs
        self.results: list[Result] = []
        # check -> node -> why the check cannot read that node (unread()): read once, before the
        # plan rounds, which add planned outputs but never change a node's facts.
        self.unread: dict[str, dict[str, BaseException]] = {}

    def run(self, pool: DaemonPool, wait: Callable[[list], None]) -> None:
        """Plan rounds while any check plans probes (waiting on each round with `wait`), then
        every reported cluster check evaluated."""
        sh, sel = self.shared, self.shared.selection
        if not sel.cluster:
            return
        ok = {n: r for n, r in self.runs.items() if r.state is NodeStateKind.OK and r.connected and not r.internal}
        contexts, held = {}, []
        for c in sel.cluster:  # a node the mode holds the check off (a busy node in a sweep) is left out, with a skip
            self.unread[c.id] = {n: why for n, r in self.runs.items() if (why := unread(c, r)) is not None}
            off = {n: why for n, r in ok.items() if (why := sh.mode.blocked(c, r.busy))}
            contexts[c.id] = self.context(c, {n: r for n, r in ok.items() if n not in off})
            if sel.reports(c.id):
                held += [Result(c.id, n, Status.SKIP, off[n]) for n in sorted(off)]
        errors: dict[str, Exception] = {}
        rounds = {c.id: c.plan_rounds for c in sel.cluster}
        pending = [c for c in sel.cluster if c.has("plan") and sel.reports(c.id)]
        while pending and not sh.cancel.is_set():
            plans = self.plan_round(pending, contexts, ok, errors, rounds)
            if not plans:
                break
            wait([pool.submit(self.run_plan, ok[n], p, contexts) for n, p in plans.items()])
        for c in sel.cluster:
            if sel.reports(c.id):
                self.evaluate(c, contexts[c.id], errors.get(c.id))
        self.results.extend(held)  # after the summaries, so they never stand in for one

    def plan_round(self, pending: list[CheckInfo], contexts, ok, errors, rounds) -> dict[str, dict]:
        """node -> check -> probes for one round. A check is asked again (with ctx.planned filled)
        while it returns probes and has rounds left (its Policy's plan_rounds, default 1)."""
        plans: dict[str, dict[str, dict[str, Probe]]] = {}
        for c in list(pending):
            rounds[c.id] -= 1
            try:
                got = {n: batches.only_probes(c.id, p) for n, p in (c.module.plan(contexts[c.id]) or {}).items()
                       if n in ok and p}
            except Exception as exc:  # noqa: BLE001 - becomes the check's error result
                errors[c.id], got = exc, {}
            if not got or rounds[c.id] <= 0:
                pending.remove(c)
            for node, probes in got.items():
                plans.setdefault(node, {})[c.id] = probes
        return plans

    def run_plan(self, run: NodeRun, wanted, contexts) -> None:
        try:
            outs = self.plan_batch(run, wanted)
        except Exception as exc:  # noqa: BLE001
            self.shared.internal(run, exc)
            return
        finally:
            if not self.shared.keep_sessions:
                run.close()
        for cid, o in outs.items():
            contexts[cid].planned.setdefault(run.node.name, {}).update(o)  # type: ignore[union-attr]

    def plan_batch(self, run: NodeRun, wanted) -> dict[str, dict[str, CommandOutput]]:
        sh = self.shared
        session = run.session
        if session is None:  # closed after its node phase (more nodes than --forks): reconnect
            try:
                session = run.session = sh.transport.connect(run.node, sh.cancel)
            except ConnectError as exc:
                why = f"could not reconnect for the cluster round: {exc.state.value}: {exc.reason}"
                return {cid: {name: CommandOutput(rc=None, error=why) for name in probes}
                        for cid, probes in wanted.items()}
        return batches.run_batch(session, run.node, wanted, sh.cancel, sh.recorder, sh.selection.every)

    def context(self, info: CheckInfo, ok: dict[str, NodeRun]) -> ClusterContext:
        # A node the check could not read (its own output unreadable, or its probes not run there)
        # is left out of the nodes it judges: it is that node's error (evaluate), never a member of
        # an agreement or a vote, so a cluster of unread nodes cannot pass.
        read = {n: r for n, r in ok.items() if n not in self.unread[info.id]}
        facts = {n: {cid: f for cid in (info.id, *info.uses) if (f := r.facts.get(cid)) is not None}
                 for n, r in read.items()}  # a read node holds no exception among them (unread)
        return ClusterContext(nodes={n: r.node for n, r in read.items()}, facts=facts,
                              params=cluster_params(self.shared.inv, info), planned={}, job=self.shared.inv.job,
                              unreachable=tuple(n for n in self.runs if n not in ok))

    def evaluate(self, info: CheckInfo, ctx: ClusterContext, plan_error: Exception | None) -> None:
        t0 = time.monotonic()
        if self.shared.cancel.is_set():
            findings = [Finding(Status.ERROR, "not evaluated: the run was cut off")]
        elif plan_error is not None:
            findings = [error_finding(info, plan_error, {})]
        else:
            try:
                findings = list(info.module.evaluate(ctx))
            except Exception as exc:  # noqa: BLE001
                findings = [error_finding(info, exc, {})]
        unreadable = self.unread[info.id]
        for name, why in unreadable.items():  # a node whose facts (own or USES) were not gathered: not judged
            if isinstance(why, ProbesNotRun):
                findings.append(replace(why.finding(), node=name))
            else:
                # Its own probes' output could not be read there (a parse error, a probe that timed
                # out): the context leaves the node out, so without this it would be judged nowhere
                # and a cluster of the rest could pass.
                findings.append(replace(error_finding(info, why, {}), node=name))
        if unreadable:
            findings = [over_the_read(f, len(ctx.nodes), len(unreadable)) if f.node is None else f for f in findings]
        duration = time.monotonic() - t0 + sum(o.duration_s for outs in ctx.planned.values() for o in outs.values())
        if findings and not any(f.node is None for f in findings):
            findings.insert(0, Finding(worst(f.status for f in findings), f"{len(findings)} node(s) flagged",
                                       remediation="see the per-node results"))
        for f in findings or [Finding(Status.ERROR, "the check returned no result")]:
            self.results.append(result(info.id, f.node, f, duration))


def unread(info: CheckInfo, r: NodeRun) -> BaseException | None:
    """Why a cluster check could not read node `r` (its USES' probes not run there, or its own
    output unreadable), or None."""
    denied = next((f for c in (info.id, *info.uses) if isinstance(f := r.facts.get(c), ProbesNotRun)), None)
    if denied is not None:
        return denied
    # Its own output, or a fact it uses (USES: env.comm's addresses for a ping mesh), that could not
    # be read there: the check cannot judge the node either way (its USES check need not be selected,
    # so this row is where that error is said).
    return next((f for c in (info.id, *info.uses) if isinstance(f := r.facts.get(c), BaseException)), None)


def over_the_read(summary: Finding, read: int, unread: int) -> Finding:
    """A cluster row passes only over nodes the check read, and says how many it could not; with
    none read it could not tell at all."""
    if read == 0 and summary.status in (Status.PASS, Status.SKIP):
        # Nothing read: neither a pass nor a skip (which reads READY); it could not tell.
        return replace(summary, status=Status.ERROR, summary=f"could not read any node ({unread} unread: see their "
                       f"errors); {summary.summary}"[:600], details={**summary.details, "read": 0, "unread": unread})
    if summary.status is not Status.PASS:
        return summary
    return replace(summary, summary=f"{summary.summary}; {unread} node(s) could not be read (see their errors)",
                   details={**summary.details, "read": read, "unread": unread})
