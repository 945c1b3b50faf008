"""cuda.env: the driver and CUDA versions are readable, and the launch environment's Python sees
the GPUs through torch, with its NCCL.

What it checks: `nvidia-smi` prints its banner (driver version, and the highest CUDA version the
driver supports); the inventory's `python`, run in the launch environment (env_files sourced, env
applied), imports torch, `torch.cuda.is_available()` is True, `torch.cuda.device_count()` equals
the inventory's `devices` (fewer with CUDA_VISIBLE_DEVICES set only warns), and torch reports its
NCCL version. torch's CUDA build must not be newer than the driver's CUDA. The versions (driver,
CUDA, NCCL, torch) go to sw.consistency, which compares them among the NVIDIA nodes only.

Why it matters: a CPU-only torch wheel, a torch built for CUDA 12.4 on a 12.2 driver, or
CUDA_VISIBLE_DEVICES left set in a profile makes every rank fail at `init_process_group("nccl")`
or run on fewer GPUs than planned.

How to fix: install the CUDA build of torch for the driver's CUDA
(`pip install torch --index-url https://download.pytorch.org/whl/cu121`), upgrade the driver, or
unset CUDA_VISIBLE_DEVICES in the launch environment.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from preflight import launchenv
from preflight.checkapi import Policy, Probe, cmd, sh, CommandOutput, Finding, ParseError, Status, first_line, passed, require_ok
from preflight.model import worst
from preflight.nvidia import nvidia_smi, probes as nv

ID = "cuda.env"
SCOPE = "node"
POLICY = Policy(backend="nvidia", gate=True)
# What to do with a fail/warn (preflight/actions.py): driver, CUDA and torch are installed configuration.
ACTIONS = (("", "fix_config", "driver / CUDA / torch versions and the launch environment (docs/NVIDIA.md)"),)
DEFAULTS: dict = {}
PY_PROBE = "cuda_python"
MARK = "@@cuda_env "
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
    tool_error: Finding | None
    driver_version: str | None = None
    cuda_version: str | None = None
    python: dict[str, Any] | None = None     # the script's answer; None when python did not run
    python_error: str | None = None
    visible_devices: str | None = None


def probes(node, params) -> dict[str, Probe]:
    # ${CUDA_VISIBLE_DEVICES-@unset}: braces doubled, sh() fills {fields}
    return {nv.SMI_PROBE: cmd(nv.NVIDIA_SMI),
            PY_PROBE: cmd(launchenv.command(node, sh("echo \"@@visible ${{CUDA_VISIBLE_DEVICES-@unset}}\"; {py} -c {src}",
                                                     py=node.python, src=SCRIPT)))}


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    smi = nv.read_smi(outputs, nv.SMI_PROBE, nv.NVIDIA_SMI)
    if isinstance(smi, Finding):
        return Facts(tool_error=smi)
    table = nvidia_smi.parse_table(smi.stdout)
    py = require_ok(outputs.get(PY_PROBE), "python in the launch environment")
    m = re.search(r"^@@visible (.*)$", py.stdout, re.M)
    visible = None if not m or m.group(1) == "@unset" else m.group(1)
    line = next((ln for ln in py.stdout.splitlines() if ln.startswith(MARK)), None)
    if line is None:
        return Facts(None, table.driver_version, table.cuda_version, None,
                     first_line(py.stderr) or f"exit code {py.rc}", visible)
    try:
        answer = json.loads(line[len(MARK):])
    except ValueError:
        raise ParseError("cuda.env: the python probe printed an unreadable line", line) from None
    return Facts(None, table.driver_version, table.cuda_version, answer, None, visible)


def _ver(v: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v or "")[:2])


def evaluate(facts: Facts, params, node) -> list[Finding]:
    if facts.tool_error is not None:
        return [facts.tool_error]
    problems: list[tuple[Status, str, str]] = []
    py = facts.python
    if py is None:
        problems.append((Status.FAIL, f"{node.python} did not run in the launch environment: {facts.python_error}",
                         f"Set `python:` for this node to the interpreter that has torch (e.g. /opt/conda/bin/python3)"))
    elif py.get("error"):
        problems.append((Status.FAIL, f"torch not importable by {node.python}: {py['error']}",
                         f"Install torch with CUDA for this python: `{node.python} -m pip install torch`"))
    else:
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
        if py.get("torch_cuda") and facts.cuda_version and _ver(py["torch_cuda"]) > _ver(facts.cuda_version):
            problems.append((Status.FAIL, f"torch is built for CUDA {py['torch_cuda']}, the driver supports up to {facts.cuda_version}",
                             "Upgrade the NVIDIA driver, or install a torch build for the driver's CUDA"))
        if py.get("cuda_available") and not py.get("nccl"):
            problems.append((Status.WARN, f"torch reports no NCCL version ({py.get('nccl_error') or 'none'})",
                             "Install a torch build with NCCL (the official CUDA wheels include it)"))
    versions = {"driver": facts.driver_version, "cuda": facts.cuda_version,
                "torch": (py or {}).get("torch"), "nccl": (py or {}).get("nccl")}
    if not problems:
        return [passed(f"driver {facts.driver_version}, CUDA {facts.cuda_version}; torch {py.get('torch')} sees "
                       f"{py.get('device_count')} GPUs, NCCL {py.get('nccl')}", versions=versions)]
    return [Finding(worst(s for s, _, _ in problems), "; ".join(t for _, t, _ in problems),
                    {"versions": versions, "failed_devices": []},
                    remediation=" ".join(dict.fromkeys(f for _, _, f in problems)))]
