"""Sweep mode: a node busy with a job is reported busy (skip, with its processes), not failed,
and disruptive checks leave it alone."""
from __future__ import annotations

import types

from preflight.checkapi import Policy, passed
from preflight.inventory import load
from preflight.model import CommandOutput, Status
from preflight.registry import CheckInfo
from preflight.runner import Runner
from preflight.runner import Options
from preflight.ops.sweep import Sweep
from tests.ops import ScriptedTransport
from tests.support import fixture_body

BUSY = fixture_body("npu-smi_info__910B3_8card_1proc__vllm-ascend-6512.txt")
IDLE = fixture_body("npu-smi_info__910B1_8card_idle_npu-smi24.1.0__vllm-ascend-4037.txt")


def _answer(npu_smi: str):
    def answer(cmd: str) -> CommandOutput:
        if "npu-smi info" in cmd:
            return CommandOutput(npu_smi, "", 0)
        return CommandOutput("", "sh: tool: not found", 127)
    return answer


def _inventory(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - {name: node01, host: 10.0.0.1}\n  - {name: node02, host: 10.0.0.2}\n")
    return load(inv)


def _fake_disruptive(seen: dict):
    def evaluate(ctx):
        seen["nodes"] = sorted(ctx.nodes)
        return [passed(f"ran on {len(ctx.nodes)} nodes")]
    mod = types.SimpleNamespace(plan=lambda ctx: {}, evaluate=evaluate)
    return CheckInfo("smoke.allreduce", "cluster", mod, (), (), {}, Policy(disruptive=True))


def _run(tmp_path, sweep, checks, seen=None):
    transport = ScriptedTransport({"node01": _answer(BUSY), "node02": _answer(IDLE)})
    runner = Runner(_inventory(tmp_path), transport, Options(checks=checks), mode=Sweep() if sweep else None)
    if seen is not None:  # a stand-in disruptive check (Policy(disruptive=True))
        runner.every = {**runner.every, "smoke.allreduce": _fake_disruptive(seen)}
        runner.reported.append("smoke.allreduce")
        runner.active.append("smoke.allreduce")
    return runner.run()


def _by(report, check, node):
    return [r for r in report.results if r.check == check and r.node == node]


def test_without_sweep_a_busy_node_fails_npu_idle(tmp_path):
    report = _run(tmp_path, False, ["npu.idle"])
    assert _by(report, "npu.idle", "node01")[0].status is Status.FAIL


def test_sweep_reports_busy_as_skip_with_the_processes(tmp_path):
    report = _run(tmp_path, True, ["npu.idle", "net.ports"])
    busy = _by(report, "npu.idle", "node01")[0]
    assert busy.status is Status.SKIP and busy.summary.startswith("busy: a job is running")
    assert busy.details["busy"] is True and busy.details["processes"][0]["npu"] == 2
    assert busy.remediation is None
    assert _by(report, "npu.idle", "node02")[0].status is Status.PASS
    ports = _by(report, "net.ports", "node01")[0]
    assert ports.status is Status.SKIP and "busy" in ports.summary
    assert not any(r.status is Status.SKIP and "busy" in r.summary for r in report.results if r.node == "node02")


def test_sweep_keeps_disruptive_checks_off_busy_nodes(tmp_path):
    seen: dict = {}
    report = _run(tmp_path, True, ["hccn.link"], seen)
    assert seen["nodes"] == ["node02"]
    rows = [(r.node, r.status) for r in report.results if r.check == "smoke.allreduce"]
    assert rows == [(None, Status.PASS), ("node01", Status.SKIP)]
    # npu.idle was not selected: its probes ran for the decision, but it is not reported
    assert not [r for r in report.results if r.check == "npu.idle"]
    seen.clear()
    _run(tmp_path, False, ["hccn.link"], seen)
    assert seen["nodes"] == ["node01", "node02"]
