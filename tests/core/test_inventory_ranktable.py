"""An HCCL rank table as the inventory (preflight/inventory_ranktable.py), on the real tables."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from preflight.inventory import InventoryError, load
from tests.core.test_cli import cli, no_cfg
from tests.support import fixture_path

JITTOR = fixture_path("ranktable__1.0_1server_8dev__jittorinfer.json")
TYPICAL = fixture_path("ranktable__1.0_2servers_typical__hccl-doc.json")
SUPERPOD = fixture_path("ranktable__1.2_superpod_2pods_4servers__hccl-doc.json")
CKPT = fixture_path("ranktable__1.0_1server_4dev_ports__checkpoint-engine-ascend.json")


def nocfg(tmp_path: Path) -> str:
    return str(tmp_path / "no-ssh-config")


def test_table_itself_is_the_inventory(tmp_path):
    inv = load(JITTOR, ssh_config=nocfg(tmp_path))
    [n] = inv.nodes
    assert (inv.fmt, n.name, n.host, n.devices) == ("rank-table", "192.168.20.191", "192.168.20.191", 8)
    assert n.env["RANK_TABLE_FILE"] == str(JITTOR.resolve())  # as the job (and hccl.ranktable) will find it


def test_superpod_servers_reached_at_host_ip(tmp_path):
    inv = load(SUPERPOD, ssh_config=nocfg(tmp_path))
    assert [(n.name, n.host, n.devices) for n in inv.nodes] == [
        ("node_0", "172.16.0.100", 4), ("node_1", "172.16.0.101", 4),
        ("node_2", "172.16.0.102", 4), ("node_3", "172.16.0.103", 4)]
    assert [n.name for n in load(SUPERPOD, limit="node_[1-2]", ssh_config=nocfg(tmp_path)).nodes] == ["node_1", "node_2"]


def test_server_name_resolved_through_ssh_config(tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host node_0\n  HostName 10.20.0.7\n  User ops\n  Port 2222\n")
    [n] = load(CKPT, ssh_config=str(cfg)).nodes  # server_id node_0, no host_ip
    assert (n.name, n.host, n.user, n.port, n.devices) == ("node_0", "10.20.0.7", "ops", 2222, 4)


def test_yaml_naming_the_table_gives_ssh_settings(tmp_path):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "hccl.json").write_text(TYPICAL.read_text())
    inv_file = tmp_path / "cluster.yaml"
    inv_file.write_text("rank_table: jobs/hccl.json\ncluster: a3-pod\n"
                        "defaults:\n  user: ops\n  become: sudo\n  identity_file: ~/.ssh/id_ed25519\n"
                        "checks:\n  npu.health: {}\n")
    inv = load(inv_file, ssh_config=nocfg(tmp_path))
    assert inv.cluster == "a3-pod" and [(n.name, n.host, n.user, n.become, n.devices) for n in inv.nodes] == [
        ("node_0", "172.16.0.110", "ops", "sudo", 2), ("node_1", "172.16.0.111", "ops", "sudo", 2)]
    assert inv.nodes[0].env["RANK_TABLE_FILE"] == str((tmp_path / "jobs" / "hccl.json").resolve())
    inv_file.write_text("rank_table: jobs/hccl.json\ndefaults:\n  devices: 16\n"
                        "  env: {RANK_TABLE_FILE: /user/serverid/devindex/config/hccl.json, HCCL_BUFFSIZE: 200}\n")
    inv = load(inv_file, ssh_config=nocfg(tmp_path))
    assert {n.devices for n in inv.nodes} == {16}  # the node's chips, when the table uses some of them
    assert inv.nodes[1].env == {"RANK_TABLE_FILE": "/user/serverid/devindex/config/hccl.json", "HCCL_BUFFSIZE": "200"}


def test_refusals_are_one_line(tmp_path):
    bad = json.loads(TYPICAL.read_text())
    bad["server_list"][1]["device"][0]["rank_id"] = "1"
    (tmp_path / "hccl.json").write_text(json.dumps(bad, indent=2))
    wrapper = tmp_path / "inv.yaml"
    wrapper.write_text("defaults:\n  user: ops\nrank_table: hccl.json\n")
    with pytest.raises(InventoryError) as exc:
        load(wrapper, ssh_config=nocfg(tmp_path))
    assert str(exc.value) == (f"{wrapper}:3: rank_table: {tmp_path / 'hccl.json'}: rank_id 1 repeated "
                              f"(server node_0 and server node_1)")
    wrapper.write_text("rank_table: hccl.json\nnodes: []\n")
    with pytest.raises(InventoryError, match=r"inv.yaml:2: nodes: either nodes or rank_table"):
        load(wrapper, ssh_config=nocfg(tmp_path))
    wrapper.write_text("rank_table: missing.json\n")
    with pytest.raises(InventoryError, match=r"inv.yaml:1: rank_table: .*missing.json: cannot read rank table"):
        load(wrapper, ssh_config=nocfg(tmp_path))
    (tmp_path / "hccl.json").write_text(TYPICAL.read_text())
    wrapper.write_text("rank_table: hccl.json\ndefaults: ops\n")
    with pytest.raises(InventoryError, match=r"inv.yaml:2: defaults: expected a mapping"):
        load(wrapper, ssh_config=nocfg(tmp_path))
    wrapper.write_text("rank_table: hccl.json\ndefaults:\n  usr: ops\n")
    with pytest.raises(InventoryError, match=r"inv.yaml:3: usr: unknown key in defaults"):
        load(wrapper, ssh_config=nocfg(tmp_path))


def test_table_not_json_or_not_completed(tmp_path):
    broken = tmp_path / "hccl.json"
    broken.write_text(TYPICAL.read_text().replace('"version": "1.0",', '"version": "1.0"'))
    with pytest.raises(InventoryError, match=r"hccl.json:4:5: not JSON"):
        load(broken, ssh_config=nocfg(tmp_path))
    broken.write_text(TYPICAL.read_text().replace('"completed"', '"initializing"'))
    with pytest.raises(InventoryError, match=r"status is 'initializing', expected 'completed'"):
        load(broken, ssh_config=nocfg(tmp_path))


def test_inventory_show_on_a_rank_table(tmp_path):
    res = cli("inventory", "show", str(SUPERPOD), *no_cfg(tmp_path))
    assert res.returncode == 0
    lines = res.output.splitlines()
    assert lines[0].endswith(f"{SUPERPOD.name}: 4 nodes") and "HCCL rank table" in lines[1]
    assert lines[2].split()[:3] == ["node_0", "(current", "user)@172.16.0.100:22"] and "devices=4" in lines[2]
