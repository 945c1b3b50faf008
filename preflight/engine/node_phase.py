"""The node phase, one worker per node: connect, decide the backend, gather every selected check's
probes (round 1, then the follow-ups that needed it), parse them into facts, and evaluate the
node checks in REQUIRES order. One node's failure, hang or garbage stays that node's."""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from .. import backend as backends, gcwindow
from ..checkapi import Finding, Probe
from ..model import NodeStateKind, Result, Status, worst
from ..registry import CONNECT_ID, CheckInfo
from ..transport import ConnectError
from ..transport.stream import CANCELLED
from . import batches
from .outcomes import ProbesNotRun, connected, error_finding, result
from .selection import params
from .state import NodeRun, Shared


class NodePhase:
    def __init__(self, shared: Shared):
        self.shared = shared

    def run(self, run: NodeRun) -> None:
        """One node, start to end; whatever happens, the node is marked done."""
        sh, sel = self.shared, self.shared.selection
        t0 = time.monotonic()
        try:
            if sh.cancel.is_set():
                return
            try:
                run.session = sh.transport.connect(run.node, sh.cancel)
                run.connected = True
            except ConnectError as exc:
                if sh.cancel.is_set():  # the cut aborted the handshake: the node did not fail, the run ended
                    run.state, run.error = NodeStateKind.TIMEOUT, f"{sh.cut_reason()} before the node answered"
                    return
                run.state, run.error = exc.state, exc.reason
                if sh.recorder is not None:
                    sh.recorder.state(run.node.name, exc.state, exc.reason)
                return
            self.resolve_backend(run)
            run.results.append(Result(CONNECT_ID, run.node.name, Status.PASS,
                                      getattr(run.session, "connected", None) or connected(run.node),
                                      {"address": f"{run.node.host}:{run.node.port}", "backend": run.node.backend,
                                       "backend_from": run.backend.how if run.backend else ""},
                                      duration_s=time.monotonic() - t0))
            mine = [c for c in sel.node_checks if c.applies_to(run.node.backend)]
            self.gather(run, mine)
            run.busy = sh.mode.busy(run.facts)
            cut = {c.id for c in mine if any(o.error == CANCELLED for o in run.outputs.get(c.id, {}).values())}
            if cut:  # the node's batch was still running at the deadline or interrupt
                run.state, run.error = NodeStateKind.TIMEOUT, f"{sh.cut_reason()} before the node finished"
            for info in sel.ordered:
                if info.scope == "node" and sel.reports(info.id) and info.id not in cut:
                    self.judge(run, info)
            if not (sel.plans and sh.keep_sessions):  # free its connection now
                run.close()
        except Exception as exc:  # noqa: BLE001 - a bug: said (exit 4), and the other nodes go on
            sh.internal(run, exc)
        finally:
            run.done = True
            gcwindow.settle()  # its data lives to the report: no collector pass need walk it (gcwindow)

    def resolve_backend(self, run: NodeRun) -> None:
        """`backend: auto` is decided from what the node has (one small probe); the node the
        checks see then carries the decided backend."""
        if run.node.backend != "auto":
            run.backend = backends.declared(run.node.backend)
            return
        if not any(c.backend for c in self.shared.selection.node_checks):  # nothing to decide: no round trip
            run.backend = backends.Decision("auto", "backend: auto (no backend-specific check selected)")
            return
        outs = batches.run_batch(run.session, run.node, {"backend": {"detect": Probe(backends.DETECT, 30.0)}},
                                 self.shared.cancel, self.shared.recorder)
        run.backend = backends.decide(outs.get("backend", {}).get("detect"))
        run.node = replace(run.node, backend=run.backend.backend)

    def gather(self, run: NodeRun, checks: list[CheckInfo]) -> None:
        """Round 1 (every check's probes), round 2 (follow-ups), then each check's facts: what
        parse() made of its outputs, or why it could not (kept as the check's error). `checks`
        come in the selection's order, each after those it USES. A check without follow-ups
        (Selection.early) is parsed as soon as round 1 is in, so the follow-ups of the checks
        that USE it see its facts (the npu-smi table: npu.idle's)."""
        sh = self.shared
        node, session = run.node, run.session  # the cut may close (and clear) run.session meanwhile
        every, early = sh.selection.every, sh.selection.early
        wanted = self.ask(run, checks, lambda c: c.module.probes(node, params(node, c)))
        run.outputs = batches.run_batch(session, node, wanted, sh.cancel, sh.recorder, every)
        self.parse(run, [c for c in checks if c.id in early])
        more = self.ask(run, [c for c in checks if c.has("followup") and c.id in run.outputs],
                        lambda c: c.module.followup(run.outputs[c.id], node, params(node, c), *uses(run, c)))
        more = {cid: p for cid, p in more.items() if p}
        if more and not sh.cancel.is_set():
            for cid, outs in batches.run_batch(session, node, more, sh.cancel, sh.recorder, every).items():
                run.outputs[cid].update(outs)
        self.parse(run, [c for c in checks if c.id not in early])

    @staticmethod
    def parse(run: NodeRun, checks: list[CheckInfo]) -> None:
        """Each check's facts from its outputs; a check whose probes were not run, or whose parse
        raises, keeps that as its facts (its error result)."""
        for c in checks:
            if c.id not in run.outputs or c.id in run.facts:
                continue
            denied = ProbesNotRun.of(run.outputs[c.id], run.node, c)
            if denied is not None:  # a probe it needs was not run: nothing of it can be judged
                run.facts[c.id] = denied
                continue
            try:
                run.facts[c.id] = c.module.parse(run.outputs[c.id], *uses(run, c))
            except Exception as exc:  # noqa: BLE001 - kept as the check's error result
                run.facts[c.id] = exc

    @staticmethod
    def ask(run: NodeRun, checks: list[CheckInfo], call) -> dict[str, dict[str, Probe]]:
        """Each check's probes; a check whose probe builder raises keeps the exception as its facts."""
        wanted: dict[str, dict[str, Probe]] = {}
        for c in checks:
            try:
                wanted[c.id] = batches.only_probes(c.id, call(c))
            except Exception as exc:  # noqa: BLE001
                run.facts[c.id] = exc
        return wanted

    def judge(self, run: NodeRun, info: CheckInfo) -> None:
        """A reported node check's results on this node: evaluated where its backend applies,
        an error where the backend could not be decided, a skip on a node of the other backend."""
        how = run.backend.how if run.backend else ""
        if info.applies_to(run.node.backend):
            self.evaluate(run, info)
        elif run.node.backend == backends.UNKNOWN:
            run.results.append(Result(info.id, run.node.name, Status.ERROR, backends.undecided(how)))
        else:
            run.results.append(Result(info.id, run.node.name, Status.SKIP,
                                      backends.skip_reason(info.backend, run.node.backend, how)))

    def evaluate(self, run: NodeRun, info: CheckInfo) -> None:
        t0 = time.monotonic()
        node = run.node
        probe_time = sum(o.duration_s for o in run.outputs.get(info.id, {}).values())
        reason = self.blocked(run, info)
        facts = run.facts.get(info.id)
        if reason:
            findings = [Finding(Status.SKIP, reason)]
        elif isinstance(facts, BaseException):
            findings = [error_finding(info, facts, run.outputs.get(info.id, {}))]
        else:
            try:
                findings = self.shared.mode.findings(info, run.busy,
                                                     list(info.module.evaluate(facts, params(node, info), node)))
            except Exception as exc:  # noqa: BLE001
                findings = [error_finding(info, exc, {})]
        duration = probe_time + (time.monotonic() - t0)
        for f in findings or [Finding(Status.ERROR, "the check returned no result")]:
            run.results.append(result(info.id, node.name, f, duration))

    def blocked(self, run: NodeRun, info: CheckInfo) -> str | None:
        """Why a check is not evaluated on this node: the run's mode holds it off (a busy node in a
        sweep), or a check it REQUIRES failed there."""
        held = self.shared.mode.blocked(info, run.busy)
        if held:
            return held
        for dep in info.requires:
            statuses = [r.status for r in run.results if r.check == dep]
            if statuses and worst(statuses) in (Status.FAIL, Status.ERROR):
                return f"blocked by {dep} ({worst(statuses).value}) on this node"
        return None


def uses(run: NodeRun, info: CheckInfo) -> tuple[dict[str, Any], ...]:
    """The extra argument of a node check that declares USES (nothing for the others): the used
    checks' facts on this node by id, as far as they are parsed (a check not gathered here is
    absent). Where a used check's facts could not be read, its entry is the exception that stands
    for them (its probes not run, a ParseError): the check raises it to share the error, or carries
    on without those facts."""
    if info.scope != "node" or not info.uses:
        return ()
    return ({cid: f for cid in info.uses if (f := run.facts.get(cid)) is not None},)
