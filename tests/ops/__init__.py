"""Tests for the operations layer (history, lock, Prometheus, Nagios, gate, sweep, recipes).

Helpers here build Reports by hand, the way a run would, so the unit tests need no cluster.
"""
from __future__ import annotations

import threading
from typing import Iterable

from preflight.model import CommandOutput, NodeState, NodeStateKind, Report, Result, Status


def optical_metrics(rx: dict[tuple[int, int], float]) -> list[dict]:
    """details.metrics as hccn.optical writes them: optical_rx_power in mW, labels device, lane."""
    return [{"name": "optical_rx_power", "value": v, "unit": "mW", "labels": {"device": str(d), "lane": str(l)}}
            for (d, l), v in sorted(rx.items())]


def make_report(nodes: Iterable[str] = ("node01", "node02", "node03"), fail: dict[str, str] | None = None,
                unreachable: Iterable[str] = (), extra: Iterable[Result] = (), started: str = "2026-12-01T03:00:00Z",
                finished: str = "2026-12-01T03:00:07Z", metrics: dict[str, list[dict]] | None = None) -> Report:
    """nodes pass ssh.connect and hccn.link unless listed in `fail` ({node: check}) or `unreachable`."""
    fail, metrics, unreachable = fail or {}, metrics or {}, set(unreachable)
    states, results = [], []
    for i, n in enumerate(nodes):
        host = f"10.0.0.{i + 1}"
        if n in unreachable:
            states.append(NodeState(n, host, NodeStateKind.UNREACHABLE, "connection refused"))
            results += [Result("ssh.connect", n, Status.ERROR, "unreachable: connection refused", remediation="x"),
                        Result("hccn.link", n, Status.SKIP, "node unreachable"),
                        Result("hccn.optical", n, Status.SKIP, "node unreachable")]
            continue
        states.append(NodeState(n, host))
        results.append(Result("ssh.connect", n, Status.PASS, f"connected to {host}:22"))
        bad = fail.get(n) == "hccn.link"
        results.append(Result("hccn.link", n, Status.FAIL if bad else Status.PASS,
                              "device 5 link DOWN" if bad else "8 devices UP",
                              {"failed_devices": [5]} if bad else {}, "reseat the cable" if bad else None))
        results.append(Result("hccn.optical", n, Status.PASS, "8 devices: optical power within thresholds",
                              {"metrics": metrics.get(n, [])}))
    results += list(extra)
    return Report(started_at=started, finished_at=finished, inventory_path="inv.yaml", inventory_sha256="ab" * 32,
                  nodes=tuple(states), results=tuple(results), cluster="demo", tool_version="0.1.0")


class ScriptedSession:
    """A session whose probes answer from a function of the command text (no SSH). Its nodes are
    Ascend nodes: `backend: auto`'s detection probe finds npu-smi."""

    def __init__(self, answer):
        self.answer = answer

    def run(self, probes, cancel: threading.Event):
        from preflight.backend import DETECT

        return {p.key: CommandOutput("@@has npu-smi\n") if p.cmd == DETECT else self.answer(p.cmd) for p in probes}

    def close(self) -> None:
        pass


class ScriptedTransport:
    def __init__(self, answers: dict[str, object]):
        self.answers = answers  # node name -> callable(cmd) -> CommandOutput
        self.connects: list[str] = []

    def connect(self, node, cancel):
        self.connects.append(node.name)
        return ScriptedSession(self.answers.get(node.name, lambda cmd: CommandOutput("", "not found", 127)))

    def close(self) -> None:
        pass
