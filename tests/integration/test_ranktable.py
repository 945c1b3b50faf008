"""A rank table end to end on a simulated A3 cluster over real SSH: the table generated from the
cluster (preflight/sim/ranktable.py) is the inventory (`rank_table:` + the sim's SSH defaults) and
agrees with it; a device re-addressed through the sim state, or a server whose SuperPoD index moved,
fails on exactly that node and device."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from preflight.sim import ranktable as sim_ranktable
from tests.simfixtures import requires_netns

pytestmark = requires_netns
SPEC = {"nodes": [{"name": f"node0{i}", "layout": "A3"} for i in (1, 2, 3)]}


@pytest.fixture(scope="module")
def cluster(sim_cluster_factory, tmp_path_factory):
    c = sim_cluster_factory(SPEC, mode="netns")
    d = tmp_path_factory.mktemp("ranktable")
    table = sim_ranktable.write(c, d / "hccl.json", superpod=True)
    defaults = yaml.safe_load(c.inventory_path.read_text())["defaults"]
    inv = d / "cluster.yaml"
    inv.write_text(yaml.safe_dump({"rank_table": table.name, "defaults": defaults}))
    try:
        yield c, inv
    finally:
        c.down(purge=True)


def run(inv) -> dict:
    proc = subprocess.run([sys.executable, "-m", "preflight.cli", "run", str(inv), "--checks", "hccl.ranktable",
                           "--format", "json", "--quiet"], capture_output=True, text=True, timeout=240)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def rows(report) -> dict:
    return {r["node"]: r for r in report["results"] if r["check"] == "hccl.ranktable"}


def test_generated_table_agrees(cluster):
    c, inv = cluster
    r = rows(run(inv))
    summary = r[None]
    assert summary["status"] == "pass", summary
    assert "48 ranks on 3 servers agree" in summary["summary"] and "SuperPoD ids" in summary["summary"]
    assert "48 super_device_id(s) compared with npu-smi spod-info" in summary["details"]["notes"]


def test_readdressed_device_fails_on_that_node_and_device(cluster):
    c, inv = cluster
    host = c.node("node02").host
    old = c.state("node02")["devices"][5]["ip"]
    c.set_state("node02", "devices.5.ip", "192.0.2.55")
    try:
        r = rows(run(inv))
    finally:
        c.set_state("node02", "devices.5.ip", old)
    assert r[None]["status"] == "fail" and f"disagrees on {host}" in r[None]["summary"]
    bad = {n: x for n, x in r.items() if n is not None and x["status"] != "pass"}
    assert list(bad) == [host] and bad[host]["details"]["failed_devices"] == [5]
    assert f"rank table device_ip {old}, hccn_tool -ip -g reports 192.0.2.55" in bad[host]["summary"]


def test_server_index_moved_fails_superpod_ids_on_that_node(cluster):
    c, inv = cluster
    host = c.node("node03").host
    c.set_state("node03", "super_pod.server_index", 40)
    try:
        r = rows(run(inv))
    finally:
        c.set_state("node03", "super_pod.server_index", c.node("node03").index)
    bad = {n: x for n, x in r.items() if n is not None and x["status"] != "pass"}
    assert list(bad) == [host] and bad[host]["details"]["failed_devices"] == list(range(16))
    assert "npu-smi spod-info SDID" in bad[host]["summary"]


def test_the_table_itself_with_ssh_config_is_the_inventory(cluster, tmp_path):
    """`preflight run hccl.json`: the servers' SSH settings from an ssh_config alone."""
    c, inv = cluster
    defaults = yaml.safe_load(c.inventory_path.read_text())["defaults"]
    cfg = tmp_path / "ssh_config"
    cfg.write_text("".join(f"Host {n.host}\n  User {defaults['user']}\n  IdentityFile {defaults['identity_file']}\n"
                           f"  UserKnownHostsFile {defaults['known_hosts']}\n" for n in c.nodes))
    table = inv.parent / "hccl.json"
    proc = subprocess.run([sys.executable, "-m", "preflight.cli", "run", str(table), "--ssh-config", str(cfg),
                           "--checks", "hccl.ranktable", "--format", "json", "--quiet"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    summary = rows(json.loads(proc.stdout))[None]
    assert summary["status"] == "pass" and "48 ranks on 3 servers agree" in summary["summary"]
