"""This host as a node (`preflight gate --local`, Slurm prologs): the same driver, run by /bin/sh."""
from __future__ import annotations

import os
import select
import subprocess
import threading

from ..model import CommandOutput
from ..node import Node
from .batch import ProbeSpec, remote_command
from .stream import POLL_S, Batcher


class PipeStream:
    """A driver run by a local process, talked to over its pipes; `first`: what its stdin gets first
    (the driver itself: batch.remote_command)."""

    def __init__(self, argv: list[str], first: bytes = b""):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        if first:
            self.send(first)

    def send(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def read(self) -> bytes | None:
        out = self.proc.stdout
        ready, _, _ = select.select([out], [], [], POLL_S)
        return os.read(out.fileno(), 65536) if ready else None

    def close(self) -> None:
        p = self.proc
        try:
            p.stdin.close()  # EOF: the driver's watcher kills what still runs, the driver exits
        except OSError:
            pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        p.stdout.close()


def _driver(script: str) -> PipeStream:
    command, driver = remote_command(script)
    return PipeStream(["/bin/sh", "-c", command], driver)


class LocalSession:
    def __init__(self, node: Node):
        self.node = node
        self.batcher = Batcher(_driver)

    def run(self, probes: list[ProbeSpec], cancel: threading.Event) -> dict[str, CommandOutput]:
        return self.batcher.run(probes, cancel)

    def close(self) -> None:
        self.batcher.close()


class LocalTransport:
    def connect(self, node: Node, cancel: threading.Event) -> LocalSession:
        return LocalSession(node)

    def close(self) -> None:
        pass
