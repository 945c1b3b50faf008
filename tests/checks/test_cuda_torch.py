"""cuda.torch: the launch environment's torch imported, asked for CUDA's devices and NCCL (the script's
JSON answers below have the shape its own SCRIPT prints)."""
from __future__ import annotations

import json

from preflight.checkapi import Status
from preflight.checks import cuda_torch
from tests.checks.nvidia_helpers import node, out

GOOD = {"torch": "2.4.0+cu124", "torch_cuda": "12.4", "cuda_available": True, "device_count": 8, "nccl": "2.20.5"}


def deep(answer: dict | None, visible: str = "@unset", rc: int = 0, stderr: str = ""):
    line = f"{cuda_torch.MARK}{json.dumps(answer)}\n" if answer is not None else ""
    facts = cuda_torch.parse({cuda_torch.PY_PROBE: out(f"@@visible {visible}\n{line}", rc=rc, stderr=stderr)})
    return cuda_torch.evaluate(facts, cuda_torch.DEFAULTS, node())


def test_torch_sees_all_gpus_passes():
    [f] = deep(GOOD)
    assert f.status is Status.PASS and f.summary == "torch 2.4.0+cu124 (CUDA 12.4) sees 8 GPUs, NCCL 2.20.5"


def test_cuda_unavailable_fails():
    [f] = deep({"torch": "2.4.0+cpu", "torch_cuda": None, "cuda_available": False, "device_count": 0, "nccl": None})
    assert f.status is Status.FAIL and "torch.cuda.is_available() is False" in f.summary


def test_fewer_devices_fails_but_warns_with_cuda_visible_devices():
    [f] = deep({**GOOD, "device_count": 4})
    assert f.status is Status.FAIL
    [f] = deep({**GOOD, "device_count": 4}, visible="0,1,2,3")
    assert f.status is Status.WARN and "CUDA_VISIBLE_DEVICES=0,1,2,3" in f.summary


def test_torch_import_error_or_no_python_fails():
    [f] = deep({"error": "ImportError: libcuda.so.1: cannot open shared object file"})
    assert f.status is Status.FAIL and "libcuda.so.1" in f.summary
    [f] = deep(None, rc=127, stderr="bash: line 1: python3: command not found")
    assert f.status is Status.FAIL and "command not found" in f.summary


def test_cuda_torch_waits_for_cuda_env():
    from preflight.registry import discover
    assert discover()["cuda.torch"].requires == ("cuda.env",) and "import torch" in cuda_torch.SCRIPT
