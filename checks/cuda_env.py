"""cuda.env: the driver and CUDA versions are readable, and the launch environment's Python has a
torch built for a CUDA the driver supports, without importing torch.

What it checks: `nvidia-smi` prints its banner (driver version, and the highest CUDA version the
driver supports); the inventory's `python`, run in the launch environment (env_files sourced, env
applied), finds torch, and torch's own `torch/version.py` (read as text, torch is not imported)
names the CUDA it was built for: `cuda = None` (a CPU-only wheel) fails, a CUDA newer than the
driver's fails. CUDA_VISIBLE_DEVICES set to fewer GPUs than the inventory's `devices` warns.
NCCL's and the CUDA runtime's versions come from the package metadata of the wheels torch
installs (`nvidia-nccl-cu12`, `nvidia-cuda-runtime-cu12`, ...; absent where torch links NCCL
statically: then `-`). The versions (driver, CUDA, NCCL, torch) go to sw.consistency, which
compares them among the NVIDIA nodes only.

Why without torch: importing torch costs seconds of CPU and hundreds of MB (a real H200 node,
driver 580: 5.4 s CPU and 650 MB), which a Slurm prolog pays at every job start; the version
files answer the mismatches that make `torch.cuda.is_available()` False in milliseconds.
`cuda.torch` (not in the gate's fast set; part of a full `run`) imports torch and asks CUDA
itself: is_available, the device count, the NCCL torch carries.

Why it matters: a CPU-only torch wheel, a torch built for CUDA 12.4 on a 12.2 driver, or
CUDA_VISIBLE_DEVICES left set in a profile makes every rank fail at `init_process_group("nccl")`
or run on fewer GPUs than planned.

How to fix: install the CUDA build of torch for the driver's CUDA
(`pip install torch --index-url https://download.pytorch.org/whl/cu121`), upgrade the driver, or
unset CUDA_VISIBLE_DEVICES in the launch environment.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from preflight.checkapi import Policy, Probe, cmd, CommandOutput, Finding, Status, passed
from preflight.checkhelpers import worst
from preflight.nvidia import nvidia_smi, probes as nv
from preflight.nvidia.pyprobe import python_probe, python_problems, read_python

ID = "cuda.env"
SCOPE = "node"
POLICY = Policy(backend="nvidia", gate=True)
# What to do with a fail/warn (preflight/actions.py): driver, CUDA and torch are installed configuration.
ACTIONS = {"": ("fix_config", "driver / CUDA / torch versions and the launch environment (docs/NVIDIA.md)")}
DEFAULTS: dict = {}
PY_PROBE = "cuda_versions"
MARK = "@@cuda_env "
# Runs in the launch environment's python (3.8+ for importlib.metadata; on an older one only the
# metadata versions are missing). find_spec of a top-level package locates it without running it.
# torch/version.py is generated at build time: `cuda = '11.3'` (1.x), `cuda: Optional[str] = '12.4'`
# (2.x), `... = None` in a CPU-only or ROCm wheel; `__version__ = '2.4.0+cu124'`.
SCRIPT = r"""import json, os, re, sys
r = {}
try:
    import importlib.util
    spec = importlib.util.find_spec('torch')
    if spec is None or not spec.submodule_search_locations:
        r['error'] = "ModuleNotFoundError: No module named 'torch'"
    else:
        path = os.path.join(list(spec.submodule_search_locations)[0], 'version.py')
        text = open(path).read()
        v = re.search(r"^__version__\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
        c = re.search(r"^cuda\s*(?::[^=\n]*)?=\s*(None|['\"]([^'\"]*)['\"])", text, re.M)
        r['torch'] = v.group(1) if v else None
        r['torch_cuda'] = c.group(2) if c and c.group(2) else None
        r['version_file'] = path if c else None
    try:
        from importlib import metadata
        def ver(names):
            for n in names:
                try:
                    return metadata.version(n)
                except Exception:
                    pass
        r['nccl'] = ver(['nvidia-nccl-cu13', 'nvidia-nccl-cu12', 'nvidia-nccl-cu11'])
        r['cudart'] = ver(['nvidia-cuda-runtime-cu13', 'nvidia-cuda-runtime-cu12', 'nvidia-cuda-runtime-cu11'])
    except ImportError:
        pass
except Exception as e:
    r['error'] = '%s: %s' % (type(e).__name__, e)
print(""" + repr(MARK) + """ + json.dumps(r))
"""


@dataclass(frozen=True)
class Facts:
    tool_error: Finding | None
    driver_version: str | None = None
    cuda_version: str | None = None
    python: dict[str, Any] | None = None     # the script's answer; None when python did not run
    python_error: str | None = None
    visible_devices: str | None = None


def probes(node, params) -> dict[str, Probe]:
    # the driver (nvidia-smi) is the host's; torch and its packages are where the job runs (its container)
    return {nv.SMI_PROBE: cmd(nv.NVIDIA_SMI, where="host"), PY_PROBE: cmd(python_probe(node, SCRIPT), where="job")}


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    smi = nv.read_smi(outputs, nv.SMI_PROBE, nv.NVIDIA_SMI)
    if isinstance(smi, Finding):
        return Facts(tool_error=smi)
    table = nvidia_smi.parse_table(smi.stdout)
    answer, error, visible = read_python(outputs.get(PY_PROBE), MARK)
    return Facts(None, table.driver_version, table.cuda_version, answer, error, visible)


def _ver(v: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v or "")[:2])


def evaluate(facts: Facts, params, node) -> list[Finding]:
    if facts.tool_error is not None:
        return [facts.tool_error]
    py = facts.python
    problems = python_problems(facts, node)
    if not problems:
        assert py is not None
        if not py.get("version_file"):
            problems.append((Status.FAIL, f"torch {py.get('torch')}: no `cuda =` line in torch/version.py, so no CUDA build "
                             "(torch.cuda.is_available() would be False), expected a CUDA build",
                             "Reinstall the CUDA build of torch for the driver's CUDA "
                             "(`pip install torch --index-url https://download.pytorch.org/whl/cu121`)"))
        elif not py.get("torch_cuda"):
            problems.append((Status.FAIL, f"torch {py.get('torch')} has no CUDA build (torch/version.py: cuda = None): "
                             "torch.cuda.is_available() would be False, expected a CUDA build",
                             "Install the CUDA build of torch matching the driver's CUDA "
                             "(`pip install torch --index-url https://download.pytorch.org/whl/cu121`)"))
        elif facts.cuda_version and _ver(py["torch_cuda"]) > _ver(facts.cuda_version):
            problems.append((Status.FAIL, f"torch is built for CUDA {py['torch_cuda']}, the driver supports up to {facts.cuda_version}",
                             "Upgrade the NVIDIA driver, or install a torch build for the driver's CUDA"))
        visible = facts.visible_devices
        if visible is not None and len([d for d in visible.split(",") if d.strip()]) != node.devices:
            problems.append((Status.WARN, f"CUDA_VISIBLE_DEVICES={visible} in the launch environment, expected "
                             f"{node.devices} GPUs visible (inventory devices)",
                             "Unset CUDA_VISIBLE_DEVICES in the launch environment, or fix `devices:` in the inventory"))
    versions = {"driver": facts.driver_version, "cuda": facts.cuda_version,
                "torch": (py or {}).get("torch"), "nccl": (py or {}).get("nccl")}
    if not problems:
        assert py is not None
        return [passed(f"driver {facts.driver_version}, CUDA {facts.cuda_version}; torch {py.get('torch')} built for CUDA "
                       f"{py.get('torch_cuda')}, NCCL {py.get('nccl') or '-'} (package files; cuda.torch imports torch)",
                       versions=versions, cuda_runtime=py.get("cudart"))]
    return [Finding(worst(s for s, _, _ in problems), "; ".join(t for _, t, _ in problems),
                    {"versions": versions, "failed_devices": []},
                    remediation=" ".join(dict.fromkeys(f for _, _, f in problems)))]
