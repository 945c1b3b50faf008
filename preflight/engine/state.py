"""What one node's worker knows during a run, and what every phase of the run shares."""
from __future__ import annotations

import errno
import os
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import backend as backends
from ..inventory import Inventory
from ..limits import raise_nofile
from ..model import CommandOutput, NodeStateKind, Result
from ..node import Node
from ..transport import Session, Transport
from .mode import RunMode
from .selection import Selection


@dataclass
class NodeRun:
    """Everything known about one node during a run (touched by one worker thread at a time)."""

    node: Node
    state: NodeStateKind = NodeStateKind.OK
    error: str | None = None
    session: Session | None = None
    outputs: dict[str, dict[str, CommandOutput]] = field(default_factory=dict)  # check -> name -> out
    facts: dict[str, Any] = field(default_factory=dict)
    results: list[Result] = field(default_factory=list)
    done: bool = False
    backend: backends.Decision | None = None  # the node's backend, once connected
    internal: str | None = None  # a bug met in this node's worker (exit 4), in words
    connected: bool = False  # reached in the node phase (its session may since be closed)
    busy: int = 0  # processes of a job on its devices, decided once after gathering (RunMode.busy)

    def close(self) -> None:
        """Close the node's session, if open (best effort: the node may already be gone)."""
        session, self.session = self.session, None
        if session is not None:
            try:
                session.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass


@dataclass
class Shared:
    """What the node and cluster phases both read: fixed for the run, but `cut_reason`, which
    asks the runner (an interrupt may arrive at any moment)."""

    inv: Inventory
    transport: Transport
    cancel: threading.Event
    recorder: Any
    selection: Selection
    keep_sessions: bool  # every node fits in --forks: sessions stay open for the plan rounds
    forks: int
    cut_reason: Callable[[], str]
    mode: RunMode

    def internal(self, run: NodeRun, exc: Exception) -> None:
        """A bug met in a node's worker: said (exit 4) on that node, the others go on."""
        if os.environ.get("PREFLIGHT_DEBUG"):
            traceback.print_exc()
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):  # a limit, not the node
            run.internal = (f"out of file descriptors ({exc.strerror}; ulimit -n {raise_nofile()}): "
                            f"lower --forks (now {self.forks}) or raise the hard limit")
        else:
            run.internal = f"internal error (a bug in preflight, please report it): {type(exc).__name__}: {exc}"
        run.close()
