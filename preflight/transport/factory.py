"""Build the transport a command asked for: recorded outputs (`--replay DIR`), this host
(`gate --local`), Slurm's srun (`run --via slurm`), or SSH. Commands call `make_transport` and never import a transport themselves,
so one place decides which options mean which transport."""
from __future__ import annotations

from typing import Sequence

from ..node import Node
from . import Transport


def make_transport(replay: str | None = None, local: bool = False, via: str = "ssh",
                   nodes: Sequence[Node] = ()) -> Transport:
    """`nodes`: with via="slurm", every node of the run (one srun step carries them all)."""
    if via == "slurm":
        from .slurm import SrunTransport
        return SrunTransport(nodes)
    if replay:
        from .replay import ReplayTransport
        return ReplayTransport(replay)
    if local:
        from .local import LocalTransport
        return LocalTransport()
    from .ssh import SSHTransport, paramiko_warning
    warning = paramiko_warning()
    if warning:
        import sys
        sys.stderr.write(f"preflight: warning: {warning}\n")
    return SSHTransport()
