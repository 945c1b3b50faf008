"""Issue 14 end to end: NVIDIA nodes beside Ascend ones, over real SSH, one report.

One simulated cluster (module-scoped): four healthy 910B Ascend nodes and three H100 nodes: gpu01
healthy, gpu02 with a different fault on seven of its GPUs (GPU 4: its NVLinks down) and its RoCE port's netdev down (ibstat
still Active), gpu03 with a GPU gone and an IB port Polling (faults are state edits; the simulated
nvidia-smi, ibstat, ibdev2netdev and dmesg print the real formats from that state, and the RoCE
netdev is a real veth in the node's namespace). Both runs name the RoCE port in ib.link's `ports`. Each fault must be flagged on its node and GPU and
nowhere else; Ascend checks skip on GPU nodes with the reason and the reverse; sw.consistency and
env.consistency compare like with like. A second run with `backend: auto` must decide each node's
backend from what it has. cuda.env is left out of the device run: the sim nodes share the host's
CPU-only torch, which cuda.env rightly fails (asserted separately).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.simfixtures import requires_netns

pytestmark = requires_netns

GPU_CHECKS = "gpu.health,gpu.idle,ib.link,gpu.topology"
# gpu02 carries one fault per GPU (so each must land on its own GPU), gpu03 the node-level ones.
FAULTS = [
    {"node": "gpu02", "fault": "gpu_hw_slowdown", "device": 0},
    {"node": "gpu02", "fault": "gpu_remap_pending", "device": 1},
    {"node": "gpu02", "fault": "gpu_process", "device": 2, "pid": 424242, "name": "python3", "mem": 30000},
    {"node": "gpu02", "fault": "gpu_ecc", "device": 3, "count": 2},
    {"node": "gpu02", "fault": "gpu_xid", "device": 5, "xid": 79},
    {"node": "gpu02", "fault": "gpu_pcie_degraded", "device": 6, "width": 8},
    {"node": "gpu02", "fault": "roce_netdev_down", "ca": "mlx5_8"},
    {"node": "gpu02", "fault": "gpu_nvlink_down", "device": 4},
    {"node": "gpu03", "fault": "gpu_missing", "device": 7},
    {"node": "gpu03", "fault": "ib_port_down", "ca": "mlx5_4", "state": "Polling"},
]
# (check, node) -> failed GPUs in details (ib.link: failed_ports)
EXPECTED = {("gpu.health", "gpu02"): [0, 1, 3, 5, 6], ("gpu.idle", "gpu02"): [2],
            ("gpu.health", "gpu03"): [], ("ib.link", "gpu03"): ["mlx5_4:1"], ("ib.link", "gpu02"): ["mlx5_8:1"],
            ("gpu.topology", "gpu02"): [4]}
GPU_PROBLEMS = {0: "HW Slowdown Active", 1: "row remap pending", 3: "2 uncorrectable ECC",
                5: "Xid 79 GPU has fallen off the bus", 6: "PCIe link x8, expected x16"}
GPU_NODES = ["gpu01", "gpu02", "gpu03"]
SPEC = {"nodes": [f"asc0{i}" for i in range(1, 5)] + [{"name": n, "backend": "nvidia"} for n in GPU_NODES],
        "faults": FAULTS}


def _run(inventory, *args, timeout=240):
    proc = subprocess.run([sys.executable, "-m", "preflight.cli", "run", str(inventory), "--format", "json",
                           "--quiet", *args], capture_output=True, text=True, timeout=timeout)
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def cluster(sim_cluster_factory):
    c = sim_cluster_factory(SPEC, mode="netns")
    try:
        yield c
    finally:
        c.down(purge=True)


def _inventory(cluster, folder, auto=False):
    """The sim's inventory with the RoCE port named in ib.link's `ports` (RoCE ports are judged only
    when named); `auto`: every node `backend: auto`."""
    doc = yaml.safe_load(cluster.inventory_path.read_text())
    doc.setdefault("checks", {})["ib.link"] = {"ports": ["mlx5_8"]}
    for n in [doc["defaults"], *doc["nodes"]]:
        if auto and "backend" in n:
            n["backend"] = "auto"
    inv = folder / "inventory.yaml"
    inv.write_text(yaml.safe_dump(doc, sort_keys=False))
    inv.chmod(0o600)
    return inv


@pytest.fixture(scope="module")
def device_report(cluster, tmp_path_factory):
    inv = _inventory(cluster, tmp_path_factory.mktemp("device"))
    rc, report = _run(inv, "--checks", GPU_CHECKS + ",npu.health,npu.idle,hccn.link")
    assert rc == 1
    return report


@pytest.fixture(scope="module")
def auto_report(cluster, tmp_path_factory):
    """The same cluster, every node `backend: auto`, the whole default check set."""
    inv = _inventory(cluster, tmp_path_factory.mktemp("auto"), auto=True)
    rc, report = _run(inv, "--skip", "smoke,storage")
    return rc, report


def by(report, status):
    return {(r["check"], r["node"]): r for r in report["results"] if r["status"] == status}


def test_each_gpu_fault_is_flagged_on_its_node_and_gpu_only(device_report):
    fails = by(device_report, "fail")
    assert set(fails) == set(EXPECTED), sorted(fails)
    for key, want in EXPECTED.items():
        d = fails[key]["details"]
        got = d["failed_ports"] if key[0] == "ib.link" else d["failed_devices"]
        assert got == want, (key, fails[key]["summary"])
        assert fails[key]["remediation"]


def test_messages_name_what_was_found_on_each_gpu(device_report):
    fails = by(device_report, "fail")
    health = fails[("gpu.health", "gpu02")]
    by_gpu = {d["device"]: d["problem"] for d in health["details"]["devices"]}
    for gpu, words in GPU_PROBLEMS.items():
        assert words in by_gpu[gpu], (gpu, by_gpu)
    assert "GPU 2" not in health["summary"]  # the process is gpu.idle's, not a health problem
    assert "GPU 2: pid 424242 python3" in fails[("gpu.idle", "gpu02")]["summary"]
    assert "7 GPUs listed by nvidia-smi, expected 8" in fails[("gpu.health", "gpu03")]["summary"]
    assert "mlx5_4:1 State Down, Physical state Polling" in fails[("ib.link", "gpu03")]["summary"]
    topo = fails[("gpu.topology", "gpu02")]["summary"]
    assert topo.startswith("GPU 4: GPU 0 SYS, GPU 1 SYS, GPU 2 SYS, GPU 3 SYS, GPU 5 NODE") and \
        "GPU 4: all NVLink links inactive, the node's other GPUs have 18 active (NVSwitch system)" in topo
    roce = fails[("ib.link", "gpu02")]
    assert "mlx5_8 port 1 (RoCE, netdev enp27s0f0np0): netdev down (ibstat State Active; netdev from ibdev2netdev)" \
        in roce["summary"] and "mlx5_4" not in roce["summary"]


def test_healthy_h100_node_passes_and_nothing_warns_or_errors(device_report):
    assert by(device_report, "warn") == {} and by(device_report, "error") == {}
    mine = [r for r in device_report["results"] if r["node"] == "gpu01" and r["check"] in GPU_CHECKS.split(",")]
    assert [r["status"] for r in mine] == ["pass"] * 4, mine
    [ib] = [r for r in mine if r["check"] == "ib.link"]
    assert "8 IB ports Active/LinkUp at 400 Gb/s (ibstat); 1 RoCE port(s) up at 10 Gb/s (mlx5_8:1 enp27s0f0np0)" \
        in ib["summary"]


def test_checks_of_the_other_backend_skip_with_the_reason(device_report):
    skips = by(device_report, "skip")
    assert "NVIDIA check: this is an Ascend node" in skips[("gpu.health", "asc01")]["summary"]
    assert "Ascend check: this is an NVIDIA node" in skips[("npu.health", "gpu01")]["summary"]
    assert all(r["status"] == "pass" for r in device_report["results"]
               if r["node"] and r["node"].startswith("asc") and r["check"] in ("npu.health", "npu.idle", "hccn.link"))


def test_auto_backend_decided_per_node_and_said_in_ssh_connect(auto_report):
    _, report = auto_report
    connect = {r["node"]: r["details"] for r in report["results"] if r["check"] == "ssh.connect"}
    assert connect["asc01"]["backend"] == "ascend" and "npu-smi found" in connect["asc01"]["backend_from"]
    assert connect["gpu01"]["backend"] == "nvidia" and "nvidia-smi found" in connect["gpu01"]["backend_from"]


def test_mixed_cluster_one_report_right_exit_code_no_cross_backend_alarm(auto_report):
    rc, report = auto_report
    assert rc == 1
    flagged = {(r["check"], r["node"]) for r in report["results"] if r["status"] in ("fail", "warn", "error")}
    # the GPU faults, cuda.env on every GPU node (CPU-only torch, see module docstring), and the cluster
    # summary rows of checks whose blamed nodes are those; nothing on an Ascend node
    assert not {k for k in flagged if k[1] and k[1].startswith("asc")}, sorted(flagged, key=str)
    assert set(EXPECTED) <= flagged
    cuda = {k[1] for k in flagged if k[0] == "cuda.env"}
    assert cuda == set(GPU_NODES)
    [sw] = [r for r in report["results"] if r["check"] == "sw.consistency"]
    assert sw["status"] == "pass", sw["summary"]
    ascend, nvidia = sw["summary"].split("; ")
    assert ascend.startswith("identical on 4 Ascend nodes") and "CANN toolkit" in ascend
    assert nvidia.startswith("identical on 3 NVIDIA nodes") and "CUDA 12.2" in nvidia and "CANN" not in nvidia
    env = [r for r in report["results"] if r["check"] == "env.consistency"]
    assert all(r["status"] == "pass" for r in env), [r["summary"] for r in env]


def test_cuda_env_sees_the_cpu_only_torch_of_the_sim_node(auto_report):
    _, report = auto_report
    r = by(report, "fail")[("cuda.env", "gpu01")]
    assert "has no CUDA build (torch/version.py: cuda = None)" in r["summary"]
