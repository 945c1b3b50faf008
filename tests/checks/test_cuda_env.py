from __future__ import annotations

import json

from preflight.checkapi import Status
from preflight.checks import cuda_env as check
from preflight.nvidia import probes as nv
from tests.checks.nvidia_helpers import H100_TABLE, node, out

GOOD = {"torch": "2.4.0+cu124", "torch_cuda": "12.4", "cuda_available": True, "device_count": 8, "nccl": "2.20.5"}


def py(answer: dict | None, visible: str = "@unset", rc: int = 0, stderr: str = ""):
    line = f"{check.MARK}{json.dumps(answer)}\n" if answer is not None else ""
    return out(f"@@visible {visible}\n{line}", rc=rc, stderr=stderr)


def run(answer, **kw):
    facts = check.parse({nv.SMI_PROBE: out(H100_TABLE), check.PY_PROBE: py(answer, **kw)})
    return check.evaluate(facts, check.DEFAULTS, node())


def test_torch_sees_all_gpus_passes_with_versions():
    [f] = run(GOOD)
    assert f.status is Status.PASS and "driver 550.90.07, CUDA 12.4" in f.summary and "NCCL 2.20.5" in f.summary
    assert f.details["versions"] == {"driver": "550.90.07", "cuda": "12.4", "torch": "2.4.0+cu124", "nccl": "2.20.5"}


def test_cpu_only_torch_fails():
    [f] = run({"torch": "2.4.0+cpu", "torch_cuda": None, "cuda_available": False, "device_count": 0, "nccl": None})
    assert f.status is Status.FAIL and "torch.cuda.is_available() is False" in f.summary


def test_torch_built_for_newer_cuda_than_driver_fails():
    [f] = run({**GOOD, "torch_cuda": "12.6"})
    assert f.status is Status.FAIL and "built for CUDA 12.6, the driver supports up to 12.4" in f.summary


def test_fewer_devices_fails_but_warns_with_cuda_visible_devices():
    [f] = run({**GOOD, "device_count": 4})
    assert f.status is Status.FAIL
    [f] = run({**GOOD, "device_count": 4}, visible="0,1,2,3")
    assert f.status is Status.WARN and "CUDA_VISIBLE_DEVICES=0,1,2,3" in f.summary


def test_no_torch_or_no_python_fails():
    [f] = run({"error": "ModuleNotFoundError: No module named 'torch'"})
    assert f.status is Status.FAIL and "No module named 'torch'" in f.summary
    [f] = run(None, rc=127, stderr="bash: line 1: python3: command not found")
    assert f.status is Status.FAIL and "command not found" in f.summary
