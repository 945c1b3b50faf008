"""One command per node over the run's transport, nodes in parallel: what `fix` needs after a run
(read the env files, apply or roll back a script). A node that cannot be reached answers with its
connection error; it never blocks the others."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping

from ..model import CommandOutput
from ..node import Node
from ..transport import ConnectError, Transport
from ..transport.batch import ProbeSpec


def run_each(transport: Transport, commands: Mapping[str, tuple[Node, str]], timeout: float = 120.0,
             forks: int = 64) -> dict[str, CommandOutput]:
    """node name -> (node, command) in; node name -> output out."""
    cancel = threading.Event()

    def one(item: tuple[Node, str]) -> CommandOutput:
        node, cmd = item
        try:
            session = transport.connect(node, cancel)
        except ConnectError as exc:
            return CommandOutput(rc=None, error=f"{exc.state.value}: {exc.reason}")
        try:
            return session.run([ProbeSpec("cmd", cmd, timeout)], cancel)["cmd"]
        finally:
            session.close()

    if not commands:
        return {}
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(forks, len(commands)))) as pool:
            return dict(zip(commands, pool.map(one, list(commands.values()))))
    finally:
        transport.close()
