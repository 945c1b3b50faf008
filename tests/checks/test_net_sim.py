"""Integration: env.comm, env.consistency, net.ports, net.ping_mesh, hccn.ping_mesh over real SSH
on the simulated cluster (netns mode). One 8-node cluster for the module, each fault flagged where
it is and nowhere else:

node01  MASTER_PORT 29500 held (it is the master)      node05 <-> node06  host-network DROP
node02  port 60003 held; device 1 IP duplicated on node03   node07 dev 2 <-> node08 dev 2  device DROP
node03  GLOO_SOCKET_IFNAME=eth9 (no such NIC)           node07  HCCL_BUFFER_SIZE typo
node04  HCCL_IF_IP not an address of node04            node08  device 5 without IP
"""
from __future__ import annotations

import dataclasses
import ipaddress

import pytest

from preflight import inventory as inv_mod
from preflight import runner
from preflight.model import Status
from tests.simfixtures import requires_netns
from preflight.transport.ssh import SSHTransport

pytestmark = requires_netns
SPEC = {"nodes": 8}


def _ip(c, node):
    return c.node(node).host


def _dev_ip(c, node, dev):
    return next(d["ip"] for d in c.state(node)["devices"] if d["id"] == dev)


def _drop(c, node, a, b):
    """iptables in `node`'s namespace: no traffic between addresses a (local) and b."""
    for rule in (f"-A INPUT -s {b} -d {a} -j DROP", f"-A OUTPUT -s {a} -d {b} -j DROP"):
        r = c.exec(node, f"iptables {rule}")
        assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def cluster(sim_cluster_factory):
    c = sim_cluster_factory(SPEC, mode="netns")
    for n in c.nodes:  # what an operator does after reading net.ports' warning; keeps the baseline clean
        assert c.exec(n.name, "sysctl -qw net.ipv4.ip_local_reserved_ports=60000-60015").returncode == 0
    c.inject("node01", "port_held", port=29500)
    c.inject("node02", "port_held", port=60003)
    _drop(c, "node06", _ip(c, "node06"), _ip(c, "node05"))
    _drop(c, "node07", _dev_ip(c, "node07", 2), _dev_ip(c, "node08", 2))
    c.set_state("node03", "devices.1.ip", _dev_ip(c, "node02", 1))
    c.inject("node08", "ip_missing", device=5)
    return c


def _inventory(c):
    inv = inv_mod.load(c.inventory_path)
    spare = str(ipaddress.ip_address(_ip(c, "node08")) + 100)  # in the subnet, owned by nobody
    env = {"node03": {"GLOO_SOCKET_IFNAME": "eth9"}, "node04": {"HCCL_IF_IP": spare},
           "node07": {"HCCL_BUFFER_SIZE": "209715200"}}
    nodes = tuple(dataclasses.replace(n, env={**n.env, **env.get(n.name, {})}) for n in inv.nodes)
    return dataclasses.replace(inv, nodes=nodes)


@pytest.fixture(scope="module")
def report(cluster):
    return runner.run(_inventory(cluster), SSHTransport(),
                      runner.Options(checks=["env", "net", "hccn.ping_mesh", "hccn.ip"]))


def flagged(report, check):
    return {r.node: r for r in report.results if r.check == check and r.node and r.status is not Status.PASS}


def summary(report, check):
    return next(r for r in report.results if r.check == check and r.node is None)


def test_env_comm(report):
    f = flagged(report, "env.comm")
    assert set(f) == {"node03", "node04", "node07"}, {n: r.summary for n, r in f.items()}
    assert f["node03"].status is Status.FAIL and "no interface eth9 on node03" in f["node03"].summary
    assert f["node04"].status is Status.FAIL and "is not an address of node04" in f["node04"].summary
    assert f["node07"].status is Status.WARN and "HCCL_BUFFER_SIZE" in f["node07"].summary


def test_net_ports(report):
    f = flagged(report, "net.ports")
    assert set(f) == {"node01", "node02"}, {n: r.summary for n, r in f.items()}
    assert "port 29500 (MASTER_PORT 29500) is in use" in f["node01"].summary
    assert "port 60003" in f["node02"].summary and "pid" in f["node02"].summary


def test_net_ping_mesh(report):
    f = flagged(report, "net.ping_mesh")
    # node04's HCCL_IF_IP belongs to nobody: nobody reaches it (blamed alone); node05-node06 is a pair
    assert set(f) == {"node04", "node05", "node06"}, {n: r.summary for n, r in f.items()}
    assert "reached by 0 of 7" in f["node04"].summary
    assert "bad pair node05" in f["node05"].summary and "node06" in f["node05"].summary
    s = summary(report, "net.ping_mesh")
    assert s.status is Status.FAIL and s.details["matrix"]["node05"]["node06"] == 100.0


def test_hccn_ping_mesh(report):
    f = flagged(report, "hccn.ping_mesh")
    assert f["node07"].details["failed_devices"] == [2] and f["node08"].details["failed_devices"] == [2]
    # the duplicated device 1 address may also fail pings from node03's device 1: same place
    assert set(f) <= {"node02", "node03", "node07", "node08"}, {n: r.summary for n, r in f.items()}
    assert all(set(r.details["failed_devices"]) <= {1, 2} for r in f.values())


def test_env_consistency(report):
    f = flagged(report, "env.consistency")
    assert set(f) == {"node02", "node03"}, {n: r.summary for n, r in f.items()}
    assert f["node02"].details["failed_devices"] == [1]
    assert "device IP" in f["node02"].summary and "GLOO_SOCKET_IFNAME is eth9 on node03" in f["node03"].summary


def test_missing_device_ip_only_in_hccn_ip(report):
    f = flagged(report, "hccn.ip")
    # node03's re-addressed device 1 no longer matches its /etc/hccn.conf: also where the fault is
    assert set(f) <= {"node03", "node08"} and f["node08"].details["failed_devices"] == [5]
    assert "node03" not in f or f["node03"].details["failed_devices"] == [1]
