"""The rank table parser on the real tables (tests/fixtures/ascend/ranktable__*.json, sources in the
.source sidecars), and each table HCCL refuses, derived from a real one in code."""
from __future__ import annotations

import json

import pytest

from preflight.ascend import ranktable as rt
from tests.support import fixture_path

TABLES = sorted(p.name for p in fixture_path("ranktable__1.0_1server_8dev__jittorinfer.json").parent.glob("ranktable__*.json"))
JITTOR = "ranktable__1.0_1server_8dev__jittorinfer.json"
TYPICAL = "ranktable__1.0_2servers_typical__hccl-doc.json"
SUPERPOD = "ranktable__1.2_superpod_2pods_4servers__hccl-doc.json"


def doc(name: str) -> dict:
    return json.loads(fixture_path(name).read_text())


def refused(d: dict | str, path: str = "/jobs/hccl.json") -> str:
    with pytest.raises(rt.RankTableError) as exc:
        rt.parse(d if isinstance(d, str) else json.dumps(d), path)
    msg = str(exc.value)
    assert msg.startswith(path + ":") and "\n" not in msg
    return msg


@pytest.mark.parametrize("name", TABLES)
def test_every_real_table_parses(name):
    table = rt.load(fixture_path(name))
    assert [r for r, _, _ in table.ranks()] == list(range(table.world_size))
    assert table.path.endswith(name)


def test_sidecar_names_each_source():
    for name in TABLES:
        assert fixture_path(name + ".source").read_text().startswith("# source: https://")


def test_jittor_one_server_eight_devices():
    t = rt.load(fixture_path(JITTOR))
    [s] = t.servers
    assert (t.version, s.server_id, len(s.devices)) == ("1.0", "192.168.20.191", 8)
    assert [(d.device_id, d.device_ip, d.rank_id) for d in s.devices][:2] == [(0, "192.168.20.191", 0),
                                                                             (1, "192.168.20.192", 1)]
    assert not t.superpod and s.super_pod_id is None


def test_superpod_table_keeps_pods_and_sdids():
    t = rt.load(fixture_path(SUPERPOD))
    assert t.superpod and t.world_size == 16
    assert [(s.server_id, s.super_pod_id) for s in t.servers] == [("node_0", "0"), ("node_1", "0"),
                                                                  ("node_2", "1"), ("node_3", "1")]
    node_1 = t.server("node_1")
    assert [d.super_device_id for d in node_1.devices] == [4, 5, 6, 7] and node_1.ranks == range(4, 8)
    assert node_1.host_ip == "172.16.0.101"


def test_not_json_names_line_and_column():
    text = fixture_path(TYPICAL).read_text().replace('"version": "1.0",', '"version": "1.0"', 1)
    assert "not JSON" in refused(text) and refused(text).startswith("/jobs/hccl.json:4:5:")


def test_doc_example_with_comments_is_not_json():
    # the HCCL guide prints its examples with // comments and says to delete them: HCCL refuses them
    assert "not JSON" in refused('{"status": "completed", // available\n "version": "1.0"}')


def test_status_not_completed():
    d = doc(JITTOR)
    d["status"] = "initializing"
    assert "status is 'initializing', expected 'completed'" in refused(d)
    del d["status"]
    assert "status missing" in refused(d)


def test_server_count_disagrees():
    d = doc(TYPICAL)
    d["server_count"] = "3"
    assert "server_count is '3' but server_list has 2 servers" in refused(d)
    del d["server_count"]  # optional: HCCL warns and takes server_list's length
    assert rt.parse(json.dumps(d)).world_size == 4


def test_rank_gap_and_repeat():
    d = doc(TYPICAL)
    d["server_list"][1]["device"][1]["rank_id"] = "4"
    assert "rank_id 3 missing: 4 devices must have rank ids 0..3, found 4" in refused(d)
    d["server_list"][1]["device"][1]["rank_id"] = "1"
    assert "rank_id 1 repeated (server node_0 and server node_1)" in refused(d)


def test_rank_ids_interleaved_across_servers():
    d = doc(TYPICAL)
    d["server_list"][0]["device"][1]["rank_id"], d["server_list"][1]["device"][0]["rank_id"] = "2", "1"
    assert "server node_0: rank ids 0..2 interleave with server node_1" in refused(d)


def test_server_order_need_not_follow_rank_order():
    d = doc(TYPICAL)  # xllm's A3 table lists ranks 16-31 before 0-15: blocks, any order
    d["server_list"].reverse()
    assert [s.server_id for s in rt.parse(json.dumps(d)).servers] == ["node_1", "node_0"]


def test_repeated_server_id_and_device_id():
    d = doc(TYPICAL)
    d["server_list"][1]["server_id"] = "node_0"
    assert "server_id node_0 repeated (server_list[0] and [1])" in refused(d)
    d = doc(TYPICAL)
    d["server_list"][1]["device"][1]["device_id"] = "0"
    assert "server_list[1] (server_id node_1): device_id 0 listed twice" in refused(d)


@pytest.mark.parametrize("field", ["device_id", "rank_id"])
def test_missing_device_fields(field):
    d = doc(JITTOR)
    del d["server_list"][0]["device"][3][field]
    assert f"server_list[0] (server_id 192.168.20.191) device[3]: {field} missing" in refused(d)


def test_missing_or_bad_top_level():
    assert "expected a JSON object" in refused("[1, 2]")
    d = doc(JITTOR)
    d["server_list"] = []
    assert "server_list missing or empty" in refused(d)
    d = doc(JITTOR)
    d["version"] = "2.0"
    assert "version '2.0' is not a rank table version" in refused(d)
    d = doc(JITTOR)
    d["server_list"][0]["device"][0]["device_id"] = "-1"
    assert "device_id '-1' is not a non-negative integer" in refused(d)


def test_device_ip_unique_per_address_and_may_be_left_out():
    d = doc(TYPICAL)
    d["server_list"][1]["device"][0]["device_ip"] = "192.168.1.8"
    assert "device_ip 192.168.1.8 repeated (server node_0 device 0 and server node_1 device 0)" in refused(d)
    d["server_list"][1]["device"][0]["device_ip"] = "192.168.2.8,192.168.1.9"  # HCCL splits a list at commas
    assert "device_ip 192.168.1.9 repeated (server node_0 device 1 and server node_1 device 0)" in refused(d)
    d["server_list"][1]["device"][0]["device_ip"] = "192.168.2.8,192.168.2.88"
    assert rt.parse(json.dumps(d)).server("node_1").devices[0].ips == ("192.168.2.8", "192.168.2.88")
    d["server_list"][1]["device"][0]["device_ip"] = "192.168.2.x"
    assert "device_ip '192.168.2.x' is not an IP address" in refused(d)
    del d["server_list"][1]["device"][0]["device_ip"]  # whether HCCL needs it depends on the product:
    assert rt.parse(json.dumps(d)).server("node_1").devices[0].ips == ()  # the check judges it


def test_values_hccl_reads_as_strings():
    d = doc(JITTOR)
    d["server_list"][0]["device"][2]["rank_id"] = 2  # a JSON number: HCCL's EI0017 "is not string"
    assert "device[2]: rank_id is 2, not a string (HCCL reads every value as a JSON string)" in refused(d)
    d = doc(JITTOR)
    d["server_count"] = 1
    assert "server_count is 1, not a string" in refused(d)


def test_ports_and_host_ip():
    d = doc(TYPICAL)
    d["server_list"][0]["device"][0]["device_port"] = "0"  # HCCL's reserved "auto" port
    assert "device_port '0' is not a port number from 1 to 65535" in refused(d)
    d = doc(TYPICAL)
    d["server_list"][1]["device"][1]["host_port"] = "70000"
    assert "host_port '70000' is not a port number" in refused(d)
    d = doc(TYPICAL)
    d["server_list"][0]["host_ip"] = "node-0"
    assert "host_ip 'node-0' is not an IP address" in refused(d)


def test_load_needs_a_json_file_name(tmp_path):
    table = tmp_path / "hccl.txt"
    table.write_text(fixture_path(JITTOR).read_text())
    with pytest.raises(rt.RankTableError, match=r"hccl.txt: HCCL loads a rank table only from a file named \*\.json"):
        rt.load(table)


def test_superpod_rules():
    d = doc(SUPERPOD)
    del d["server_list"][2]["device"][1]["super_device_id"]
    assert "server node_2 device 1: super_device_id missing (every device needs one with a super_pod_list)" \
        in refused(d)
    del d["super_pod_list"]  # without a super_pod_list HCCL runs in AI-server mode
    assert not rt.parse(json.dumps(d)).servers[2].super_pod_id
    d = doc(SUPERPOD)
    d["server_list"][1]["device"][0]["super_device_id"] = "0"  # node_1 shares SuperPoD 0 with node_0
    assert "super_device_id 0 repeated in SuperPoD 0 (server node_0 device 0 and server node_1 device 0)" \
        in refused(d)
    d = doc(SUPERPOD)
    d["super_pod_list"][1]["server_list"].append({"server_id": "node_0"})  # HCCL: the later pod wins ...
    assert "super_device_id 0 repeated in SuperPoD 1 (server node_0 device 0 and server node_2" in refused(d)
    for dev in d["server_list"][0]["device"]:  # ... so with SDIDs unique there, node_0 is in SuperPoD 1
        dev["super_device_id"] = str(int(dev["super_device_id"]) + 100)
    assert rt.parse(json.dumps(d)).server("node_0").super_pod_id == "1"
    d = doc(SUPERPOD)
    d["super_pod_list"][1]["super_pod_id"] = "0"
    assert "super_pod_id 0 listed twice" in refused(d)
    d = doc(SUPERPOD)
    d["super_pod_list"][1]["server_list"].pop()
    assert "server node_3 is in no super_pod_list entry" in refused(d)
    d = doc(SUPERPOD)
    d["super_pod_list"][0]["server_list"][0]["server_id"] = "node_9"
    assert "server_id 'node_9' is not in server_list" in refused(d)


def test_load_unreadable_file(tmp_path):
    with pytest.raises(rt.RankTableError, match=r"nope.json: cannot read rank table"):
        rt.load(tmp_path / "nope.json")


# ---- npu-smi info -t spod-info (preflight/ascend/spod_info.py) ------------------------------------

def test_spod_info_a3_sample():
    from preflight.ascend import spod_info
    from tests.support import fixture_body
    info = spod_info.parse(fixture_body("npu-smi_info_-t_spod-info_-i_0_-c_0__A3__hicann-shmem.txt"))
    assert info == spod_info.SpodInfo(sdid=16777216, super_pod_id=0, super_pod_size=384, server_index=4)
    assert info.sdid >> 22 == info.server_index  # SDID bits 22-31 are the server index (HDK DCMI)


def test_spod_info_unsupported_and_unknown():
    from preflight.ascend import spod_info
    from preflight.checkapi import ParseError
    from tests.support import fixture_body
    assert spod_info.parse(fixture_body("npu-smi_info_-t_spod-info_-i_0_-c_0__unsupported__hiascend-docs.txt")) is None
    with pytest.raises(ParseError):
        spod_info.parse("Super Pod Size : 384\n")
    with pytest.raises(ParseError):
        spod_info.parse("SDID : NA\nSuper Pod ID : 0\n")
