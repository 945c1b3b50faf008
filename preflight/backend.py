"""Which accelerator backend a node is: the inventory's `backend:`, or for `backend: auto` what the
node has. One probe, sent only for `auto` nodes before their checks: `npu-smi` on the login PATH
means Ascend, `nvidia-smi` means NVIDIA (both: Ascend, the cluster this tool is built for, and the
result says both were found); neither: Ascend, said so in ssh.connect's details, so the Ascend
checks report the missing npu-smi as they would for `backend: ascend`. A detection probe that did
not answer (timed out, connection lost) decides nothing: the backend-specific checks of that node
report `error` with the reason instead of guessing (a guess would raise the other backend's alarms)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from .model import CommandOutput

DETECT = ("for t in npu-smi nvidia-smi; do command -v $t >/dev/null 2>&1 && echo \"@@has $t\"; done; true")
NAMES = {"ascend": "Ascend", "nvidia": "NVIDIA"}
UNKNOWN = "unknown"  # the detection probe did not answer: backend-specific checks report `error`


@dataclass(frozen=True)
class Decision:
    backend: str      # ascend | nvidia
    how: str          # the sentence for ssh.connect's details


def declared(backend: str) -> Decision:
    return Decision(backend, f"backend: {backend} in the inventory")


def decide(out: CommandOutput | None) -> Decision:
    """The DETECT probe's output -> Decision."""
    if out is None or not out.ok:
        why = "probe not run" if out is None else (out.error or ("timed out" if out.timed_out else f"exit code {out.rc}"))
        return Decision(UNKNOWN, f"backend: auto, not decided: the detection probe failed ({why})")
    found = {line.split()[1] for line in out.stdout.splitlines() if line.startswith("@@has ")}
    if "npu-smi" in found and "nvidia-smi" in found:
        return Decision("ascend", "backend: auto -> ascend (both npu-smi and nvidia-smi found)")
    if "npu-smi" in found:
        return Decision("ascend", "backend: auto -> ascend (npu-smi found)")
    if "nvidia-smi" in found:
        return Decision("nvidia", "backend: auto -> nvidia (nvidia-smi found)")
    return Decision("ascend", "backend: auto -> ascend assumed (neither npu-smi nor nvidia-smi on the PATH)")


def undecided(how: str) -> str:
    return f"could not tell this node's backend: {how}"


def skip_reason(check_backend: str, node_backend: str, how: str) -> str:
    return (f"{NAMES[check_backend]} check: this is an {NAMES[node_backend]} node ({how})")


_BY_NAME = {v: k for k, v in NAMES.items()}
_SKIP = re.compile(rf"({'|'.join(NAMES.values())}) check: this is an ({'|'.join(NAMES.values())}) node \(")


def skipped_for_backend(summary: str) -> tuple[str, str] | None:
    """(check backend, node backend) of a skip_reason() summary, else None: the checklist folds
    those lines (report/group.py), the JSON keeps them as they are."""
    m = _SKIP.match(summary)
    return (_BY_NAME[m.group(1)], _BY_NAME[m.group(2)]) if m else None


def groups(nodes) -> dict[str, list[str]]:
    """backend -> node names (cluster checks compare like with like: an Ascend node's CANN
    against other Ascend nodes only). `nodes` maps names to inventory Nodes."""
    out: dict[str, list[str]] = {}
    for name, node in nodes.items():
        backend = getattr(node, "backend", "ascend")
        out.setdefault("ascend" if backend == "auto" else backend, []).append(name)
    return out
