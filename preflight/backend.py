"""Which accelerator backend a node is: the inventory's `backend:`, or for `backend: auto` what the
node has. One probe, sent only for `auto` nodes before their checks: `npu-smi` on the login PATH
means Ascend, `nvidia-smi` means NVIDIA (both: Ascend, the cluster this tool is built for, and the
result says both were found); neither: Ascend, said so in ssh.connect's details, so the Ascend
checks report the missing npu-smi as they would for `backend: ascend`."""
from __future__ import annotations

from dataclasses import dataclass

from .model import CommandOutput

DETECT = ("for t in npu-smi nvidia-smi; do command -v $t >/dev/null 2>&1 && echo \"@@has $t\"; done; true")
NAMES = {"ascend": "Ascend", "nvidia": "NVIDIA"}


@dataclass(frozen=True)
class Decision:
    backend: str      # ascend | nvidia
    how: str          # the sentence for ssh.connect's details


def declared(backend: str) -> Decision:
    return Decision(backend, f"backend: {backend} in the inventory")


def decide(out: CommandOutput | None) -> Decision:
    """The DETECT probe's output -> Decision."""
    found = {line.split()[1] for line in (out.stdout if out is not None else "").splitlines()
             if line.startswith("@@has ")}
    if "npu-smi" in found and "nvidia-smi" in found:
        return Decision("ascend", "backend: auto -> ascend (both npu-smi and nvidia-smi found)")
    if "npu-smi" in found:
        return Decision("ascend", "backend: auto -> ascend (npu-smi found)")
    if "nvidia-smi" in found:
        return Decision("nvidia", "backend: auto -> nvidia (nvidia-smi found)")
    why = "probe failed" if out is None or not out.ok else "neither npu-smi nor nvidia-smi on the PATH"
    return Decision("ascend", f"backend: auto -> ascend assumed ({why})")


def skip_reason(check_backend: str, node_backend: str, how: str) -> str:
    return (f"{NAMES[check_backend]} check: this is an {NAMES[node_backend]} node ({how})")


def groups(nodes) -> dict[str, list[str]]:
    """backend -> node names (cluster checks compare like with like: an Ascend node's CANN
    against other Ascend nodes only). `nodes` maps names to inventory Nodes."""
    out: dict[str, list[str]] = {}
    for name, node in nodes.items():
        out.setdefault(getattr(node, "backend", "ascend") if getattr(node, "backend", "ascend") != "auto" else "ascend",
                       []).append(name)
    return out
