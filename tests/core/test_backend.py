"""Backends: `backend: auto` decided per node, checks of the other backend skipped with the
reason (no probe sent), the checklist split by backend when both are present."""
from __future__ import annotations

from preflight.checkapi import cmd

import dataclasses

from preflight import backend as B
from preflight.model import CommandOutput, NodeState, Report, Result, Status
from preflight.report import group, markdown
from preflight.runner import Options, Runner
from tests.core.test_local_runner import checks, inventory, node_check  # noqa: F401 - fixtures


class Session:
    """Answers the detection probe as a node with `tools` would; records every command."""

    def __init__(self, tools):
        self.tools, self.cmds = tools, []

    def run(self, specs, cancel):
        out = {}
        for s in specs:
            self.cmds.append(s.cmd)
            if s.cmd == B.DETECT and self.tools is None:  # the probe never answered
                out[s.key] = CommandOutput(rc=None, error="connection lost")
                continue
            text = "".join(f"@@has {t}\n" for t in self.tools) if s.cmd == B.DETECT else "x\n"
            out[s.key] = CommandOutput(stdout=text)
        return out

    def close(self):
        pass


class Transport:
    def __init__(self, tools_by_node):
        self.sessions = {n: Session(t) for n, t in tools_by_node.items()}

    def connect(self, node, cancel):
        return self.sessions[node.name]

    def close(self):
        pass


def test_decide_from_what_the_node_has():
    out = lambda *t: CommandOutput(stdout="".join(f"@@has {x}\n" for x in t))
    assert B.decide(out("npu-smi")).backend == "ascend"
    assert B.decide(out("nvidia-smi")) == B.Decision("nvidia", "backend: auto -> nvidia (nvidia-smi found)")
    assert "both" in B.decide(out("npu-smi", "nvidia-smi")).how
    assert "assumed" in B.decide(out()).how


def _with_backend(info, backend):
    return dataclasses.replace(info, policy=dataclasses.replace(info.policy, backend=backend))


def test_auto_nodes_get_their_backend_and_other_backend_checks_skip_without_probes(checks, inventory):
    checks(_with_backend(node_check("npu.fake", probes=lambda n, p: {"a": cmd("npu-probe")}), "ascend"),
           _with_backend(node_check("gpu.fake", probes=lambda n, p: {"g": cmd("gpu-probe")}), "nvidia"),
           node_check("any.fake", probes=lambda n, p: {"e": cmd("env-probe")}))
    t = Transport({"n1": ["npu-smi"], "n2": ["nvidia-smi"]})
    rep = Runner(inventory("n1", "n2"), t, Options()).run()
    res = {(r.check, r.node): r for r in rep.results}
    assert res[("ssh.connect", "n2")].details["backend"] == "nvidia"
    assert "nvidia-smi found" in res[("ssh.connect", "n2")].details["backend_from"]
    assert res[("gpu.fake", "n1")].status is Status.SKIP
    assert res[("gpu.fake", "n1")].summary.startswith("NVIDIA check: this is an Ascend node")
    assert res[("npu.fake", "n2")].status is Status.SKIP and res[("gpu.fake", "n2")].status is Status.PASS
    assert "gpu-probe" not in t.sessions["n1"].cmds and "npu-probe" not in t.sessions["n2"].cmds
    assert {n.name: n.backend for n in rep.nodes} == {"n1": "ascend", "n2": "nvidia"}


def test_a_failed_detection_guesses_nothing(checks, inventory):
    """No answer to the detection probe: the backend checks are `error` with the reason, never
    run as the wrong backend; checks for every backend still run."""
    checks(_with_backend(node_check("npu.fake"), "ascend"), _with_backend(node_check("gpu.fake"), "nvidia"),
           node_check("any.fake"))
    t = Transport({"n1": None})
    rep = Runner(inventory("n1"), t, Options()).run()
    res = {r.check: r for r in rep.results}
    assert res["npu.fake"].status is Status.ERROR and res["gpu.fake"].status is Status.ERROR
    assert "could not tell this node's backend" in res["npu.fake"].summary and "connection lost" in res["npu.fake"].summary
    assert res["any.fake"].status is Status.PASS and rep.exit_code == 3


def test_declared_backend_sends_no_detection_probe(checks, inventory):
    checks(_with_backend(node_check("gpu.fake"), "nvidia"))
    t = Transport({"n1": []})
    Runner(inventory("n1", extra="defaults: {backend: nvidia}\n"), t, Options()).run()
    assert B.DETECT not in t.sessions["n1"].cmds


def _report(nodes, results):
    return Report("t0", "t1", "inv.yaml", "0" * 64, tuple(nodes), tuple(results))


def test_checklist_and_markdown_group_by_backend_when_both_are_present():
    nodes = [NodeState("a1", "h", backend="ascend"), NodeState("a2", "h", backend="ascend"),
             NodeState("g1", "h", backend="nvidia")]
    results = [Result("ssh.connect", n.name, Status.PASS, "connected") for n in nodes] + [
        Result("gpu.health", "g1", Status.FAIL, "GPU 3 bad", remediation="reset"),
        Result("sw.consistency", None, Status.PASS, "identical")]
    rep = _report(nodes, results)
    secs = group.sections(rep, group.grouped(rep))
    assert [t for t, _ in secs] == ["Ascend nodes", "NVIDIA nodes", "cluster"]
    assert [g.nodes for g in secs[0][1]] == [("a1", "a2")]
    md = markdown.render(rep)
    assert md.index("### Ascend nodes") < md.index("### NVIDIA nodes") < md.index("GPU 3 bad")
    one = _report(nodes[:2], results[:2])
    assert group.sections(one, group.grouped(one))[0][0] is None and "###" not in markdown.render(one)
