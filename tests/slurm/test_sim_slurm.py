"""The test bed's real Slurm: slurmctld on the control side, one slurmd per simulated node in its
network namespace, and `sim down` stopping every daemon by PID and removing Slurm's state."""
from __future__ import annotations

import subprocess
from pathlib import Path

import psutil

from preflight.sim import slurm as sim_slurm
from tests.simfixtures import requires_slurm

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
