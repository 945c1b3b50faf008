"""Loopback mode (no root needed): N sshd on 127.0.0.1, trees reached via ascend_home and PATH."""
from __future__ import annotations

import pytest
import yaml

from preflight.sim import Cluster, render_npusmi

from .sshutil import Shell

SIM_MODE = "loopback"
SIM_SPEC = {"nodes": 3, "defaults": {"layout": "910B"}}


@pytest.fixture(scope="module")
def sh(sim_cluster: Cluster):
    s = Shell(sim_cluster)
    yield s
    s.close()


def test_nodes_on_distinct_ports_with_strict_host_keys(sim_cluster: Cluster, sh: Shell) -> None:
    ports = {n.port for n in sim_cluster.nodes}
    assert len(ports) == 3 and all(n.host == "127.0.0.1" for n in sim_cluster.nodes)
    for n in sim_cluster.nodes:
        assert sh.run(n.name, "echo ok")[1] == "ok\n"


def test_inventory_points_at_node_trees(sim_cluster: Cluster, sh: Shell) -> None:
    inv = yaml.safe_load(sim_cluster.inventory_path.read_text())
    e = inv["nodes"][1]
    assert e["port"] == sim_cluster.nodes[1].port and e["ascend_home"] == str(sim_cluster.nodes[1].dir / "ascend")
    rc, out, _ = sh.run("node02", f"cat {e['ascend_home']}/driver/version.info")
    assert rc == 0 and out.startswith("Version=")


def test_tools_resolve_through_path_and_ascend_home(sim_cluster: Cluster, sh: Shell) -> None:
    assert sh.run("node01", "npu-smi info")[1] == render_npusmi.render_info(sim_cluster.state("node01"))
    home = sim_cluster.node("node01").ascend_home
    assert sh.run("node01", f"{home}/driver/tools/hccn_tool -i 0 -link -g")[1] == "link status: UP\n"
    sim_cluster.inject("node01", "link_down", device=0)
    try:
        assert sh.run("node01", f"{home}/driver/tools/hccn_tool -i 0 -link -g")[1] == "link status: DOWN\n"
    finally:
        sim_cluster.reset("node01")


def test_device_ping_on_loopback(sim_cluster: Cluster, sh: Shell) -> None:
    peer = sim_cluster.state("node02")["devices"][0]["ip"]
    home = sim_cluster.node("node01").ascend_home
    out = sh.run("node01", f"{home}/driver/tools/hccn_tool -i 0 -ping -g address {peer} pkt 2")[1]
    assert out == f"device 0 PING {peer}\n2 packets transmitted, 2 received, 0.00% packet loss\n"


def test_netns_only_faults_refused(sim_cluster: Cluster) -> None:
    from preflight.sim import SimError
    with pytest.raises(SimError, match="needs netns mode"):
        sim_cluster.inject("node01", "device_drop")
