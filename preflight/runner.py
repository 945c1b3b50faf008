"""Select checks -> gather probes per node -> parse/evaluate -> plan cluster probes -> evaluate -> Report.

Gather once, check many: every check's probes for a node are deduplicated and sent as one batch
(a second batch only for follow-ups that depend on the first). Nodes run concurrently, bounded by
`forks`; one node's failure, hang or garbage never blocks or hides the others; `deadline` bounds the
whole run and what a node finished before it is kept.
"""
from __future__ import annotations

import dataclasses
import errno
import functools
import os
import threading
import time
import traceback
import uuid
from concurrent.futures import wait
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable

from . import __version__, actions, backend as backends, redact
from .checkapi import ClusterContext, Finding, ParseError, Probe
from .checkhelpers import first_line
from .container import RUNTIME_GROUP, START_SLACK_S, Container, job_command, job_prefix
from .inventory import Inventory
from .limits import forks_within, raise_nofile
from .model import CommandOutput, NodeState, NodeStateKind, Report, Result, Status, worst
from .node import Node
from .pool import DaemonPool, all_done
from .registry import CONNECT_ID, CheckInfo, check_parameters, discover, select
from .transport import ConnectError, Session, Transport
from .transport.batch import ProbeSpec
from .transport.stream import CANCELLED

NODE_UNREACHABLE = "node unreachable"
CUT_GRACE_S = 0.5  # after a cut, how long workers get to record what they finished (their channels are closed)


# A run ends even when nobody gave a deadline (env, fix, run without --deadline): a node that
# answers forever cannot hold it; the operator raises it with --deadline or the config's `deadline`.
DEFAULT_DEADLINE_S = 3600.0


@dataclass
class Options:
    checks: list[str] | None = None
    skip: list[str] | None = None
    forks: int = 64
    deadline: float | None = None
    strict: bool = False
    started: float | None = None  # time.monotonic() the deadline counts from (the CLI: process start)


@dataclass
class NodeRun:
    """Everything known about one node during a run (touched by one worker thread at a time)."""

    node: Node
    state: NodeStateKind = NodeStateKind.OK
    error: str | None = None
    session: Session | None = None
    outputs: dict[str, dict[str, CommandOutput]] = field(default_factory=dict)  # check -> name -> out
    facts: dict[str, Any] = field(default_factory=dict)
    results: list[Result] = field(default_factory=list)
    done: bool = False
    backend: backends.Decision | None = None  # the node's backend, once connected
    internal: str | None = None  # a bug met in this node's worker (exit 4), in words
    connected: bool = False  # reached in the node phase (its session may since be closed)


def _spec(probe: Probe, node: Node, info: CheckInfo | None, key: str = "") -> ProbeSpec:
    """A check's probe as the driver takes it (the fields are _spec_fields')."""
    check = (info.privilege, info.privilege_group, info.where) if info is not None else None
    # the probe's own fields, not the Probe: hashing a dataclass runs its Python __hash__
    return ProbeSpec(key, *_spec_fields(probe.cmd, probe.timeout, probe.root, probe.job, check, node.probe_timeout,
                                        node.container, node.become, node.become_user))


# ProbeSpec's fields that _spec_fields decides, in the class's order (after `key`; `cap` keeps its
# default): the values are named there and put in this order here, so the two cannot drift apart.
_DECIDED = tuple(f.name for f in dataclasses.fields(ProbeSpec) if f.name not in ("key", "cap"))


@functools.lru_cache(maxsize=4096)
def _spec_fields(cmd: str, timeout: float | None, root: bool | None, job: bool | None,
                 check: tuple[str, str | None, str] | None, probe_timeout: float, container: Container | None,
                 become: str, become_user: str) -> tuple:
    """ProbeSpec's fields after `key`, in _DECIDED's order: its timeout, and whether it needs root
    (the Probe's own `root`, else the check's PRIVILEGE), with the check's PRIVILEGE_GROUP and the
    node's become user. This is the one place privilege is decided; the driver applies it (sudo
    -n). Cached by everything they depend on (a Container is frozen, its run_args a tuple): every
    node of a cluster asks the same probes with the same settings, about 50 a node."""
    privilege, privilege_group, where = check if check is not None else (None, None, None)
    if root is None:
        root = privilege == "root"
    group = (privilege_group or "") if (root and check is not None) else ""
    timeout = timeout or probe_timeout
    if job is None:
        job = where == "job"
    inner = ""
    if job and container is not None:  # through the runtime, which needs root (docker: its group)
        inner, cmd, timeout = cmd, job_command(container, cmd, timeout), timeout + START_SLACK_S
        root, group = True, RUNTIME_GROUP[container.runtime] or ""
    jobside = bool(job and container is not None)
    decided = {"cmd": cmd, "timeout": timeout, "root": root, "group": group,
               "become": become_user if (root and become == "sudo") else "", "job": jobside, "inner": inner,
               "inner_timeout": timeout - START_SLACK_S if jobside else 0.0,
               "runtime": job_prefix(container) if jobside else ""}
    return tuple(decided[name] for name in _DECIDED)


RUNTIME_ERROR_RC = 125  # docker and podman: the runtime itself failed (no such container, image absent)
# ...and what else the runtime (not the probe) says: podman exec into a stopped container exits 255
# ("Error: can only create exec sessions on running containers"); docker's daemon errors begin so,
# and its client without a daemon exits 1 with "Cannot connect to the Docker daemon at unix://...".
RUNTIME_ERROR_WORDS = ("Error: can only create exec sessions", "Error response from daemon:",
                       "Cannot connect to the Docker daemon")
RUNTIME_MISSING_RC = 127  # the node's shell: no such command (`sh: 1: docker: not found`)


def _runtime_refused(out: CommandOutput, node: Node) -> CommandOutput:
    """A job-side probe the runtime could not start (exit 125): not the probe's answer, so it is
    marked not run, in the runtime's words, naming the container."""
    c = node.container
    if c is None or out.denied or out.rc is None or out.rc == 0:
        return out
    missing = out.rc == RUNTIME_MISSING_RC and f"{c.runtime}: " in out.stderr and "not found" in out.stderr
    if out.rc != RUNTIME_ERROR_RC and not out.stderr.startswith(RUNTIME_ERROR_WORDS) and not missing:
        return out
    why = f"{c.runtime} could not run the probe in {c.label} on {node.name}: {first_line(out.stderr, 240)}"
    return replace(out, error=why, denied=why)


def _merge(a: ProbeSpec, b: ProbeSpec) -> ProbeSpec:
    """One command asked for by several checks runs once: the longest timeout, root when any of
    them needs it, and a group exemption when one states it (it is a fact about the command)."""
    root = a.root or b.root
    timeout, group = max(a.timeout, b.timeout), (a.group or b.group) if root else ""
    become = (a.become or b.become) if root else ""
    if (timeout, root, group, become) == (a.timeout, a.root, a.group, a.become):
        return a  # the usual case (every hccn.* check asks the same npu-smi table): nothing to change
    return replace(a, timeout=timeout, root=root, group=group, become=become)


def _only_probes(check_id: str, probes: Any) -> dict[str, Probe]:
    """A check's probe mapping, refused unless every value is a `Probe` built through checkapi's
    quoting (`cmd()`): a plain string may carry an unquoted inventory value, so it never runs."""
    out = dict(probes or {})
    for name, probe in out.items():
        if not isinstance(probe, Probe):
            raise TypeError(f"{check_id}: probe {name!r} is a {type(probe).__name__}, not a Probe; "
                            "build it with checkapi.cmd(), which quotes every value")
    return out


def run_batch(session: Session, node: Node, wanted: dict[str, dict[str, Probe]],
              cancel: threading.Event, recorder=None,
              checks: dict[str, CheckInfo] | None = None) -> dict[str, dict[str, CommandOutput]]:
    """{check: {name: cmd}} -> {check: {name: output}}, identical commands sent once."""
    by_cmd: dict[str, ProbeSpec] = {}
    sent: dict[str, dict[str, str]] = {}  # check -> probe name -> the command it became
    for cid, probes in wanted.items():
        info, names = (checks or {}).get(cid), sent.setdefault(cid, {})
        for name, probe in probes.items():
            spec = _spec(probe, node, info, key=f"p{len(by_cmd)}")
            have = by_cmd.get(spec.cmd)
            by_cmd[spec.cmd] = spec if have is None else _merge(have, spec)
            names[name] = spec.cmd
    specs = list(by_cmd.values())
    outputs = session.run(specs, cancel) if specs else {}
    jobs = {sp.key for sp in specs if sp.job}
    outputs = {k: _runtime_refused(o, node) if k in jobs else o for k, o in outputs.items()}
    if recorder is not None:
        recorder.add(node.name, specs, outputs, node.env)
    return {check: {name: outputs[by_cmd[c].key] for name, c in names.items()} for check, names in sent.items()}


class Runner:
    def __init__(self, inventory: Inventory, transport: Transport, options: Options | None = None,
                 cancel: threading.Event | None = None, progress: Callable[[int, int, int], None] | None = None,
                 recorder=None):
        self.inv = inventory
        self.transport = transport
        self.opts = options or Options()
        self.cancel = cancel or threading.Event()
        self.progress = progress
        self.recorder = recorder
        self.every = discover()
        self.reported, self.active = select(self.opts.checks, self.opts.skip)
        check_parameters(inventory.checks, inventory.path)
        for n in inventory.nodes:
            check_parameters(_below_top(n, inventory), f"{inventory.path}:{n.source_line or '?'} (node {n.name})",
                             per_node=True)
        self.runs = {n.name: NodeRun(n) for n in inventory.nodes}
        # At most `forks` connections at a time: when every node fits, sessions stay open for the
        # cluster's plan rounds; otherwise each closes after its node phase and a plan round
        # reconnects (another handshake, but sockets and paramiko threads stay bounded).
        self.forks = forks_within(self.opts.forks, raise_nofile())
        self.keep_sessions = len(self.runs) <= self.forks
        self.cluster_results: list[Result] = []
        self.interrupted = False
        self.run_id = str(uuid.uuid4())
        self._lock = threading.Lock()
        self._finished = 0
        self._failed = 0
        self._selection: tuple[tuple, tuple[list[CheckInfo], list[CheckInfo], bool]] | None = None

    # ------------------------------------------------------------ public
    def run(self) -> Report:
        from .gcwindow import fewer_collections

        with fewer_collections():  # the run's data only grows: GC passes here free nothing
            return self._run()

    def _run(self) -> Report:
        started = _now()
        origin = self.opts.started if self.opts.started is not None else time.monotonic()
        t_end = origin + (self.opts.deadline or DEFAULT_DEADLINE_S)
        # A transport may say how many workers can help it (replay: one; it never waits on a
        # network, so more threads would only take turns at the GIL). Sessions stay as --forks says.
        useful = getattr(self.transport, "workers", None) or self.forks
        pool = DaemonPool(min(self.forks, len(self.runs), useful))
        try:
            futures = [pool.submit(self._node_phase, r) for r in self.runs.values()]
            self._wait(futures, t_end)
            if not self.cancel.is_set():
                self._cluster_phase(pool, t_end)
        finally:
            self.cancel_if_deadline(t_end)
            pool.shutdown()
            self._close_sessions()
        return self._report(started)

    def cancel_if_deadline(self, t_end: float | None) -> None:
        if t_end is not None and time.monotonic() >= t_end:
            self.cancel.set()

    # ------------------------------------------------------------ waiting
    def _wait(self, futures, t_end: float | None) -> None:
        finished = all_done(futures)  # one event, not concurrent.futures.wait on every pending future 5 times a second
        while not finished.is_set():
            timeout = 0.2 if t_end is None else max(0.0, min(0.2, t_end - time.monotonic()))
            finished.wait(timeout)
            if self.cancel.is_set():
                break
            if t_end is not None and time.monotonic() >= t_end:
                self.cancel.set()
                break
        pending = {f for f in futures if not f.done()}
        if pending:
            for r in self.runs.values():  # unblock readers now: a closed channel makes the node kill its probes
                if not r.done:
                    self._close(r)
            abort = getattr(self.transport, "abort", None)
            if abort is not None:  # and handshakes still waiting for a silent sshd
                abort()
            wait(pending, timeout=CUT_GRACE_S)

    # ------------------------------------------------------------ per node
    def _node_checks(self) -> list[CheckInfo]:
        return self._per_selection()[0]

    def _per_selection(self) -> tuple[list[CheckInfo], list[CheckInfo], bool]:
        """(node checks, the same in REQUIRES order, whether a cluster check plans): the same for
        every node, so worked out once per selection, not per node (a subclass or a test may
        still add to `active` before the run: the key is the selection itself)."""
        key = (tuple(self.active), tuple(self.reported))
        if self._selection is None or self._selection[0] != key:
            checks = [self.every[c] for c in self.active if c != CONNECT_ID and self.every[c].has("probes")]
            plans = any(self.every[c].scope == "cluster" and self.every[c].has("plan") for c in self.reported)
            self._selection = (key, (checks, _requires_first(checks), plans))
        return self._selection[1]

    def _node_phase(self, run: NodeRun) -> None:
        t0 = time.monotonic()
        try:
            if self.cancel.is_set():
                return
            try:
                run.session = self.transport.connect(run.node, self.cancel)
                run.connected = True
            except ConnectError as exc:
                if self.cancel.is_set():  # the cut aborted the handshake: the node did not fail, the run ended
                    run.state, run.error = NodeStateKind.TIMEOUT, f"{self._cut_reason()} before the node answered"
                    return
                run.state, run.error = exc.state, exc.reason
                if self.recorder is not None:
                    self.recorder.state(run.node.name, exc.state, exc.reason)
                return
            self._resolve_backend(run)
            self._add(run, Result(CONNECT_ID, run.node.name, Status.PASS,
                                  getattr(run.session, "connected", None) or _connected(run.node),
                                  {"address": f"{run.node.host}:{run.node.port}", "backend": run.node.backend,
                                   "backend_from": run.backend.how if run.backend else ""},
                                  duration_s=time.monotonic() - t0))
            checks, ordered, plans_ahead = self._per_selection()
            mine = [c for c in checks if c.applies_to(run.node.backend)]
            self._gather(run, mine)
            cut = {c.id for c in mine if any(o.error == CANCELLED for o in run.outputs.get(c.id, {}).values())}
            if cut:  # the node's batch was still running at the deadline or interrupt
                run.state, run.error = NodeStateKind.TIMEOUT, f"{self._cut_reason()} before the node finished"
            for info in ordered:
                if info.scope == "node" and info.id in self.reported and info.id not in cut:
                    if info.applies_to(run.node.backend):
                        self._evaluate_node(run, info)
                    elif run.node.backend == backends.UNKNOWN:
                        self._add(run, Result(info.id, run.node.name, Status.ERROR, backends.undecided(
                            run.backend.how if run.backend else "")))
                    else:
                        self._add(run, Result(info.id, run.node.name, Status.SKIP, backends.skip_reason(
                            info.backend, run.node.backend, run.backend.how if run.backend else "")))
            if not (plans_ahead and self.keep_sessions):  # free its connection now
                self._close(run)
        except Exception as exc:  # noqa: BLE001 - a bug: said (exit 4), and the other nodes go on
            self._internal(run, exc)
        finally:
            run.done = True
            self._tick(run)

    def _resolve_backend(self, run: NodeRun) -> None:
        """`backend: auto` is decided from what the node has (one small probe); the node the
        checks see then carries the decided backend."""
        from dataclasses import replace

        if run.node.backend != "auto":
            run.backend = backends.declared(run.node.backend)
            return
        if not any(c.backend for c in self._node_checks()):  # nothing to decide: no round trip
            run.backend = backends.Decision("auto", "backend: auto (no backend-specific check selected)")
            return
        outs = run_batch(run.session, run.node, {"backend": {"detect": Probe(backends.DETECT, 30.0)}}, self.cancel,
                         self.recorder)
        run.backend = backends.decide(outs.get("backend", {}).get("detect"))
        run.node = replace(run.node, backend=run.backend.backend)

    def _internal(self, run: NodeRun, exc: Exception) -> None:
        if os.environ.get("PREFLIGHT_DEBUG"):
            traceback.print_exc()
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):  # a limit, not the node
            run.internal = (f"out of file descriptors ({exc.strerror}; ulimit -n {raise_nofile()}): "
                            f"lower --forks (now {self.forks}) or raise the hard limit")
        else:
            run.internal = f"internal error (a bug in preflight, please report it): {type(exc).__name__}: {exc}"
        self._close(run)

    def _gather(self, run: NodeRun, checks: list[CheckInfo]) -> None:
        node, session = run.node, run.session  # the cut may close (and clear) run.session meanwhile
        wanted = self._ask(run, checks, lambda c: c.module.probes(node, self._params(node, c)))
        run.outputs = run_batch(session, node, wanted, self.cancel, self.recorder, self.every)
        more = self._ask(run, [c for c in checks if c.has("followup") and c.id in run.outputs],
                         lambda c: c.module.followup(run.outputs[c.id], node, self._params(node, c)))
        more = {cid: p for cid, p in more.items() if p}
        if more and not self.cancel.is_set():
            for cid, outs in run_batch(session, node, more, self.cancel, self.recorder, self.every).items():
                run.outputs[cid].update(outs)
        for c in checks:
            if c.id not in run.outputs or c.id in run.facts:
                continue
            denied = ProbesNotRun.of(run.outputs[c.id], node, c)
            if denied is not None:  # a probe it needs was not run: nothing of it can be judged
                run.facts[c.id] = denied
                continue
            try:
                run.facts[c.id] = c.module.parse(run.outputs[c.id])
            except Exception as exc:  # noqa: BLE001 - kept as the check's error result
                run.facts[c.id] = exc

    @staticmethod
    def _ask(run: NodeRun, checks: list[CheckInfo], call) -> dict[str, dict[str, Probe]]:
        """Each check's probes; a check whose probe builder raises keeps the exception as its facts."""
        wanted: dict[str, dict[str, Probe]] = {}
        for c in checks:
            try:
                wanted[c.id] = _only_probes(c.id, call(c))
            except Exception as exc:  # noqa: BLE001
                run.facts[c.id] = exc
        return wanted

    def _evaluate_node(self, run: NodeRun, info: CheckInfo) -> None:
        t0 = time.monotonic()
        node = run.node
        probe_time = sum(o.duration_s for o in run.outputs.get(info.id, {}).values())
        reason = self._blocked(run, info)
        facts = run.facts.get(info.id)
        if reason:
            findings = [Finding(Status.SKIP, reason)]
        elif isinstance(facts, BaseException):
            findings = [_error_finding(info, facts, run.outputs.get(info.id, {}))]
        else:
            try:
                findings = list(info.module.evaluate(facts, self._params(node, info), node))
            except Exception as exc:  # noqa: BLE001
                findings = [_error_finding(info, exc, {})]
        duration = probe_time + (time.monotonic() - t0)
        for f in findings or [Finding(Status.ERROR, "the check returned no result")]:
            self._add(run, _result(info.id, node.name, f, duration))

    @staticmethod
    def _close(run: NodeRun) -> None:
        session, run.session = run.session, None
        if session is not None:
            try:
                session.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    def _cut_reason(self) -> str:
        return "interrupted" if self.interrupted else "cut off by --deadline"

    def _blocked(self, run: NodeRun, info: CheckInfo) -> str | None:
        for dep in info.requires:
            statuses = [r.status for r in run.results if r.check == dep]
            if statuses and worst(statuses) in (Status.FAIL, Status.ERROR):
                return f"blocked by {dep} ({worst(statuses).value}) on this node"
        return None

    def _params(self, node: Node, info: CheckInfo) -> dict[str, Any]:
        return node.check_params(info.id, info.defaults)

    def _add(self, run: NodeRun, result: Result) -> None:
        run.results.append(result)

    def _tick(self, run: NodeRun) -> None:
        with self._lock:
            self._finished += 1
            if run.state is not NodeStateKind.OK or any(r.status is Status.FAIL for r in run.results):
                self._failed += 1
            if self.progress:
                self.progress(self._finished, len(self.runs), self._failed)

    # ------------------------------------------------------------ cluster
    def _cluster_phase(self, pool: DaemonPool, t_end: float | None) -> None:
        cluster = [self.every[c] for c in self.active if self.every[c].scope == "cluster"]
        if not cluster:
            return
        ok = {n: r for n, r in self.runs.items() if r.state is NodeStateKind.OK and r.connected and not r.internal}
        contexts = {c.id: self._context(c, ok) for c in cluster}
        errors: dict[str, Exception] = {}
        rounds = {c.id: c.plan_rounds for c in cluster}
        pending = [c for c in cluster if c.has("plan") and c.id in self.reported]
        while pending and not self.cancel.is_set():
            plans = self._plan_round(pending, contexts, ok, errors, rounds)
            if not plans:
                break
            futures = [pool.submit(self._run_plan, ok[n], p, contexts) for n, p in plans.items()]
            self._wait(futures, t_end)
        for c in cluster:
            if c.id in self.reported:
                self._evaluate_cluster(c, contexts[c.id], errors.get(c.id))

    def _plan_round(self, pending: list[CheckInfo], contexts, ok, errors, rounds) -> dict[str, dict]:
        """node -> check -> probes for one round. A check is asked again (with ctx.planned filled)
        while it returns probes and has rounds left (its Policy's plan_rounds, default 1)."""
        plans: dict[str, dict[str, dict[str, Probe]]] = {}
        for c in list(pending):
            rounds[c.id] -= 1
            try:
                got = {n: _only_probes(c.id, p) for n, p in (c.module.plan(contexts[c.id]) or {}).items()
                       if n in ok and p}
            except Exception as exc:  # noqa: BLE001 - becomes the check's error result
                errors[c.id], got = exc, {}
            if not got or rounds[c.id] <= 0:
                pending.remove(c)
            for node, probes in got.items():
                plans.setdefault(node, {})[c.id] = probes
        return plans

    def _run_plan(self, run: NodeRun, wanted, contexts) -> None:
        try:
            outs = self._plan_batch(run, wanted)
        except Exception as exc:  # noqa: BLE001
            self._internal(run, exc)
            return
        finally:
            if not self.keep_sessions:
                self._close(run)
        for cid, o in outs.items():
            contexts[cid].planned.setdefault(run.node.name, {}).update(o)  # type: ignore[union-attr]

    def _plan_batch(self, run: NodeRun, wanted) -> dict[str, dict[str, CommandOutput]]:
        session = run.session
        if session is None:  # closed after its node phase (more nodes than --forks): reconnect
            try:
                session = run.session = self.transport.connect(run.node, self.cancel)
            except ConnectError as exc:
                why = f"could not reconnect for the cluster round: {exc.state.value}: {exc.reason}"
                return {cid: {name: CommandOutput(rc=None, error=why) for name in probes}
                        for cid, probes in wanted.items()}
        return run_batch(session, run.node, wanted, self.cancel, self.recorder, self.every)

    def _context(self, info: CheckInfo, ok: dict[str, NodeRun]) -> ClusterContext:
        facts = {}
        for name, r in ok.items():
            facts[name] = {cid: f for cid in (info.id, *info.uses)
                           if (f := r.facts.get(cid)) is not None and not isinstance(f, BaseException)}
        params = dict(info.defaults)
        params.update(self.inv.checks.get(info.id, {}))
        # A node the check could not read (its own output unreadable, or its probes not run there)
        # is left out of the nodes it judges: it is that node's error (_evaluate_cluster), never a
        # member of an agreement or a vote, so a cluster of unread nodes cannot pass.
        read = {n: r.node for n, r in ok.items() if _unread(info, r) is None}
        return ClusterContext(nodes=read, facts={n: f for n, f in facts.items() if n in read}, params=params,
                              planned={}, job=self.inv.job,
                              unreachable=tuple(n for n in self.runs if n not in ok))

    def _evaluate_cluster(self, info: CheckInfo, ctx: ClusterContext, plan_error: Exception | None) -> None:
        t0 = time.monotonic()
        if self.cancel.is_set():
            findings = [Finding(Status.ERROR, "not evaluated: the run was cut off")]
        elif plan_error is not None:
            findings = [_error_finding(info, plan_error, {})]
        else:
            try:
                findings = list(info.module.evaluate(ctx))
            except Exception as exc:  # noqa: BLE001
                findings = [_error_finding(info, exc, {})]
        unread = 0
        for name, r in self.runs.items():  # a node whose facts (own or USES) were not gathered: not judged
            why = _unread(info, r)
            if isinstance(why, ProbesNotRun):
                findings.append(replace(why.finding(), node=name))
            elif why is not None:
                # Its own probes' output could not be read there (a parse error, a probe that timed
                # out): the context leaves the node out, so without this it would be judged nowhere
                # and a cluster of the rest could pass.
                findings.append(replace(_error_finding(info, why, {}), node=name))
            unread += why is not None
        if unread:
            findings = [_over_the_read(f, len(ctx.nodes), unread) if f.node is None else f for f in findings]
        duration = time.monotonic() - t0 + sum(o.duration_s for outs in ctx.planned.values() for o in outs.values())
        if findings and not any(f.node is None for f in findings):
            findings.insert(0, Finding(worst(f.status for f in findings), f"{len(findings)} node(s) flagged",
                                       remediation="see the per-node results"))
        for f in findings or [Finding(Status.ERROR, "the check returned no result")]:
            self.cluster_results.append(_result(info.id, f.node, f, duration))

    # ------------------------------------------------------------ report
    def _close_sessions(self) -> None:
        for r in self.runs.values():
            self._close(r)
        try:
            self.transport.close()
        except Exception:  # noqa: BLE001
            pass

    def _report(self, started: str) -> Report:
        nodes, results = [], []
        cut = self._cut_reason()
        node_checks = [c for c in self.reported if self.every[c].scope == "node"]
        for name, r in self.runs.items():
            if not r.done and r.state is NodeStateKind.OK:
                r.state, r.error = NodeStateKind.TIMEOUT, f"{cut} before the node finished"
            results.extend(self._node_results(r, node_checks, cut))  # may name an internal error as the state's
            nodes.append(NodeState(name, r.node.host, r.state, r.error,
                                   r.node.backend if r.node.backend in backends.NAMES else None))
        results.extend(self.cluster_results)
        for c in self.reported:
            if self.every[c].scope == "cluster" and not any(x.check == c for x in self.cluster_results):
                results.append(Result(c, None, Status.ERROR, f"not evaluated: {cut}"))
        for env in {tuple(sorted(redact.secrets(n.env).items())) for n in self.inv.nodes} - {()}:
            results = [_redacted(x, dict(env)) for x in results]
        if redact.has_shape([(x.summary, x.details, x.remediation) for x in results]):  # a key id, a URL password
            results = [_redacted(x, {}) for x in results]
        results = actions.assign(results, {c: self.every[c].actions for c in {r.check for r in results}
                                           if c in self.every})  # only the checks that ran: each is an import
        return Report(started_at=started, finished_at=_now(), inventory_path=self.inv.path,
                      inventory_sha256=self.inv.sha256, nodes=tuple(nodes), results=tuple(results),
                      cluster=self.inv.cluster, tool_version=__version__, strict=self.opts.strict,
                      interrupted=self.interrupted, run_id=self.run_id,
                      internal_errors=tuple(f"{r.node.name}: {r.internal}" for r in self.runs.values() if r.internal))

    def _node_results(self, r: NodeRun, node_checks: list[str], cut: str) -> list[Result]:
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


REMEDY = {
    NodeStateKind.UNREACHABLE: "check that the node is up and sshd listens on that address and port "
                               "(systemctl status ssh; ss -ltn | grep :22)",
    NodeStateKind.AUTH_FAILED: "install the client's public key on the node: ssh-copy-id -i KEY.pub user@host",
    NodeStateKind.HOSTKEY_REJECTED: "verify the node's host key out of band, then record it in known_hosts "
                                    "(the command is in the message)",
    NodeStateKind.TIMEOUT: "raise --deadline, or find why the node is slow (a hung npu-smi or mount): "
                           "run the check alone with --limit NODE",
}


HOST_KEY_WORDS = {"strict": "host key verified", "accept-new": "host key verified or newly recorded",
                  "off": "host key NOT checked (host_key_policy: off)"}


def _connected(node: Node) -> str:
    """Identical on every healthy node, so the checklist folds them into one line."""
    return f"connected as {node.user or 'the current user'}; {HOST_KEY_WORDS.get(node.host_key_policy, '')}"


def _below_top(node: Node, inv: Inventory) -> dict[str, dict[str, Any]]:
    """The node's check parameters that did not come from the top-level `checks:` (set in
    defaults, a group or the node itself): for a cluster check those would be ignored."""
    unset = object()
    return {cid: {k: v for k, v in params.items() if inv.checks.get(cid, {}).get(k, unset) != v}
            for cid, params in node.params.items()}


def _unread(info: CheckInfo, r: "NodeRun") -> BaseException | None:
    """Why a cluster check could not read node `r` (its USES' probes not run there, or its own
    output unreadable), or None."""
    denied = next((f for c in (info.id, *info.uses) if isinstance(f := r.facts.get(c), ProbesNotRun)), None)
    if denied is not None:
        return denied
    own = r.facts.get(info.id)
    return own if isinstance(own, BaseException) else None


def _over_the_read(summary: Finding, read: int, unread: int) -> Finding:
    """A cluster row passes only over nodes the check read, and says how many it could not; with
    none read it could not tell at all."""
    if summary.status is not Status.PASS:
        return summary
    if read == 0:
        return replace(summary, status=Status.ERROR, summary=f"could not read any node ({unread} unread: see their errors)",
                       details={**summary.details, "read": 0, "unread": unread})
    return replace(summary, summary=f"{summary.summary}; {unread} node(s) could not be read (see their errors)",
                   details={**summary.details, "read": read, "unread": unread})


def _requires_first(checks: list[CheckInfo]) -> list[CheckInfo]:
    """Evaluation order in which every check comes after those it REQUIRES (depth first)."""
    by_id = {c.id: c for c in checks}
    out: list[CheckInfo] = []
    seen: set[str] = set()

    def visit(c: CheckInfo) -> None:
        if c.id in seen:
            return
        seen.add(c.id)
        for dep in c.requires:
            if dep in by_id:
                visit(by_id[dep])
        out.append(c)

    for c in checks:
        visit(c)
    return out


def _redacted(r: Result, env: dict[str, str]) -> Result:
    """A result with the inventory's secrets (preflight.redact) taken out of every text it holds."""
    return dataclasses.replace(r, summary=redact.deep(r.summary, env), details=redact.deep(r.details, env),
                               remediation=redact.deep(r.remediation, env))


def _result(check: str, node: str | None, f: Finding, duration: float) -> Result:
    return Result(check, f.node if f.node is not None else node, f.status, f.summary, dict(f.details),
                  f.remediation, duration, f.action)


PRIVILEGE_WORDS = ("sudo", "needs root")  # how batch.NEEDS_ROOT and batch.SUDO_REFUSED begin


class ProbesNotRun(Exception):
    """A check with probes not run: root the login user lacks (no become), sudo -n refused, or the
    job's container runtime could not start them. Nothing of the check can be judged on that node."""

    def __init__(self, why: str, commands: list[str], user: str, group: str | None):
        super().__init__(why)
        self.why, self.commands, self.user, self.group = why, commands, user, group

    @classmethod
    def of(cls, outputs: dict[str, CommandOutput], node: Node, info: CheckInfo) -> "ProbesNotRun | None":
        # a host check that looks into the container itself (container.runtime) reads the runtime's answer
        not_run = {name: o.denied for name, o in outputs.items()
                   if o.denied and (info.where == "job" or o.denied.startswith(PRIVILEGE_WORDS))}
        denied = list(not_run.values())
        if not denied:
            return None
        return cls(denied[0], sorted(not_run),
                   node.user or "the login user", info.privilege_group)

    def finding(self) -> Finding:
        if not self.why.startswith(PRIVILEGE_WORDS):  # the job's container (RUNTIME_ERROR_RC)
            fix = ("start the job's container on this node (or name the running one in `container: name:`), or "
                   "load its image there (`container: image:` is run with --pull=never); see container.runtime")
        elif self.why.startswith("sudo"):
            fix = (f"let {self.user} run preflight's root probes without a password: they run as "
                   f"`sudo -n /bin/sh -c <probe>`, so the rule names /bin/sh, e.g. in /etc/sudoers.d/preflight "
                   f"(visudo -f): `{self.user} ALL=(root) NOPASSWD: /bin/sh`; or log in as root")
        else:
            fix = ("set `become: sudo` for the node (with a NOPASSWD sudo rule for the login user), or log in as root"
                   + (f", or add {self.user} to the {self.group} group (usermod -aG {self.group} {self.user})"
                      if self.group else ""))
        return Finding(Status.ERROR, self.why, {"not_run": self.commands}, remediation=fix)


def _error_finding(info: CheckInfo, exc: BaseException, outputs: dict[str, CommandOutput]) -> Finding:
    if isinstance(exc, ProbesNotRun):
        return exc.finding()
    if isinstance(exc, ParseError):
        details: dict[str, Any] = {"output": exc.text} if exc.text else {}
        return Finding(Status.ERROR, f"could not read the output: {exc.message}", details)
    return Finding(Status.ERROR, f"internal error in {info.id}: {type(exc).__name__}: {exc}",
                   {"internal": True})


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run(inventory: Inventory, transport: Transport, options: Options | None = None, **kw) -> Report:
    return Runner(inventory, transport, options, **kw).run()
