"""`gate --drain-on ACTIONS`: only nodes whose failures need one of the named actions are selected
for repair (the Slurm drain acts on this selection); a bad action name is a usage error."""
from __future__ import annotations

from click.testing import CliRunner

from preflight.cli import main
from preflight.model import NodeState, NodeStateKind, Report, Result, Status
from preflight.ops.gate import drain_selection

SIM_SPEC = {"nodes": 3}
SIM_MODE = "loopback"


def _gate(inv: str, *extra: str):
    return CliRunner().invoke(main, ["gate", inv, "--checks", "npu.health,hccn.link", "-q", "--deadline", "600", *extra])


def test_drain_on_selects_by_action_on_the_sim(sim_cluster):
    inv = str(sim_cluster.inventory_path)
    sim_cluster.inject("node01", "npu_health", device=2, status="Alarm")   # codes grade reset_device
    sim_cluster.inject("node02", "link_down", device=5)                    # replace_hardware
    sim_cluster.inject("node03", "link_flap", device=1, count=4)           # warn, monitor
    try:
        r = _gate(inv, "--drain-on", "replace_hardware")
        assert r.exit_code == 1
        first = r.stderr.splitlines()[0]
        assert first == "preflight: drain-on replace_hardware: node02", r.stderr
        r = _gate(inv, "--drain-on", "reset_device,replace_hardware")
        assert r.stderr.splitlines()[0].endswith(": node[01-02]"), r.stderr
        assert "node01: npu.health reset_device" in r.stderr
        r = _gate(inv, "--drain-on", "monitor")
        assert r.stderr.splitlines()[0].endswith(": no node"), r.stderr  # a warn is no failure ...
        r = _gate(inv, "--drain-on", "monitor", "--strict")
        assert r.stderr.splitlines()[0].endswith(": node03"), r.stderr   # ... unless --strict
    finally:
        for n in ("node01", "node02", "node03"):
            sim_cluster.reset(n)


def test_a_command_run_in_process_counts_its_deadline_from_its_own_start(sim_cluster):
    """A library caller (or CliRunner) runs commands long after its process started: --deadline
    counts from the command's invocation there, from the process start only when preflight is the
    process (a late gate in a long pytest run once found its 600 s spent before it began)."""
    import time

    import psutil

    time.sleep(max(0.0, 3.5 - (time.time() - psutil.Process().create_time())))  # bounded: 3.5 s at most
    r = CliRunner().invoke(main, ["gate", str(sim_cluster.inventory_path), "--checks", "npu.health", "-q",
                                  "--deadline", "3"])
    assert r.exit_code == 0, r.output


def test_drain_on_refuses_an_unknown_action(sim_cluster):
    r = _gate(str(sim_cluster.inventory_path), "--drain-on", "reboot,replace_hardware")
    assert r.exit_code == 2
    assert "unknown action reboot" in r.stderr and "Traceback" not in r.stderr


def test_unreachable_counts_as_reboot_node():
    rep = Report("t", "t", "i", "", (NodeState("a", "h"), NodeState("b", "h", NodeStateKind.UNREACHABLE, "refused")),
                 (Result("hccn.link", "a", Status.FAIL, "link DOWN", remediation="x", action="replace_hardware"),))
    assert list(drain_selection(rep, {"reboot_node"})) == ["b"]
    assert list(drain_selection(rep, {"replace_hardware"})) == ["a"]
    assert list(drain_selection(rep, {"reboot_node", "replace_hardware"})) == ["a", "b"]
