"""cuda.torch: the launch environment's torch sees every GPU through CUDA, with its NCCL.

What it checks: the inventory's `python`, run in the launch environment (env_files sourced, env
applied), imports torch: `torch.cuda.is_available()` is True, `torch.cuda.device_count()` equals
the inventory's `devices` (fewer with CUDA_VISIBLE_DEVICES set only warns), and torch reports its
NCCL version. It runs after cuda.env (REQUIRES), which has read the driver's CUDA and torch's
build from their version files without importing torch.

Why a check of its own, outside the gate's fast set: importing torch and initialising CUDA costs
seconds of CPU and hundreds of MB (a real H200 node, driver 580: 5.4 s CPU, 650 MB), too much for
a Slurm prolog at every job start; a full `preflight run` pays it. What only this check sees: a
driver that refuses CUDA (a GPU in a bad state, /dev/nvidia* not opened in a container, a broken
CUDA runtime install) and the number of GPUs CUDA itself enumerates.

Why it matters: `torch.cuda.is_available()` False or fewer GPUs than planned makes every rank
fail at `init_process_group("nccl")` or run on fewer GPUs than planned.

How to fix: install the CUDA build of torch for the driver's CUDA
(`pip install torch --index-url https://download.pytorch.org/whl/cu121`), run the container with
the NVIDIA runtime (`--gpus all`), or unset CUDA_VISIBLE_DEVICES in the launch environment.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from preflight.checkapi import Policy, Probe, cmd, CommandOutput, Finding, Status, passed
from preflight.nvidia.pyprobe import python_probe, python_problems, read_python
from preflight.checkhelpers import worst

ID = "cuda.torch"
SCOPE = "node"
POLICY = Policy(backend="nvidia", where="job")  # torch as the job imports it: inside its container when there is one
REQUIRES = ("cuda.env",)  # no python or a CPU-only torch is cuda.env's red line, not a second one
ACTIONS = {"": ("fix_config", "torch, CUDA and the launch environment (docs/NVIDIA.md)")}
DEFAULTS: dict = {}
PY_PROBE = "cuda_torch"
MARK = "@@cuda_torch "
SCRIPT = "\n".join([
    "import json",
    "r = {}",
    "try:",
    "    import torch",
    "    r['torch'] = torch.__version__",
    "    r['torch_cuda'] = torch.version.cuda",
    "    r['cuda_available'] = bool(torch.cuda.is_available())",
    "    r['device_count'] = torch.cuda.device_count() if r['cuda_available'] else 0",
    "    try:",
    "        v = torch.cuda.nccl.version()",
    "        r['nccl'] = '.'.join(map(str, v)) if isinstance(v, tuple) else str(v)",
    "    except Exception as e:",
    "        r['nccl'] = None",
    "        r['nccl_error'] = '%s: %s' % (type(e).__name__, e)",
    "except Exception as e:",
    "    r['error'] = '%s: %s' % (type(e).__name__, e)",
    f"print({MARK!r} + json.dumps(r))",
])


@dataclass(frozen=True)
class Facts:
    python: dict[str, Any] | None            # the script's answer; None when python did not run
    python_error: str | None = None
    visible_devices: str | None = None


def probes(node, params) -> dict[str, Probe]:
    return {PY_PROBE: cmd(python_probe(node, SCRIPT))}


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    return Facts(*read_python(outputs.get(PY_PROBE), MARK))


def evaluate(facts: Facts, params, node) -> list[Finding]:
    py = facts.python
    problems = python_problems(facts, node)
    if not problems:
        assert py is not None
        if not py.get("cuda_available"):
            build = py.get("torch_cuda") or "none (CPU-only build)"
            problems.append((Status.FAIL, f"torch {py.get('torch')} (CUDA {build}): torch.cuda.is_available() is False, expected True",
                             "Install the CUDA build of torch matching the driver's CUDA "
                             "(`pip install torch --index-url https://download.pytorch.org/whl/cu121`), and check "
                             "that the launch environment can open /dev/nvidia*"))
        elif py.get("device_count") != node.devices:
            status = Status.WARN if facts.visible_devices is not None else Status.FAIL
            problems.append((status, f"torch sees {py.get('device_count')} GPUs, expected {node.devices}"
                             + (f" (CUDA_VISIBLE_DEVICES={facts.visible_devices})" if facts.visible_devices is not None else ""),
                             "Unset CUDA_VISIBLE_DEVICES in the launch environment, or fix `devices:` in the inventory"))
        if py.get("cuda_available") and not py.get("nccl"):
            problems.append((Status.WARN, f"torch reports no NCCL version ({py.get('nccl_error') or 'none'})",
                             "Install a torch build with NCCL (the official CUDA wheels include it)"))
    if not problems:
        assert py is not None
        return [passed(f"torch {py.get('torch')} (CUDA {py.get('torch_cuda')}) sees {py.get('device_count')} GPUs, "
                       f"NCCL {py.get('nccl')}", versions={"torch": py.get("torch"), "nccl": py.get("nccl")})]
    return [Finding(worst(s for s, _, _ in problems), "; ".join(t for _, t, _ in problems), {"failed_devices": []},
                    remediation=" ".join(dict.fromkeys(f for _, _, f in problems)))]
