"""The runner (preflight.runner) with fake check modules: local probes, dedup, errors, skips, deadline.

Fake checks are plain modules put in place of `discover()` (both the registry's, used by `select`,
and the runner's own binding), so no file under checks/ is touched.
"""
from __future__ import annotations

import threading
import time
import types

import pytest

from preflight import registry, runner
from preflight.checkapi import ClusterContext, Finding, ParseError, Probe, cmd
from preflight.inventory import load
from preflight.model import CommandOutput, NodeStateKind, Status
from preflight.registry import CheckInfo
from preflight.engine.batches import run_batch
from preflight.runner import Options, Runner
from preflight.transport import ConnectError, unfinished
from preflight.transport.local import LocalTransport


def module(name: str, **attrs) -> types.ModuleType:
    m = types.ModuleType(f"fake_{name}")
    m.__doc__ = f"{name}: a fake check for the runner tests."
    for k, v in attrs.items():
        setattr(m, k, v)
    return m


def node_check(cid: str, probes=None, parse=None, evaluate=None, requires=(), defaults=None, uses=()) -> CheckInfo:
    probes = probes or (lambda node, params: {"hello": cmd("echo hello")})
    parse = parse or (lambda outs: {k: o.stdout.strip() for k, o in outs.items()})
    evaluate = evaluate or (lambda facts, params, node: [Finding(Status.PASS, f"{cid} saw {facts}")])
    return CheckInfo(cid, "node", module(cid, probes=probes, parse=parse, evaluate=evaluate), tuple(requires),
                     tuple(uses), dict(defaults or {}))


def cluster_check(cid: str, evaluate, uses=(), plan=None) -> CheckInfo:
    attrs = {"evaluate": evaluate}
    if plan:
        attrs["plan"] = plan
    return CheckInfo(cid, "cluster", module(cid, **attrs), (), tuple(uses), {})


CONNECT = CheckInfo("ssh.connect", "node", module("ssh.connect"), (), (), {})


@pytest.fixture
def checks(monkeypatch):
    """install(*infos): these are the only checks (plus ssh.connect), in the given order."""
    def install(*infos: CheckInfo) -> dict[str, CheckInfo]:
        every = {"ssh.connect": CONNECT, **{i.id: i for i in infos}}
        monkeypatch.setattr(registry, "discover", lambda: every)
        monkeypatch.setattr(runner, "discover", lambda: every)
        return every
    return install


@pytest.fixture
def inventory(tmp_path):
    def make(*names: str, extra: str = ""):
        p = tmp_path / "inv.yaml"
        p.write_text(extra + "nodes:\n" + "".join(f"  - {{name: {n}, host: localhost}}\n" for n in names))
        return load(p, ssh_config=str(tmp_path / "no-ssh-config"))
    return make


def results_of(report, node=None) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in report.results:
        if node is None or r.node == node:
            out.setdefault(r.check, []).append(r)
    return out


def one(report, check, node):
    found = [r for r in report.results if r.check == check and r.node == node]
    assert len(found) == 1, (check, node, report.results)
    return found[0]


# ---------------------------------------------------------------- dedup

class RecordingSession:
    def __init__(self):
        self.calls: list[list] = []

    def run(self, specs, cancel):
        self.calls.append(list(specs))
        return {s.key: CommandOutput(stdout=f"out of {s.cmd}") for s in specs}

    def close(self):
        pass


def test_run_batch_sends_identical_commands_once(inventory):
    node = inventory("n1").nodes[0]
    s = RecordingSession()
    got = run_batch(s, node, {
        "a": {"v": cmd("cat /etc/version"), "x": cmd("uname -r")},
        "b": {"ver": cmd("cat /etc/version", timeout=120), "y": cmd("hostname")},
        "c": {},
    }, threading.Event())
    assert len(s.calls) == 1, "one batch per node"
    cmds = [p.cmd for p in s.calls[0]]
    assert sorted(cmds) == ["cat /etc/version", "hostname", "uname -r"]
    assert len({p.key for p in s.calls[0]}) == 3
    shared = next(p for p in s.calls[0] if p.cmd == "cat /etc/version")
    assert shared.timeout == 120, "the longest timeout asked for wins"
    assert next(p for p in s.calls[0] if p.cmd == "hostname").timeout == node.probe_timeout
    assert got["a"]["v"].stdout == got["b"]["ver"].stdout == "out of cat /etc/version"
    assert got["a"]["x"].stdout == "out of uname -r" and got["c"] == {}


def test_run_batch_with_nothing_to_run_sends_nothing(inventory):
    s = RecordingSession()
    assert run_batch(s, inventory("n1").nodes[0], {"a": {}}, threading.Event()) == {"a": {}}
    assert s.calls == []


def test_runner_dedups_probes_of_two_checks(checks, inventory):
    s = RecordingSession()

    class T:
        def connect(self, node, cancel):
            return s

        def close(self):
            pass

    checks(node_check("fake.a", probes=lambda n, p: {"v": cmd("cat /etc/os-release")}),
           node_check("fake.b", probes=lambda n, p: {"os": cmd("cat /etc/os-release"), "k": cmd("uname -r")}))
    rep = Runner(inventory("n1"), T(), Options()).run()
    assert [sorted(p.cmd for p in c) for c in s.calls] == [["cat /etc/os-release", "uname -r"]]
    assert one(rep, "fake.a", "n1").status is Status.PASS and one(rep, "fake.b", "n1").status is Status.PASS


# ---------------------------------------------------------------- a real local run

def test_local_run_end_to_end(checks, inventory):
    seen = {}

    def evaluate(facts, params, node):
        seen[node.name] = (facts, params)
        return [Finding(Status.PASS, "ok")]

    checks(node_check("fake.echo", probes=lambda n, p: {"who": cmd("echo {n}", n=n.name), "rc": cmd("exit 3")},
                      parse=lambda outs: (outs["who"].stdout.strip(), outs["rc"].rc),
                      evaluate=evaluate, defaults={"limit": 1, "other": "d"}))
    inv = inventory("alpha", "beta", extra="checks:\n  fake.echo: {limit: 5}\n")
    rep = Runner(inv, LocalTransport(), Options()).run()
    assert seen == {"alpha": (("alpha", 3), {"limit": 5, "other": "d"}), "beta": (("beta", 3), {"limit": 5, "other": "d"})}
    assert rep.exit_code == 0 and rep.verdict == "ready"
    assert [n.state for n in rep.nodes] == [NodeStateKind.OK, NodeStateKind.OK]
    assert one(rep, "ssh.connect", "alpha").status is Status.PASS


# ---------------------------------------------------------------- a broken check never crashes the run

def test_evaluate_raising_becomes_error(checks, inventory):
    def boom(facts, params, node):
        raise RuntimeError("kaboom")

    checks(node_check("fake.boom", evaluate=boom), node_check("fake.fine"))
    rep = Runner(inventory("n1", "n2"), LocalTransport(), Options()).run()
    for n in ("n1", "n2"):
        r = one(rep, "fake.boom", n)
        assert r.status is Status.ERROR and "kaboom" in r.summary and "fake.boom" in r.summary
        assert one(rep, "fake.fine", n).status is Status.PASS
    assert rep.exit_code == 3


def test_parse_error_quotes_the_output(checks, inventory):
    def parse(outs):
        raise ParseError("unexpected line 'Chip ?? Alarm'", outs["hello"].stdout)

    checks(node_check("fake.parse", parse=parse))
    rep = Runner(inventory("n1"), LocalTransport(), Options()).run()
    r = one(rep, "fake.parse", "n1")
    assert r.status is Status.ERROR
    assert "could not read the output" in r.summary and "Chip ?? Alarm" in r.summary
    assert r.details.get("output") == "hello\n"


def test_parse_raising_anything_else_is_an_internal_error(checks, inventory):
    checks(node_check("fake.keyerr", parse=lambda outs: outs["missing"]))
    r = one(Runner(inventory("n1"), LocalTransport(), Options()).run(), "fake.keyerr", "n1")
    assert r.status is Status.ERROR and "KeyError" in r.summary


def test_a_plain_string_probe_is_refused_and_never_runs(checks, inventory, tmp_path):
    """The safe way is the only way: a probe must be a Probe built by checkapi.cmd() (which quotes
    every value); an f-string handed over as a plain str is the check's error and does not run."""
    marker = tmp_path / "ran"
    checks(node_check("fake.fstring", probes=lambda n, p: {"x": f"touch {marker}"}), node_check("fake.fine"))
    rep = Runner(inventory("n1"), LocalTransport(), Options()).run()
    r = one(rep, "fake.fstring", "n1")
    assert r.status is Status.ERROR and "checkapi.cmd()" in r.summary
    assert one(rep, "fake.fine", "n1").status is Status.PASS
    assert not marker.exists()


def test_probes_raising_does_not_crash_the_run(checks, inventory):
    def probes(node, params):
        raise ValueError("bad probe builder")

    checks(node_check("fake.probes", probes=probes), node_check("fake.fine"))
    rep = Runner(inventory("n1"), LocalTransport(), Options()).run()
    assert {r.check for r in rep.results} >= {"ssh.connect", "fake.probes", "fake.fine"}
    assert one(rep, "fake.probes", "n1").status is Status.ERROR


def test_no_finding_is_an_error(checks, inventory):
    checks(node_check("fake.empty", evaluate=lambda f, p, n: []))
    r = one(Runner(inventory("n1"), LocalTransport(), Options()).run(), "fake.empty", "n1")
    assert r.status is Status.ERROR


# ---------------------------------------------------------------- USES (node checks)

def test_a_node_check_receives_the_facts_of_the_checks_it_uses(checks, inventory):
    """Parsed first whatever the id order, handed to parse(outputs, used); the used check's probes
    run though it is not reported (registry.select's USES closure)."""
    def parse(outs, used):
        return {"own": outs["mine"].stdout.strip(), "used": used}

    checks(node_check("fake.a", probes=lambda n, p: {"mine": cmd("echo mine")}, parse=parse, uses=("fake.z",)),
           node_check("fake.z", probes=lambda n, p: {"base": cmd("echo base")}))
    rep = Runner(inventory("n1"), LocalTransport(), Options(checks=["fake.a"])).run()
    assert one(rep, "fake.a", "n1").summary == "fake.a saw {'own': 'mine', 'used': {'fake.z': {'base': 'base'}}}"
    assert not [r for r in rep.results if r.check == "fake.z"]


def test_a_used_check_that_cannot_be_read_is_handed_over_as_its_error(checks, inventory):
    """The user decides: raise it (its error is then this check's) or carry on without those facts."""
    def bad(outs):
        raise ParseError("Chip ?? Alarm", "hello\n")

    def parse(outs, used):
        raise used["fake.z"]

    checks(node_check("fake.a", parse=parse, uses=("fake.z",)), node_check("fake.z", parse=bad))
    r = one(Runner(inventory("n1"), LocalTransport(), Options(checks=["fake.a"])).run(), "fake.a", "n1")
    assert r.status is Status.ERROR and "could not read the output: Chip ?? Alarm" in r.summary


def test_a_follow_up_sees_the_facts_of_a_used_check_without_follow_ups(checks, inventory):
    """npu.idle's npu-smi table reaches the hccn.* follow-ups this way: parsed once, after round 1."""
    def followup(outs, node, params, used):
        return {"two": cmd("echo {n}", n=f"{used['fake.z']['base']}-2")}

    a = node_check("fake.a", probes=lambda n, p: {"one": cmd("echo one")},
                   parse=lambda outs, used: {k: o.stdout.strip() for k, o in outs.items()}, uses=("fake.z",))
    a.module.followup = followup
    checks(a, node_check("fake.z", probes=lambda n, p: {"base": cmd("echo base")}))
    rep = Runner(inventory("n1"), LocalTransport(), Options(checks=["fake.a"])).run()
    assert one(rep, "fake.a", "n1").summary == "fake.a saw {'one': 'one', 'two': 'base-2'}"


# ---------------------------------------------------------------- REQUIRES

def failing(cid):
    return node_check(cid, evaluate=lambda f, p, n: [Finding(Status.FAIL, "bad", remediation="fix it")])


def test_requires_blocks_with_a_skip_naming_the_blocker(checks, inventory):
    checks(failing("fake.a"), node_check("fake.b", requires=("fake.a",)))
    rep = Runner(inventory("n1"), LocalTransport(), Options()).run()
    b = one(rep, "fake.b", "n1")
    assert b.status is Status.SKIP and "fake.a" in b.summary and "fail" in b.summary
    assert one(rep, "fake.a", "n1").status is Status.FAIL


def test_requires_passing_dependency_does_not_block(checks, inventory):
    checks(node_check("fake.a"), node_check("fake.b", requires=("fake.a",)))
    assert one(Runner(inventory("n1"), LocalTransport(), Options()).run(), "fake.b", "n1").status is Status.PASS


def test_requires_blocks_whatever_the_id_order(checks, inventory):
    checks(node_check("fake.a", requires=("fake.z",)), failing("fake.z"))
    a = one(Runner(inventory("n1"), LocalTransport(), Options()).run(), "fake.a", "n1")
    assert a.status is Status.SKIP and "fake.z" in a.summary


# ---------------------------------------------------------------- unreachable nodes

class MixedTransport:
    """`down` is refused; everything else runs locally."""

    def __init__(self):
        self.local = LocalTransport()

    def connect(self, node, cancel):
        if node.name.startswith("down"):
            raise ConnectError(NodeStateKind.UNREACHABLE, f"{node.host}:22: connection refused")
        return self.local.connect(node, cancel)

    def close(self):
        pass


def test_unreachable_node_skips_its_checks_and_others_complete(checks, inventory):
    checks(node_check("fake.a"), node_check("fake.b"))
    rep = Runner(inventory("up1", "down1"), MixedTransport(), Options()).run()
    states = {n.name: n.state for n in rep.nodes}
    assert states == {"up1": NodeStateKind.OK, "down1": NodeStateKind.UNREACHABLE}
    c = one(rep, "ssh.connect", "down1")
    assert c.status is Status.ERROR and "refused" in c.summary and c.remediation
    for cid in ("fake.a", "fake.b"):
        assert (one(rep, cid, "down1").status, one(rep, cid, "down1").summary) == (Status.SKIP, "node unreachable")
        assert one(rep, cid, "up1").status is Status.PASS
    assert rep.exit_code == 3


def test_cluster_check_sees_reachable_nodes_only(checks, inventory):
    seen: dict = {}

    def evaluate(ctx: ClusterContext):
        seen["nodes"] = sorted(ctx.nodes)
        seen["facts"] = {n: dict(f) for n, f in ctx.facts.items()}
        seen["unreachable"] = ctx.unreachable
        return [Finding(Status.FAIL, "up2 differs", remediation="make it agree", node="up2")]

    checks(node_check("fake.a", probes=lambda n, p: {"h": cmd("echo {n}", n=n.name)}),
           cluster_check("fake.cluster", evaluate, uses=("fake.a",)))
    rep = Runner(inventory("up1", "up2", "down1"), MixedTransport(), Options(checks=["fake.cluster"])).run()
    assert seen["nodes"] == ["up1", "up2"] and seen["unreachable"] == ("down1",)
    assert seen["facts"]["up1"] == {"fake.a": {"h": "up1"}}
    assert "fake.a" not in {r.check for r in rep.results}, "USES runs probes but reports only what was selected"
    summary = one(rep, "fake.cluster", None)
    assert summary.status is Status.FAIL and summary.remediation
    assert one(rep, "fake.cluster", "up2").status is Status.FAIL
    assert rep.exit_code == 1


def test_cluster_check_raising_becomes_error(checks, inventory):
    def evaluate(ctx):
        raise ZeroDivisionError("no nodes")

    checks(cluster_check("fake.cluster", evaluate))
    r = one(Runner(inventory("n1"), LocalTransport(), Options()).run(), "fake.cluster", None)
    assert r.status is Status.ERROR and "ZeroDivisionError" in r.summary


def test_cluster_plan_runs_targeted_probes(checks, inventory):
    got = {}

    def plan(ctx):
        return {n: {"ping": cmd("echo pong-{n}", n=n)} for n in ctx.nodes}

    def evaluate(ctx):
        got.update({n: o["ping"].stdout.strip() for n, o in ctx.planned.items()})
        return [Finding(Status.PASS, "all pong")]

    checks(cluster_check("fake.mesh", evaluate, plan=plan))
    rep = Runner(inventory("a1", "a2"), LocalTransport(), Options()).run()
    assert got == {"a1": "pong-a1", "a2": "pong-a2"}
    assert one(rep, "fake.mesh", None).status is Status.PASS


# ---------------------------------------------------------------- deadline

class DeadlineTransport:
    """`fast*` nodes answer at once; `slow*` nodes block in run(): until cancel (polite) or until the
    test releases them (hung, ignoring cancel)."""

    def __init__(self, polite: bool):
        self.polite = polite
        self.release = threading.Event()

    def connect(self, node, cancel):
        transport = self

        class S:
            def run(self, specs, c):
                if node.name.startswith("slow"):
                    if transport.polite:
                        c.wait(30)
                    else:
                        transport.release.wait(30)
                    return unfinished(specs, {}, "cancelled (run deadline or interrupt)")
                return {p.key: CommandOutput(stdout="hello\n") for p in specs}

            def close(self):
                pass
        return S()

    def close(self):
        pass


def _deadline_run(checks, inventory, polite: bool):
    checks(node_check("fake.a"))
    t = DeadlineTransport(polite)
    try:
        t0 = time.monotonic()
        rep = Runner(inventory("fast1", "slow1"), t, Options(deadline=0.5)).run()
        elapsed = time.monotonic() - t0
    finally:
        t.release.set()
    return rep, elapsed


def _assert_deadline_report(rep):
    states = {n.name: n.state for n in rep.nodes}
    assert states["fast1"] is NodeStateKind.OK
    assert one(rep, "fake.a", "fast1").status is Status.PASS, "finished results are kept"
    assert states["slow1"] is NodeStateKind.TIMEOUT
    assert one(rep, "fake.a", "slow1").status is Status.ERROR
    assert rep.exit_code == 3


def test_deadline_hung_node_is_timeout(checks, inventory):
    rep, elapsed = _deadline_run(checks, inventory, polite=False)
    assert elapsed < 10
    _assert_deadline_report(rep)


def test_deadline_node_that_stops_on_cancel_is_timeout(checks, inventory):
    rep, elapsed = _deadline_run(checks, inventory, polite=True)
    assert elapsed < 5
    _assert_deadline_report(rep)


def test_deadline_real_local_sleep(checks, inventory):
    checks(node_check("fake.sleep", probes=lambda n, p: {"s": cmd("sleep 45.625")}))
    t0 = time.monotonic()
    rep = Runner(inventory("n1"), LocalTransport(), Options(deadline=0.7)).run()
    assert time.monotonic() - t0 < 10
    assert one(rep, "fake.sleep", "n1").status is Status.ERROR
    assert rep.exit_code == 3
    import subprocess
    end = time.monotonic() + 10
    while time.monotonic() < end:
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, timeout=10).stdout
        if "sleep 45.625" not in ps:
            break
        time.sleep(0.1)
    assert "sleep 45.625" not in ps, "the deadline left the probe running"


def test_strict_makes_a_warning_fail(checks, inventory):
    checks(node_check("fake.warn", evaluate=lambda f, p, n: [Finding(Status.WARN, "meh", remediation="tune it")]))
    inv = inventory("n1")
    assert Runner(inv, LocalTransport(), Options()).run().exit_code == 0
    assert Runner(inv, LocalTransport(), Options(strict=True)).run().exit_code == 1


def test_a_node_whose_output_a_cluster_check_could_not_read_is_an_error_there(checks, inventory):
    """A cluster check with probes of its own (sw.consistency, plan.parallel, ...): a node whose
    output its parser refuses is left out of the context, so the check itself never sees it; the
    runner names it as an error on that node, and the run is not ready."""
    def parse(outs):
        text = outs["who"].stdout.strip()
        if text == "n2":
            raise ParseError("unexpected answer", text)
        return text

    info = CheckInfo("fake.cons", "cluster",
                     module("fake.cons", probes=lambda node, params: {"who": cmd("echo {n}", n=node.name)},
                            parse=parse, evaluate=lambda ctx: [Finding(Status.PASS, f"judged {sorted(n for n, f in ctx.facts.items() if f)}")]),
                     (), (), {})
    checks(info)
    rep = Runner(inventory("n1", "n2", "n3"), LocalTransport(), Options()).run()
    assert one(rep, "fake.cons", None).summary == "judged ['n1', 'n3']; 1 node(s) could not be read (see their errors)"
    bad = one(rep, "fake.cons", "n2")
    assert bad.status is Status.ERROR and "could not read the output: unexpected answer" in bad.summary
    assert rep.exit_code != 0
