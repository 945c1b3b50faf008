"""How to reach a node: SSH (paramiko), this host (local), or recorded outputs (replay).

Every transport gives a `Session` per node that runs a list of probes as one batch and returns a
`CommandOutput` per probe. Connection problems raise `ConnectError` carrying the SPEC node state.
"""
from __future__ import annotations

import threading
import warnings
from typing import Protocol

from ..model import CommandOutput, NodeStateKind
from ..node import Node
from .batch import ProbeSpec

# paramiko before 3.5 reads TripleDES where cryptography 43 and later deprecate it: without this,
# every run under the oldest paramiko the pin allows (3.4) printed two CryptographyDeprecationWarning
# blocks on stderr, about a cipher preflight never negotiates. Only that message, only from paramiko.
warnings.filterwarnings("ignore", message="TripleDES has been moved", module=r"paramiko\.")


class ConnectError(Exception):
    def __init__(self, state: NodeStateKind, reason: str):
        super().__init__(reason)
        self.state = state
        self.reason = reason


class Session(Protocol):
    def run(self, probes: list[ProbeSpec], cancel: threading.Event) -> dict[str, CommandOutput]:
        """Run the batch; a probe that never finished gets rc None and an `error`."""

    def close(self) -> None: ...


class Transport(Protocol):
    def connect(self, node: Node, cancel: threading.Event) -> Session: ...

    def close(self) -> None: ...


def unfinished(probes: list[ProbeSpec], done: dict[str, CommandOutput], why: str) -> dict[str, CommandOutput]:
    """Fill in the probes a broken batch never reported, so each check can say what happened."""
    for p in probes:
        done.setdefault(p.key, CommandOutput(rc=None, error=why))
    return done


__all__ = ["ConnectError", "ProbeSpec", "Session", "Transport", "unfinished"]
