"""bench/gpu_capture.sh / gpu_capture.py, the prepared script for a session with a real GPU (issue 14,
item 9): its parser part on a capture folder made of the real samples, and the whole script (capture,
fixtures, evaluate, smoke) against the simulated NVIDIA tools on PATH (no SSH: the tools run here)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from preflight.sim import faults
from preflight.sim.spec import NodeSpec
from preflight.sim.state import build_state
from preflight.sim.tree import write_tree
from tests.checks.nvidia_helpers import H100_Q, H100_TABLE, XID79
from tests.support import fixture_body

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_capture.sh"


def _write(cap: Path, name: str, stdout: str, rc: int = 0) -> None:
    (cap / f"{name}.out").write_text(stdout)
    (cap / f"{name}.err").write_text("")
    (cap / f"{name}.rc").write_text(f"{rc}\n")


def _results(out: Path) -> dict:
    return {r["check"]: r for r in json.loads((out / "results.json").read_text())}


def test_evaluate_runs_the_checks_parsers_on_a_capture_of_real_samples(tmp_path):
    cap = tmp_path / "captures"
    cap.mkdir()
    _write(cap, "nvidia_smi_q", H100_Q)
    _write(cap, "nvidia_smi", H100_TABLE)
    _write(cap, "nvidia_smi_topo", fixture_body("nvidia-smi_topo_-m__H100_8gpu_NV18__thunderkittens-issue167.txt"))
    _write(cap, "nvidia_smi_nvlink", "", rc=6)  # nvlink -s failing is not fatal
    _write(cap, "kernel_log", "@@source dmesg\n" + "".join(ln + "\n" for ln in XID79.splitlines() if "NVRM: Xid" in ln))
    _write(cap, "ib_ports", "@@source ibstat\n" + fixture_body("ibstat__H100_CX7_some_down__gpud-fixture.txt"))
    _write(cap, "query_gpu_csv", "0, NVIDIA H100 80GB HBM3, 00000000:53:00.0, 535.129.03, GPU-1, 81559, 0\n")
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_capture.py"), "evaluate", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    r = _results(tmp_path)
    assert r["gpu.health"]["status"] == "fail" and "Xid 79" in r["gpu.health"]["summary"]
    assert r["gpu.idle"]["status"] == "pass"
    assert r["gpu.topology"]["status"] == "pass" and "NVSwitch: NV18" in r["gpu.topology"]["summary"]
    assert r["ib.link"]["status"] == "pass" and "8 IB ports" in r["ib.link"]["summary"]
    assert r["query-gpu csv"]["details"][0]["pci.bus_id"] == "00000000:53:00.0"
    assert "gpu.topology   pass" in p.stdout


H200_CAPTURES = {  # the first real H200 session's captures, and the second's (gpu_device_check.sh, 2026-12-04)
    "first": ("nvidia-smi_-q_-x__H200_1gpu_580__real-capture.txt", "nvidia-smi__H200_1gpu_idle_580__real-capture.txt",
              "nvidia-smi_topo_-m__H200_1gpu_ANSI_header_580__real-capture.txt",
              "nvidia-smi_nvlink_-s__H200_1gpu_EMPTY_rc0_580__real-capture.txt"),
    "2026-12-04": tuple(f"{stem}__H200_1gpu_580__real-capture-2026-12-04.txt" for stem in
                        ("nvidia-smi_-q_-x", "nvidia-smi", "nvidia-smi_topo_-m", "nvidia-smi_nvlink_-s")),
}


@pytest.mark.parametrize("session", sorted(H200_CAPTURES))
def test_evaluate_on_the_real_h200_captures_reads_xml_and_its_escaped_one_gpu_matrix(tmp_path, session):
    """The real H200 node (driver 580) that once answered `error: no header row with GPU0`: its raw
    captures, as gpu_capture.sh writes them (escapes and all), evaluate clean."""
    q_xml, table, topo, nvlink = H200_CAPTURES[session]
    cap = tmp_path / "captures"
    cap.mkdir()
    _write(cap, "nvidia_smi_q", fixture_body(q_xml))
    _write(cap, "nvidia_smi", fixture_body(table))
    _write(cap, "nvidia_smi_topo", fixture_body(topo))
    _write(cap, "nvidia_smi_nvlink", fixture_body(nvlink))
    _write(cap, "kernel_log", "@@source dmesg\n")
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_capture.py"), "evaluate", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    r = _results(tmp_path)
    assert r["gpu.health"]["status"] == "pass" and "1 GPUs healthy" in r["gpu.health"]["summary"]
    assert "driver 580.159.04, CUDA 13.0" in r["gpu.health"]["summary"]
    assert r["gpu.topology"]["status"] == "skip" and r["gpu.topology"]["summary"] == "1 GPU on this node: no GPU pair to judge"


def test_the_whole_script_against_the_simulated_tools(tmp_path):
    node = tmp_path / "node"
    st = build_state(NodeSpec(name="gpu01", index=1, backend="nvidia"), "127.0.0.1", [], "255.0.0.0", "lo", "lo")
    faults.apply_fault(st, "gpu_nvlink_down", {"device": 4})
    write_tree(node, st, str(node / "ascend"))
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PATH": f"{node / 'bin'}:{os.environ['PATH']}", "PYTHON": sys.executable}
    p = subprocess.run(["sh", str(SCRIPT)], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    r = _results(out)
    assert r["gpu.health"]["status"] == "pass" and r["gpu.idle"]["status"] == "pass"
    assert r["gpu.topology"]["status"] == "fail" and r["gpu.topology"]["details"]["failed_devices"] == [4]
    assert r["ib.link"]["status"] == "pass"
    assert (out / "captures" / "nvidia_smi_topo.cmd").read_text() == "LC_ALL=C nvidia-smi topo -m\n"  # vendor tools under the C locale
    fx = sorted(x.name for x in (out / "fixtures").iterdir())
    assert any(n.startswith("nvidia-smi_topo_-m__H100-80GB-HBM3_8gpu__capture-") for n in fx), fx
    topo = next((out / "fixtures").glob("nvidia-smi_topo_-m__*"))
    head, _, body = topo.read_text().partition("# ---\n")
    assert head.startswith("# source: real capture by bench/gpu_capture.py on ") and body.startswith("\tGPU0\t")
    meta = json.loads((out / "meta.json").read_text())
    assert meta["gpus"] == 8 and meta["driver"] == "535.183.01"
    smoke = json.loads((out / "smoke_nccl.json").read_text())
    assert "skipped" in smoke or smoke.get("result")  # CUDA only on a real GPU machine
