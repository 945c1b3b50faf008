"""One command per node over the run's transport, nodes in parallel: what `fix` needs after a run
(read the env files, apply or roll back a script). A node that cannot be reached answers with its
connection error; it never blocks the others.

Each command is a Probe built by the probe API (a plain string is refused, as the runner refuses
one), and its privilege is the driver's own rule (docs/SPEC.md §2.9): a probe that declares root
runs as the login user when that is root, under `sudo -n` with `become: sudo`, else is not run."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping

from ..checkapi import Probe, Shell
from ..model import CommandOutput
from ..node import Node
from ..transport import ConnectError, Transport
from ..transport import wrapping
from ..transport.batch import ProbeSpec


def spec(node: Node, probe: Probe, timeout: float) -> ProbeSpec:
    """The driver's form of one fix command (transport.wrapping, the one place privilege is
    decided): its privilege from the probe's declared need, on the host."""
    if not isinstance(probe, Probe) or not isinstance(probe.cmd, Shell):
        raise TypeError("run_each takes probes built by checkapi.cmd()/sh(), not shell text")
    return wrapping.spec(Probe(probe.cmd, probe.timeout or timeout, bool(probe.root), False), node, None, "cmd")


def run_each(transport: Transport, commands: Mapping[str, tuple[Node, Probe]], timeout: float = 120.0,
             forks: int = 64) -> dict[str, CommandOutput]:
    """node name -> (node, probe) in; node name -> output out."""
    cancel = threading.Event()
    specs = {name: spec(node, probe, timeout) for name, (node, probe) in commands.items()}

    def one(item: tuple[str, tuple[Node, Probe]]) -> CommandOutput:
        name, (node, _probe) = item
        try:
            session = transport.connect(node, cancel)
        except ConnectError as exc:
            return CommandOutput(rc=None, error=f"{exc.state.value}: {exc.reason}")
        try:
            return session.run([specs[name]], cancel)["cmd"]
        finally:
            session.close()

    if not commands:
        return {}
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(forks, len(commands)))) as pool:
            return dict(zip(commands, pool.map(one, list(commands.items()))))
    finally:
        transport.close()
