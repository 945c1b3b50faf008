"""Recorded outputs: `preflight run --record DIR` writes them, `--replay DIR` reads them back.

One JSON file per node, mapping each probe command to its CommandOutput. Replaying makes a field
report reproducible at a desk (and a bug report a test case) without reaching the cluster.

Recordings are meant to be attached to bug reports, so they hold no secret: commands and outputs
pass through preflight.redact (the `export` lines of secret-named inventory variables, secret
records of each node's `env -0`, the inventory's secret values anywhere), the folder is created
0700 and every file is 0600. Replay redacts the command it looks up the same way, so a redacted
recording replays.
"""
from __future__ import annotations

import dataclasses
import json
import os
import threading
from pathlib import Path
from typing import Mapping

from .. import redact
from ..atomic import write_atomic
from ..safefile import make_dirs, open_dir
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
        make_dirs(folder)  # 0700 whatever the umask; each file is written by write_atomic's rules
        os.close(open_dir(folder, create=False))  # refused now, before the run, not after it
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, dict]] = {}

    def add(self, node: str, probes: list[ProbeSpec], outputs: dict[str, CommandOutput],
            env: Mapping[str, str] | None = None) -> None:
        """Keep the outputs of one batch, redacted; `env` is the node's inventory env."""
        env = env or {}
        with self._lock:
            rec = self._data.setdefault(node, {})
            for p in probes:
                if p.key in outputs:
                    out = dataclasses.asdict(outputs[p.key])
                    for k in ("stdout", "stderr"):
                        if isinstance(out.get(k), str):
                            out[k] = redact.output(out[k], env)
                    rec[redact.command(p.cmd, env)] = out

    def state(self, node: str, state: NodeStateKind, reason: str) -> None:
        with self._lock:
            self._data.setdefault(node, {})["__state__"] = {"state": state.value, "reason": reason}

    def write(self) -> None:
        for node, rec in self._data.items():
            write_atomic(_file(self.folder, node), json.dumps(rec, indent=1, sort_keys=True), 0o600)


class ReplaySession:
    def __init__(self, record: dict[str, dict], env: Mapping[str, str] | None = None):
        self.record = record
        self.env = env or {}
        # The node's secret variables, found once: a command missing from the recording under its
        # own text is looked up redacted, and with no secret to redact that is the same text.
        # (redact.secrets of its own result is itself, so redact.command gets the same answer.)
        self._secrets = redact.secrets(self.env)

    def run(self, probes: list[ProbeSpec], cancel: threading.Event) -> dict[str, CommandOutput]:
        out = {}
        for p in probes:
            rec = self.record.get(p.cmd)
            if not rec and self._secrets:
                rec = self.record.get(redact.command(p.cmd, self._secrets))
            out[p.key] = CommandOutput(**rec) if rec else CommandOutput(rc=None, error="not in the recording")
        return out

    def close(self) -> None:
        pass


class ReplayTransport:
    # Replaying is reading a file and parsing: nothing to wait on, so one worker thread does it all
    # (64 of them took turns at the GIL: about 1 ms of CPU a node in switching, at 1,000 nodes).
    workers = 1

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
        return ReplaySession(record, node.env)

    def close(self) -> None:
        pass
