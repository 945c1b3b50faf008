"""gpu.topology on the real `nvidia-smi topo -m` / `nvlink -s` samples (tests/fixtures/nvidia/)."""
from __future__ import annotations

import re
import threading

import pytest

from preflight.node import Node
from preflight.transport.batch import ProbeSpec
from preflight.transport.local import LocalTransport

from preflight.checkapi import ParseError, Status
from preflight.checks import gpu_topology as check
from preflight.nvidia import probes as nv, topology
from tests.checks.nvidia_helpers import A10_Q, H100_Q, node, out
from tests.support import fixture_body

H100_TOPO = fixture_body("nvidia-smi_topo_-m__H100_8gpu_NV18__thunderkittens-issue167.txt")
H100_4_TOPO = fixture_body("nvidia-smi_topo_-m__H100_4gpu_NV6_NICs__nccl-issue1617.txt")
PCIE_TOPO = fixture_body("nvidia-smi_topo_-m__RTX4090_8gpu_PCIe_only__go-gpuallocator-issue17.txt")
PAIR_TOPO = fixture_body("nvidia-smi_topo_-m__RTXA6000_3gpu_NV4_pair__siboehm-bench.txt")
PAIR_LINKS = fixture_body("nvidia-smi_nvlink_-s__RTXA6000_3gpu_one_all_inactive__siboehm-bench.txt")
V100_LINKS = fixture_body("nvidia-smi_nvlink_-s__V100_links_inactive__azhpc-diagnostics-issue73.txt")
A100_LINKS = fixture_body("nvidia-smi_nvlink_--status__A100__gpud-fixture.txt")
H200_TOPO = "nvidia-smi_topo_-m__H200_1gpu_ANSI_header_580__real-capture.txt"
H200_LINKS = "nvidia-smi_nvlink_-s__H200_1gpu_EMPTY_rc0_580__real-capture.txt"
H200_Q = fixture_body("nvidia-smi_-q__H200_1gpu_580__real-capture.txt")


def run(topo, links="", query=A10_Q, links_rc=0):
    facts = check.parse({check.TOPO_PROBE: out(topo), check.NVLINK_PROBE: out(links, rc=links_rc),
                         nv.QUERY_PROBE: out(query)})
    return check.evaluate(facts, check.DEFAULTS, node())


def _cut(topo: str, a: int, b: int, cell: str = "SYS") -> str:
    """The H100 matrix with the (a, b) and (b, a) cells changed: a pair that lost its NVLinks."""
    rows = topo.split("\n")
    for i, j in ((a, b), (b, a)):
        k = next(n for n, r in enumerate(rows) if re.match(rf"GPU{i}\s", r))
        cells = rows[k].split()
        cells[j + 1] = cell
        rows[k] = "\t".join(cells)
    return "\n".join(rows)


def test_real_matrices_parse_gpu_cells_only():
    t = topology.parse_topo(H100_TOPO)
    assert t.gpus == 8 and t.nvlinks(0, 7) == 18 and len(t.cells) == 56
    t = topology.parse_topo(H100_4_TOPO)  # NIC columns and rows are not GPU cells
    assert t.gpus == 4 and t.nvlinks(3, 0) == 6 and set(t.cells.values()) == {"NV6"}
    t = topology.parse_topo(PCIE_TOPO)  # TAB-separated, as the tool prints
    assert t.gpus == 8 and set(t.cells.values()) == {"SYS"}
    t = topology.parse_topo(PAIR_TOPO)
    assert (t.nvlinks(0, 1), t.nvlinks(0, 2), t.cells[(2, 1)]) == (4, 0, "NODE")
    with pytest.raises(ParseError):
        topology.parse_topo("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")


def test_real_nvlink_status_parses_active_inactive_and_all_inactive():
    v = topology.parse_nvlink(V100_LINKS)
    assert (v[3].active, v[3].inactive) == ((0, 1, 2, 4), (3, 5))
    p = topology.parse_nvlink(PAIR_LINKS)
    assert p[0].active_count == 4 and p[2].all_inactive and p[2].active == ()
    a = topology.parse_nvlink(A100_LINKS)
    assert all(g.active_count == 12 for g in a.values())


def test_healthy_nvswitch_h100_passes():
    [f] = run(H100_TOPO, query=H100_Q)
    assert f.status is Status.PASS and "8 GPUs NVLink-connected as designed (NVSwitch: NV18 between pairs)" in f.summary


def test_pcie_only_node_flags_nothing():
    [f] = run(PCIE_TOPO)
    assert f.status is Status.SKIP and "PCIe only: SYS" in f.summary


def test_a_gpu_that_lost_its_nvlinks_on_an_nvswitch_system_fails_naming_it_once():
    topo = H100_TOPO
    for peer in (0, 1, 2, 4, 5, 6, 7):
        topo = _cut(topo, 3, peer)
    [f] = run(topo, query=H100_Q)
    assert f.status is Status.FAIL and f.details["failed_devices"] == [3]
    assert f.summary.startswith("GPU 3: GPU 0 SYS, GPU 1 SYS") and "expected NV18 between every GPU pair" in f.summary
    assert "-i 3" in f.remediation


def test_one_narrow_pair_on_an_nvswitch_system_names_both_gpus():
    [f] = run(_cut(H100_TOPO, 2, 5, "NV12"), query=H100_Q)
    assert f.status is Status.FAIL and f.details["failed_devices"] == [2, 5] and "GPU 2: GPU 5 NV12" in f.summary


def test_inactive_links_fail_on_nvswitch_and_warn_without():
    links = A100_LINKS.replace("GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-a7605225-d684-1f65-4ad4-ee2ab39338b4)\n         Link 0: 25 GB/s",
                               "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-a7605225-d684-1f65-4ad4-ee2ab39338b4)\n         Link 0: <inactive>")
    [f] = run(H100_TOPO, links, query=H100_Q)
    assert f.status is Status.FAIL and f.details["failed_devices"] == [1]
    assert "GPU 1: NVLink link(s) 0 inactive (11 active, the node's best is 12) (NVSwitch system)" in f.summary
    [f] = run(H100_4_TOPO, links)
    assert f.status is Status.WARN and f.details["failed_devices"] == [1]


def test_a_bridged_pair_beside_an_unbridged_gpu_warns_about_that_gpu_only():
    [f] = run(PAIR_TOPO, PAIR_LINKS)
    assert f.status is Status.WARN and f.details["failed_devices"] == [2]
    assert "GPU 2: NVLink to 0 GPU(s), the node's best is 1 (GPU 0 NODE, GPU 1 NODE)" in f.summary
    assert "GPU 2: all NVLink links inactive, the node's other GPUs have 4 active" in f.summary


def test_a_failing_topo_command_skips_and_nvlink_failing_is_not_fatal():
    facts = check.parse({check.TOPO_PROBE: out("", rc=9, stderr="NVIDIA-SMI has failed"), check.NVLINK_PROBE: out(""),
                         nv.QUERY_PROBE: out(A10_Q)})
    [f] = check.evaluate(facts, check.DEFAULTS, node())
    assert f.status is Status.SKIP and "NVIDIA-SMI has failed" in f.summary
    [f] = run(H100_TOPO, "Failed to ...", query=H100_Q, links_rc=1)
    assert f.status is Status.PASS


def test_an_nvlink_answer_without_gpu_lines_leaves_the_matrix_to_decide():
    [f] = run(PAIR_TOPO, "NVML: Unable to retrieve NVLink information as all links are inActive\n")
    assert f.status is Status.WARN and f.details["failed_devices"] == [2] and "inactive" not in f.summary


def _received(tmp_path, names: dict[str, str]) -> dict:
    """The real captures' bytes as preflight receives them: `cat` of each body run through the
    local transport (the decoding every transport shares, which cleans terminal escapes)."""
    specs = []
    for key, name in names.items():
        f = tmp_path / key
        f.write_bytes(fixture_body(name).encode())
        specs.append(ProbeSpec(key, f"cat {f}", 10))
    session = LocalTransport().connect(Node("n1", "localhost"), threading.Event())
    try:
        return session.run(specs, threading.Event())
    finally:
        session.close()


def test_real_h200_one_gpu_topo_with_terminal_escapes_skips(tmp_path):
    # The real H200 (driver 580) underlines its header row with ESC[4m ... ESC[0m even into a pipe,
    # has one GPU (no peer column) and `nvlink -s` prints nothing with exit 0.
    raw = fixture_body(H200_TOPO)
    assert "\x1b[4mGPU0" in raw
    with pytest.raises(ParseError):
        topology.parse_topo(raw)  # why the escapes must go before a parser sees the text
    outputs = _received(tmp_path, {check.TOPO_PROBE: H200_TOPO, check.NVLINK_PROBE: H200_LINKS})
    assert outputs[check.NVLINK_PROBE].stdout == "" and outputs[check.NVLINK_PROBE].rc == 0
    t = topology.parse_topo(outputs[check.TOPO_PROBE].stdout)
    assert t.gpus == 1 and t.cells == {}
    facts = check.parse({**outputs, nv.QUERY_PROBE: out(H200_Q)})
    [f] = check.evaluate(facts, check.DEFAULTS, node(devices=1))
    assert f.status is Status.SKIP and f.summary == "1 GPU on this node: no GPU pair to judge"
