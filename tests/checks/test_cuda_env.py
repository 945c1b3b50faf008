"""cuda.env, the gate's fast set: versions from files, torch not imported (cuda.torch imports it).

cuda.env's probe script is run for real by this machine's python against real torch/version.py
files (tests/fixtures/nvidia/torch_version.py__*, sources in their headers) laid out as a
site-packages directory, so the script's reading of the two generations of that file is tested,
not a stand-in for it.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from preflight.checkapi import Status
from preflight.checks import cuda_env as check
from preflight.nvidia import probes as nv
from tests.checks.nvidia_helpers import H100_TABLE, node, out
from tests.support import fixture_body

CU129 = "torch_version.py__2.7.1_cu12.9_annotated__steleman-pytorch-cuda.txt"
CU101 = "torch_version.py__1.3.1_cu10.1__rotatedstomatanet.txt"
CPU18 = "torch_version.py__1.8.0_cpu__focas.txt"
CPU213 = "torch_version.py__2.13.0_cpu__pypi-wheel.txt"
H200_TABLE = fixture_body("nvidia-smi__H200_1gpu_idle_580__real-capture.txt")  # driver 580.159.04, CUDA 13.0


def script_answer(tmp_path, version_py: str | None, packages: dict[str, str] | None = None) -> str:
    """What cuda.env's probe prints, run by this python (-S: without this machine's site-packages)
    over a directory holding torch/version.py (a fixture's body) and dist-info for `packages`."""
    site = tmp_path / "site"
    site.mkdir()
    if version_py is not None:
        (site / "torch").mkdir()
        (site / "torch" / "__init__.py").write_text("raise SystemExit('torch must not be imported')\n")
        (site / "torch" / "version.py").write_text(fixture_body(version_py))
    for name, version in (packages or {}).items():
        d = site / f"{name.replace('-', '_')}-{version}.dist-info"
        d.mkdir()
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, "-S", "-c", check.SCRIPT], capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def run(stdout: str, table: str = H100_TABLE, visible: str = "@unset", devices: int = 8, rc: int = 0, stderr: str = ""):
    facts = check.parse({nv.SMI_PROBE: out(table), check.PY_PROBE: out(f"@@visible {visible}\n{stdout}", rc=rc, stderr=stderr)})
    return check.evaluate(facts, check.DEFAULTS, node(devices))


def test_cuda_build_under_the_driver_cuda_passes_with_versions_from_files(tmp_path):
    nccl = {"nvidia-nccl-cu12": "2.26.2", "nvidia-cuda-runtime-cu12": "12.9.79"}
    [f] = run(script_answer(tmp_path, CU129, nccl), table=H200_TABLE, devices=1)
    assert f.status is Status.PASS, f.summary
    assert f.summary == ("driver 580.159.04, CUDA 13.0; torch 2.7.1-700 built for CUDA 12.9, NCCL 2.26.2 "
                         "(package files; cuda.torch imports torch)")
    assert f.details["versions"] == {"driver": "580.159.04", "cuda": "13.0", "torch": "2.7.1-700", "nccl": "2.26.2"}
    assert f.details["cuda_runtime"] == "12.9.79"


def test_old_form_version_file_is_read_too(tmp_path):
    [f] = run(script_answer(tmp_path, CU101))  # `cuda = '10.1'` under a 12.4 driver
    assert f.status is Status.PASS and "torch 1.3.1 built for CUDA 10.1, NCCL -" in f.summary


@pytest.mark.parametrize("version_py, torch", [(CPU18, "1.8.0+cpu"), (CPU213, "2.13.0+cpu")])
def test_cpu_only_torch_fails_without_importing_it(tmp_path, version_py, torch):
    [f] = run(script_answer(tmp_path, version_py))
    assert f.status is Status.FAIL
    assert f.summary == (f"torch {torch} has no CUDA build (torch/version.py: cuda = None): "
                         "torch.cuda.is_available() would be False, expected a CUDA build")


def test_torch_built_for_newer_cuda_than_driver_fails(tmp_path):
    [f] = run(script_answer(tmp_path, CU129))  # the H100 table's driver supports CUDA 12.4
    assert f.status is Status.FAIL and "built for CUDA 12.9, the driver supports up to 12.4" in f.summary


def test_cuda_visible_devices_narrower_than_the_node_warns(tmp_path):
    answer = script_answer(tmp_path, CU101)
    [f] = run(answer, visible="0,1,2,3")
    assert f.status is Status.WARN and "CUDA_VISIBLE_DEVICES=0,1,2,3" in f.summary
    [f] = run(answer, visible="0,1,2,3,4,5,6,7")
    assert f.status is Status.PASS


def test_no_torch_or_no_python_fails(tmp_path):
    [f] = run(script_answer(tmp_path, None))
    assert f.status is Status.FAIL and "No module named 'torch'" in f.summary
    [f] = run("", rc=127, stderr="bash: line 1: python3: command not found")
    assert f.status is Status.FAIL and "command not found" in f.summary


def test_the_fast_set_has_cuda_env_and_not_the_torch_import():
    from preflight.registry import gate_set
    assert "cuda.env" in gate_set() and "cuda.torch" not in gate_set()
    assert "import torch" not in check.SCRIPT


def test_driver_on_the_host_torch_in_the_job():
    """SPEC §2.10: with `container:`, nvidia-smi (the driver) is read on the host, torch where the job runs."""
    p = check.probes(node(), {})
    assert p[nv.SMI_PROBE].job is False and p[check.PY_PROBE].job is True
