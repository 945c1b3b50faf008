"""Running Slurm's commands: every failure is a SlurmError with one line and its own exit code.

Exit codes (docs/SPEC.md §7): 5 Slurm not usable (a command not on PATH, slurmctld not
answering), 6 no Slurm allocation, 7 `--need` larger than the allocation, 8 Slurm refused an
operator command (scontrol update as a user who is not an operator).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Sequence

from .parse import SlurmNode, parse_sinfo_states

EXIT_SLURM_UNUSABLE, EXIT_NO_ALLOCATION, EXIT_NEED_TOO_LARGE, EXIT_SLURM_DENIED = 5, 6, 7, 8
TIMEOUT = 30.0

# slurm_strerror() texts that mean "you may not do this": 22.05 says "Invalid user id" for a
# user that is not SlurmUser/root/an operator, other releases "Access/permission denied".
DENIED = ("Invalid user id", "Access/permission denied", "Access denied", "User not authorized")


class SlurmError(Exception):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def tool(name: str) -> str:
    path = shutil.which(name)
    if not path:
        raise SlurmError(f"{name} not found on PATH: is this a Slurm node with the Slurm client installed?",
                         EXIT_SLURM_UNUSABLE)
    return path


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{os.path.basename(argv[0])} did not answer within {TIMEOUT:.0f}s "
                         "(is slurmctld up?)", EXIT_SLURM_UNUSABLE) from None
    except OSError as exc:
        raise SlurmError(f"cannot run {argv[0]}: {exc.strerror}", EXIT_SLURM_UNUSABLE) from None


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


def node_states(names: Sequence[str]) -> dict[str, SlurmNode]:
    """Slurm's view of these nodes (absent from the answer: not a node of this Slurm cluster)."""
    argv = [tool("sinfo"), "-h", "-N", "-o", "%N %t %E"]
    if names:
        argv += ["-n", ",".join(names)]
    cp = _run(argv)
    if cp.returncode != 0:
        raise SlurmError(f"sinfo failed (exit {cp.returncode}): {_one_line(cp.stderr or cp.stdout)}",
                         EXIT_SLURM_UNUSABLE)
    return parse_sinfo_states(cp.stdout)


def update_argv(node: str, state: str, reason: str | None = None) -> list[str]:
    argv = ["scontrol", "update", f"NodeName={node}", f"State={state}"]
    if reason is not None:
        argv.append(f"Reason={reason}")
    return argv


def update(argv: Sequence[str]) -> None:
    """Run one `scontrol update`; a refusal for lack of rights is EXIT_SLURM_DENIED."""
    cp = _run([tool("scontrol"), *argv[1:]])
    if cp.returncode == 0:
        return
    said = _one_line(cp.stderr or cp.stdout)
    if any(d.lower() in said.lower() for d in DENIED):
        raise SlurmError(f"scontrol refused ({said}): draining and resuming need root, SlurmUser or a "
                         "Slurm operator (sacctmgr ... AdminLevel=Operator)", EXIT_SLURM_DENIED)
    raise SlurmError(f"scontrol update {argv[2]} failed (exit {cp.returncode}): {said}", EXIT_SLURM_UNUSABLE)
