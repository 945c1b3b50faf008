"""Integration: a node without iproute2 and ss (and ping) is judged from /proc and /sys, over real SSH.

The real H200 node (tests/fixtures/nvidia/README-H200.md) had no `ip`, and env.comm failed it with
"install iproute2". Here node02 of a simulated cluster has `ip`, `ss` and `ping` not installed (the
spec's hide_tools: overlayfs whiteouts in the node's mount namespace, so every path to them is
gone), node01 has them all: both pass, node02's results name the source they read instead.
"""
from __future__ import annotations

import subprocess

import pytest

from preflight import inventory as inv_mod
from preflight import runner
from preflight.checks import env_comm
from preflight.model import Status
from preflight.net import iproute
from tests.simfixtures import requires_netns
from preflight.transport.ssh import SSHTransport

pytestmark = requires_netns
SPEC = {"nodes": [{"name": "node01"}, {"name": "node02", "hide_tools": ["ip", "ss", "ping"]}]}


@pytest.fixture(scope="module")
def cluster(sim_cluster_factory):
    return sim_cluster_factory(SPEC, mode="netns")


@pytest.fixture(scope="module")
def report(cluster):
    return runner.run(inv_mod.load(cluster.inventory_path), SSHTransport(),
                      runner.Options(checks=["env.comm", "net.ports", "net.ping_mesh", "env.consistency"]))


def result(report, check, node):
    return next(r for r in report.results if r.check == check and r.node == node)


def test_the_tools_are_gone_on_node02_only(cluster):
    gone = cluster.exec("node02", "command -v ip ss ping; ls /sbin/ip /usr/sbin/ip /usr/bin/ss 2>&1; exit 0")
    assert gone.stdout.count("No such file") == 3 and "/ip\n" not in gone.stdout.replace("/sbin/ip:", ""), gone
    here = cluster.exec("node01", "command -v ip ss")
    assert here.returncode == 0 and here.stdout.count("/") >= 2


def test_env_comm_reads_proc_where_ip_is_missing(report, cluster):
    mine, other = result(report, "env.comm", "node02"), result(report, "env.comm", "node01")
    assert mine.status is Status.PASS, mine.summary
    assert "interfaces read from /sys/class/net + /proc/net (no `ip` on the node)" in mine.summary
    assert mine.details["interfaces_source"] == "/sys/class/net + /proc/net"
    assert other.status is Status.PASS and other.details["interfaces_source"] == "ip -j addr"
    assert mine.details["comm"]["ip"] == cluster.node("node02").host  # HCCL_IF_IP found on eth0
    # the oracle: the host's iproute2 run in node02's network namespace
    ip = subprocess.run(["ip", "-n", cluster.node("node02").namespace, "-j", "addr", "show"], capture_output=True,
                        text=True, check=True)
    oracle = env_comm.Facts(env={}, interfaces=iproute.parse_json(ip.stdout))
    assert mine.details["interfaces"] == env_comm._ifs_summary(oracle)


def test_net_ports_reads_proc_net_tcp_where_ss_is_missing(report):
    mine, other = result(report, "net.ports", "node02"), result(report, "net.ports", "node01")
    assert mine.status is other.status and mine.status in (Status.PASS, Status.WARN), mine.summary
    assert mine.details["source"] == "/proc/net/tcp" and other.details["source"] == "ss"


def test_mesh_and_consistency_pass(report):
    mesh = next(r for r in report.results if r.check == "net.ping_mesh" and r.node is None)
    assert mesh.status is Status.PASS and mesh.summary.startswith("2 pairs between 2 nodes answer"), mesh.summary
    cons = [r for r in report.results if r.check == "env.consistency"]
    assert cons and all(r.status in (Status.PASS, Status.SKIP) for r in cons), [(r.node, r.summary) for r in cons]
