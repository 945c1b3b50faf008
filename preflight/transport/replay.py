"""Recorded outputs: `preflight run --record DIR` writes them, `--replay DIR` reads them back.

One JSON file per node, mapping each probe command to its CommandOutput. Replaying makes a field
report reproducible at a desk (and a bug report a test case) without reaching the cluster.
"""
from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import threading
from pathlib import Path

from ..model import CommandOutput, NodeStateKind
from ..node import Node
from . import ConnectError
from .batch import ProbeSpec


def _file(folder: str, node: str) -> Path:
    return Path(folder) / f"{node}.json"


class Recorder:
    """Collects each node's outputs during a run; writes one file per node atomically."""

    def __init__(self, folder: str):
        self.folder = folder
        Path(folder).mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, dict]] = {}

    def add(self, node: str, probes: list[ProbeSpec], outputs: dict[str, CommandOutput]) -> None:
        with self._lock:
            rec = self._data.setdefault(node, {})
            for p in probes:
                if p.key in outputs:
                    rec[p.cmd] = dataclasses.asdict(outputs[p.key])

    def state(self, node: str, state: NodeStateKind, reason: str) -> None:
        with self._lock:
            self._data.setdefault(node, {})["__state__"] = {"state": state.value, "reason": reason}

    def write(self) -> None:
        for node, rec in self._data.items():
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{node}.")
            with os.fdopen(fd, "w") as f:
                json.dump(rec, f, indent=1, sort_keys=True)
            os.replace(tmp, _file(self.folder, node))


class ReplaySession:
    def __init__(self, record: dict[str, dict]):
        self.record = record

    def run(self, probes: list[ProbeSpec], cancel: threading.Event) -> dict[str, CommandOutput]:
        out = {}
        for p in probes:
            rec = self.record.get(p.cmd)
            out[p.key] = CommandOutput(**rec) if rec else CommandOutput(rc=None, error="not in the recording")
        return out

    def close(self) -> None:
        pass


class ReplayTransport:
    def __init__(self, folder: str):
        self.folder = folder

    def connect(self, node: Node, cancel: threading.Event) -> ReplaySession:
        path = _file(self.folder, node.name)
        if not path.is_file():
            raise ConnectError(NodeStateKind.UNREACHABLE, f"no recording for {node.name} in {self.folder}")
        record = json.loads(path.read_text())
        state = record.pop("__state__", None)
        if state:
            raise ConnectError(NodeStateKind(state["state"]), state["reason"])
        return ReplaySession(record)

    def close(self) -> None:
        pass
