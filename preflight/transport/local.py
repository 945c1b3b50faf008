"""This host as a node (`preflight gate --local`, Slurm prologs): the same batch, run by /bin/sh."""
from __future__ import annotations

import os
import select
import subprocess
import threading

from ..model import CommandOutput
from ..node import Node
from .batch import ProbeSpec
from .stream import POLL_S, collect


class LocalSession:
    def __init__(self, node: Node):
        self.node = node

    def run(self, probes: list[ProbeSpec], cancel: threading.Event) -> dict[str, CommandOutput]:
        proc: list[subprocess.Popen] = []

        def start(script: str) -> None:
            proc.append(subprocess.Popen(["/bin/sh", "-c", script], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))

        def read() -> bytes | None:
            out = proc[0].stdout
            ready, _, _ = select.select([out], [], [], POLL_S)
            return os.read(out.fileno(), 65536) if ready else None

        def stop() -> None:
            p = proc[0]
            p.stdin.close()  # EOF: the batch's watcher kills what still runs
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()

        return collect(probes, start, read, stop, cancel)

    def close(self) -> None:
        pass


class LocalTransport:
    def connect(self, node: Node, cancel: threading.Event) -> LocalSession:
        return LocalSession(node)

    def close(self) -> None:
        pass
