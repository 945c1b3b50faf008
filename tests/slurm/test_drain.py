"""gate --drain / --resume / --dry-run / --drain-unreachable against real slurmctld and slurmd:
NHC's rule (only resume what we drained, never touch another reason) as Slurm itself reports it."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from preflight.sim import slurm as sim_slurm
from tests.simfixtures import requires_slurm

pytestmark = requires_slurm
SLURM_SPEC = {"nodes": 5}
PREFLIGHT = [sys.executable, "-m", "preflight.cli"]


@pytest.fixture
def c(slurm_cluster):
    """The module's cluster, healthy and every Slurm node idle after each test."""
    yield slurm_cluster
    slurm_cluster.reset()
    if slurm_cluster.sshd_pid("node05") is None:
        slurm_cluster.start_sshd("node05")
    sim_slurm.resume_all(slurm_cluster)
    sim_slurm.wait_idle(slurm_cluster, [n.name for n in slurm_cluster.nodes], 30)


def gate(c, *args, env=None):
    return subprocess.run([*PREFLIGHT, "gate", str(c.inventory_path), "--format", "json", *args],
                          capture_output=True, text=True, timeout=120, env=env or c.slurm_env())


def slurm(c):
    cp = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%t|%E"], env=c.slurm_env(), capture_output=True,
                        text=True, timeout=30, check=True)
    # Slurm marks a resumed node not responding (`idle*`) until its next ping, a second later: the
    # state that matters here is the base one
    return {n: (s.rstrip("*"), r) for n, s, r in (line.split("|", 2) for line in cp.stdout.splitlines())}


def operator_drain(c, node, reason):
    subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"],
                   env=c.slurm_env(), check=True, capture_output=True, timeout=30)


def test_drain_failing_node_and_leave_someone_elses_alone(c):
    c.inject("node02", "npu_health", device=3, status="Alarm", codes=["A4025021"])
    c.inject("node03", "npu_health", device=1, status="Alarm", codes=["A4025021"])
    operator_drain(c, "node03", "bad dimm, ticket 4411")
    cp = gate(c, "--drain")
    assert cp.returncode == 1, cp.stderr
    st = slurm(c)
    assert st["node02"][0] == "drain"
    assert st["node02"][1].startswith("preflight: npu.health ") and "device 3" in st["node02"][1]
    assert st["node03"] == ("drain", "bad dimm, ticket 4411")
    assert {st[n][0] for n in ("node01", "node04", "node05")} == {"idle"}
    assert "node03" in cp.stderr and "not ours" in cp.stderr and "left alone" in cp.stderr


def test_later_passing_run_resumes_only_ours(c):
    c.inject("node02", "npu_health", device=3, status="Alarm", codes=["A4025021"])
    assert gate(c, "--drain").returncode == 1
    assert slurm(c)["node02"][0] == "drain"
    operator_drain(c, "node04", "maintenance window")
    c.reset("node02")
    cp = gate(c, "--drain")
    assert cp.returncode == 0, cp.stderr
    st = slurm(c)
    assert st["node02"] == ("idle", "none")
    assert st["node04"] == ("drain", "maintenance window")
    assert "node04" in cp.stderr and "not ours" in cp.stderr


def test_resume_resumes_only_our_prefix(c):
    operator_drain(c, "node01", "preflight: hccn.link device 5 link DOWN, expected UP")
    operator_drain(c, "node04", "preflightish: somebody else's tool")
    cp = gate(c, "--resume")
    assert cp.returncode == 0, cp.stderr
    st = slurm(c)
    assert st["node01"] == ("idle", "none")
    assert st["node04"] == ("drain", "preflightish: somebody else's tool")


def test_without_drain_nothing_changes_in_slurm(c):
    c.inject("node02", "npu_health", device=3, status="Alarm", codes=["A4025021"])
    operator_drain(c, "node01", "preflight: an older finding")
    before = slurm(c)
    cp = gate(c)
    assert cp.returncode == 1
    assert slurm(c) == before
    assert "slurm:" not in cp.stderr


def test_dry_run_prints_the_scontrol_lines_and_changes_nothing(c):
    c.inject("node02", "npu_health", device=3, status="Alarm", codes=["A4025021"])
    operator_drain(c, "node01", "preflight: npu.health an older finding")
    before = slurm(c)
    cp = gate(c, "--drain", "--dry-run")
    assert cp.returncode == 1
    assert slurm(c) == before
    lines = [ln for ln in cp.stderr.splitlines() if "dry run:" in ln]
    assert any(ln.endswith("scontrol update NodeName=node02 State=DRAIN 'Reason=preflight: npu.health "
                           + slurm_reason(cp, "node02") + "'") for ln in lines), lines
    assert any(ln.endswith("scontrol update NodeName=node01 State=RESUME") for ln in lines), lines
    assert len(lines) == 2


def slurm_reason(cp, node):
    """The finding after `preflight: npu.health ` in the dry-run line of node."""
    line = next(ln for ln in cp.stderr.splitlines() if f"NodeName={node} State=DRAIN" in ln)
    return line.split("Reason=preflight: npu.health ", 1)[1].rstrip("'")


def test_unreachable_drained_only_with_drain_unreachable(c):
    c.stop_sshd("node05")
    cp = gate(c, "--drain")
    assert cp.returncode == 3
    assert slurm(c)["node05"] == ("idle", "none")
    assert "node05" in cp.stderr and "--drain-unreachable" in cp.stderr
    cp = gate(c, "--drain-unreachable")
    assert cp.returncode == 3
    state, reason = slurm(c)["node05"]  # (down* once SlurmdTimeout passes: slurmd is up, sshd is not)
    assert state == "drain" and reason.startswith("preflight: ssh.connect unreachable")
    # a node we cannot reach is never resumed, even by --resume
    assert gate(c, "--resume").returncode == 3
    assert slurm(c)["node05"][0] == "drain"


def test_scontrol_denied_is_one_line_and_its_own_code(c, tmp_path):
    """The real scontrol, run as a user who is not a Slurm operator (nobody): exit 8, nothing drained."""
    c.inject("node02", "npu_health", device=3, status="Alarm", codes=["A4025021"])
    wrapper = tmp_path / "bin" / "scontrol"
    wrapper.parent.mkdir()
    wrapper.write_text("#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/scontrol \"$@\"\n")
    wrapper.chmod(0o755)
    # nobody must reach slurm.conf and the munge socket: let it through the directories above them
    dirs = [d for d in (Path(c.rec["slurm"]["dir"]), c.dir, c.dir.parent)]
    modes = {d: stat.S_IMODE(d.stat().st_mode) for d in dirs}
    try:
        for d in dirs:
            d.chmod(modes[d] | 0o011)
        env = dict(c.slurm_env(), PATH=f"{wrapper.parent}:{os.environ['PATH']}")
        before = slurm(c)
        cp = gate(c, "--drain", env=env)
    finally:
        for d, m in modes.items():
            d.chmod(m)
    assert cp.returncode == 8, cp.stderr
    errors = [ln for ln in cp.stderr.splitlines() if ln.startswith("preflight:")]
    assert len(errors) == 1 and "scontrol refused" in errors[0] and "operator" in errors[0]
    assert "Traceback" not in cp.stderr
    assert slurm(c) == before


def test_drain_on_drains_only_nodes_whose_failures_need_those_actions(c):
    """`gate --drain --drain-on ACTIONS`: a node whose failure needs another action is excluded from
    the job but not handed to repair (npu.health's codes A4025021 8C03A000 8C084E00 grade
    reset_device by the vendor's fault-code table; a leftover process on an NPU, restart_process)."""
    c.inject("node02", "npu_health", device=3, status="Alarm", codes=["A4025021", "8C03A000", "8C084E00"])
    c.inject("node04", "npu_process", device=0, pid=4242, name="python3")
    cp = gate(c, "--drain", "--drain-on", "reset_device,replace_hardware")
    assert cp.returncode == 1, cp.stderr
    st = slurm(c)
    assert st["node02"][0] == "drain" and st["node02"][1].startswith("preflight: npu.health ")
    assert st["node04"][0] == "idle", st["node04"]
    assert "drain-on reset_device,replace_hardware: node02" in cp.stderr
    assert "node04" in cp.stderr and "not drained: its failures need none of --drain-on's actions" in cp.stderr


def test_resumed_only_when_the_draining_check_ran_again_and_passed(c):
    """Issue 29 finding 8: a node drained for npu.health was resumed by a later gate that ran only
    ssh.connect. Now the Reason names the checks that drained it, and a resume needs each to pass."""
    c.inject("node02", "npu_health", device=3, status="Alarm", codes=["A4025021"])
    assert gate(c, "--drain").returncode == 1
    assert slurm(c)["node02"][0] == "drain"
    c.reset("node02")
    cp = gate(c, "--drain", "--resume", "--checks", "ssh.connect")
    assert cp.returncode == 0, cp.stderr
    assert slurm(c)["node02"][0] == "drain"
    assert "node02" in cp.stderr and "npu.health did not run again and pass" in cp.stderr
    cp = gate(c, "--drain", "--checks", "npu.health")
    assert cp.returncode == 0, cp.stderr
    assert slurm(c)["node02"] == ("idle", "none")


def test_local_drain_acts_on_slurmd_nodename_not_the_host_name(c, tmp_path):
    """Issue 29 finding 10: a prolog's `gate --local --drain` drained the host name. This host has
    no npu-smi, so npu.health fails here; Slurm's name for the node (SLURMD_NODENAME) is drained."""
    env = dict(c.slurm_env(), SLURMD_NODENAME="node03")
    cp = subprocess.run([*PREFLIGHT, "gate", "--local", "--drain", "--checks", "npu.health", "--format", "json"],
                        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert cp.returncode == 1, cp.stderr
    state, reason = slurm(c)["node03"]
    assert state == "drain" and reason.startswith("preflight: npu.health "), (state, reason)
