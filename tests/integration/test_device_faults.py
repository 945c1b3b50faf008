"""Issue 4 end to end: one Ascend fault per node over real SSH, flagged exactly where it is.

An 8-node simulated cluster: six 910B nodes with one different fault each, a healthy A3 node
(16 logical devices, Phy-ID) and a healthy 310P node (no RoCE: hccn.* skip). The device checks
must name exactly the faulty (check, node, device) and nothing else may fail, warn or error.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.simfixtures import requires_netns

pytestmark = requires_netns

DEVICE_CHECKS = "npu.health,npu.idle,cann.env,hccn.link,hccn.optical,hccn.ip,hccn.health"
FAULTS = [
    {"node": "node01", "fault": "npu_health", "device": 3, "status": "Alarm", "codes": ["A4025021", "8C03A000"]},
    {"node": "node02", "fault": "npu_process", "device": 5, "pid": 424242, "name": "python3", "mem": 30000},
    {"node": "node03", "fault": "link_down", "device": 2},
    {"node": "node04", "fault": "optical_rx_low", "device": 1, "lane": 2, "rx": 0.05, "los": True},
    {"node": "node05", "fault": "ip_missing", "device": 6},
    {"node": "node06", "fault": "set_env_missing"},
]
# (check, node) -> failed devices expected in details (None: a node-level finding)
EXPECTED_FAILS = {
    ("npu.health", "node01"): [3],
    ("npu.idle", "node02"): [5],
    ("hccn.link", "node03"): [2],
    ("hccn.optical", "node04"): [1],
    ("hccn.ip", "node05"): [6],
    ("cann.env", "node06"): None,
}
SPEC = {
    "nodes": [f"node0{i}" for i in range(1, 7)] + [{"name": "node07", "layout": "A3"},
                                                    {"name": "node08", "layout": "310P"}],
    "faults": FAULTS,
}


@pytest.fixture(scope="module")
def report(sim_cluster_factory):
    c = sim_cluster_factory(SPEC, mode="netns")
    try:
        proc = subprocess.run([sys.executable, "-m", "preflight.cli", "run", str(c.inventory_path),
                               "--checks", DEVICE_CHECKS, "--format", "json", "--quiet"],
                              capture_output=True, text=True, timeout=180)
        assert proc.returncode == 1, proc.stderr
        yield json.loads(proc.stdout)
    finally:
        c.down(purge=True)


def by(report, status):
    return {(r["check"], r["node"]): r for r in report["results"] if r["status"] == status}


def test_exactly_the_injected_faults_fail(report):
    fails = by(report, "fail")
    assert set(fails) == set(EXPECTED_FAILS)
    for key, devices in EXPECTED_FAILS.items():
        r = fails[key]
        assert r["remediation"], key
        if devices is not None:
            assert r["details"]["failed_devices"] == devices, (key, r["summary"])


def test_nothing_else_warns_or_errors(report):
    assert by(report, "warn") == {} and by(report, "error") == {}
    assert all(n["state"] == "ok" for n in report["nodes"])


def test_messages_name_expected_and_actual(report):
    fails = by(report, "fail")
    assert "Alarm" in fails[("npu.health", "node01")]["summary"]
    assert "A4025021" in json.dumps(fails[("npu.health", "node01")]["details"])
    assert "424242" in fails[("npu.idle", "node02")]["summary"]
    assert "DOWN" in fails[("hccn.link", "node03")]["summary"]
    assert "set_env.sh" in fails[("cann.env", "node06")]["summary"]


def test_healthy_a3_passes_on_all_16_logical_devices(report):
    a3 = {r["check"]: r for r in report["results"] if r["node"] == "node07"}
    assert all(r["status"] == "pass" for r in a3.values()), a3
    assert "16" in a3["npu.health"]["summary"] and "16" in a3["hccn.link"]["summary"]


def test_healthy_310p_passes_npu_checks_and_skips_roce(report):
    p = {r["check"]: r for r in report["results"] if r["node"] == "node08"}
    assert p["npu.health"]["status"] == "pass" and p["npu.idle"]["status"] == "pass"
    for check in ("hccn.link", "hccn.optical", "hccn.ip", "hccn.health"):
        assert p[check]["status"] == "skip" and "RoCE" in p[check]["summary"]
