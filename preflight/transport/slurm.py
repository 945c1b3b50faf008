"""Nodes reached through Slurm (`run --via slurm`): the same framed driver, carried by srun.

Why: on clusters where the control host may not SSH into compute nodes, Slurm's own daemons are
the way in. Each node's driver runs as `srun --nodes=1 --ntasks=1 --nodelist=NODE /bin/sh -c
DRIVER`; srun forwards its stdin and stdout, so rounds (follow-ups, cluster plans) reach the same
driver exactly as over an SSH channel, and closing srun's stdin lets the driver's watcher kill
what still runs. Inventory node names must be Slurm's node names.

Today this is one srun per node (one client process each), not yet one srun for every node
(docs/SLURM.md §6): a node Slurm cannot launch on shows as every probe's error (srun's message),
not as a node state of its own.
"""
from __future__ import annotations

import threading

from ..model import CommandOutput
from ..node import Node
from .batch import ProbeSpec
from .local import PipeStream
from .stream import Batcher


def srun_argv(node: Node, script: str) -> list[str]:
    return ["srun", "--quiet", "--nodes=1", "--ntasks=1", f"--nodelist={node.name}", "--kill-on-bad-exit=1",
            "/bin/sh", "-c", script]


class SrunSession:
    def __init__(self, node: Node):
        self.node = node
        self.connected = f"reached through srun (Slurm node {node.name}); SSH not used"  # ssh.connect's summary
        self.batcher = Batcher(lambda script: PipeStream(srun_argv(node, script)))

    def run(self, probes: list[ProbeSpec], cancel: threading.Event) -> dict[str, CommandOutput]:
        return self.batcher.run(probes, cancel)

    def close(self) -> None:
        self.batcher.close()


class SrunTransport:
    def connect(self, node: Node, cancel: threading.Event) -> SrunSession:
        return SrunSession(node)

    def close(self) -> None:
        pass
