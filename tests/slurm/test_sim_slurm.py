"""The test bed's real Slurm: slurmctld on the control side, one slurmd per simulated node in its
network namespace, and `sim down` stopping every daemon by PID and removing Slurm's state."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil

from preflight.sim import slurm as sim_slurm
from preflight.sim.fixtures import requires_slurm

pytestmark = requires_slurm
SLURM_SPEC = {"nodes": 4}


def test_srun_runs_on_two_namespace_nodes(slurm_cluster):
    c = slurm_cluster
    cp = subprocess.run(["srun", "-N2", "--ntasks-per-node=1", "sh", "-c",
                         "echo $(hostname) $SLURMD_NODENAME $(ip -o -4 addr show eth0 | awk '{print $4}')"],
                        env=c.slurm_env(), capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    rows = sorted(line.split() for line in cp.stdout.splitlines())
    assert len(rows) == 2
    hosts = {n.name: n.host for n in c.nodes}
    for hostname, slurmd_name, cidr in rows:
        # the task ran inside that node: its own host name and its own address in its namespace
        assert hostname == slurmd_name and hostname in hosts
        assert cidr.split("/")[0] == hosts[hostname]
    assert rows[0][0] != rows[1][0]


def test_slurmd_sees_the_node_tree(slurm_cluster):
    """A prolog or job runs where npu-smi is the node's own (the same mounts as its sshd)."""
    c = slurm_cluster
    c.inject("node03", "npu_health", device=2, status="Alarm", codes=["A4025021"])
    try:
        cp = subprocess.run(["srun", "-w", "node03", "-N1", "/usr/local/sbin/npu-smi", "info", "-t", "health",
                             "-i", "2", "-c", "0"], env=c.slurm_env(), capture_output=True, text=True, timeout=60)
        assert cp.returncode == 0, cp.stderr
        assert "Alarm" in cp.stdout
        assert cp.stdout == c.exec("node03", "npu-smi info -t health -i 2 -c 0").stdout
    finally:
        c.reset("node03")


def test_every_node_registers_idle(slurm_cluster):
    assert sim_slurm.node_states(slurm_cluster) == {n.name: "idle" for n in slurm_cluster.nodes}


def test_down_stops_every_daemon_and_removes_state(sim_cluster_factory):
    c = sim_cluster_factory({"nodes": 2, "slurm": True}, mode="netns")
    daemons = [r for r in c.rec["procs"] if r["what"] in sim_slurm.DAEMONS]
    assert sorted(r["what"] for r in daemons) == ["munged", "slurmctld", "slurmd", "slurmd"]
    assert all(psutil.pid_exists(r["pid"]) for r in daemons)
    sdir = Path(c.rec["slurm"]["dir"])
    assert (sdir / "state").is_dir() and (sdir / "munge.key").stat().st_mode & 0o077 == 0
    c.down()
    alive = [r["pid"] for r in daemons if psutil.pid_exists(r["pid"])
             and psutil.Process(r["pid"]).status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    assert not sdir.exists()


def _results(path):
    import json
    rep = json.loads(Path(path).read_text())
    return {(r["check"], r["node"]): (r["status"], r["summary"]) for r in rep["results"]}, rep["exit_code"]


def test_run_via_slurm_reports_what_ssh_reports(slurm_cluster, tmp_path):
    """The same driver through srun: every result equal to the SSH run's, apart from ssh.connect
    (and round-trip times, which differ run to run)."""
    c = slurm_cluster
    c.inject("node02", "npu_health", device=3, status="Alarm", codes=["A4025021"])
    c.inject("node04", "link_down", device=5)
    try:
        outs = {}
        for via in ("ssh", "slurm"):
            cp = subprocess.run([sys.executable, "-m", "preflight.cli", "run", str(c.inventory_path), "--via", via,
                                 "--skip", "smoke.allreduce", "--format", "json", "--quiet",
                                 "--output", str(tmp_path / f"{via}.json")],
                                env=c.slurm_env(), capture_output=True, text=True, timeout=300)
            assert cp.returncode == 1, cp.stderr
            outs[via] = _results(tmp_path / f"{via}.json")
    finally:
        c.reset()
    (ssh, ssh_rc), (srun, srun_rc) = outs["ssh"], outs["slurm"]
    assert ssh_rc == srun_rc == 1
    assert ssh.keys() == srun.keys()
    differ = {k for k in ssh if ssh[k] != srun[k] and k[0] not in ("ssh.connect", "net.ping_mesh")}
    assert differ == set()
    assert ssh[("net.ping_mesh", None)][0] == srun[("net.ping_mesh", None)][0]
    assert srun[("npu.health", "node02")][0] == "fail" and srun[("hccn.link", "node04")][0] == "fail"
    assert "srun" in srun[("ssh.connect", "node01")][1]
