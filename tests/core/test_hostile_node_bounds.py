"""A hostile node cannot make a run endless (issue 29, F7).

The node side here is a real process in place of the driver (what a node whose shell or sshd
was replaced would run): one prints forever as fast as it can, one trickles a byte every 0.1 s
forever. The client side is preflight's own: Runner, Batcher, collect() over a real pipe, and the
honest nodes run the real driver through LocalTransport. Each run must end within its bound with
the honest nodes' results in the report; a slow honest node is stopped by the default deadline
when no --deadline was given.
"""
from __future__ import annotations

import threading
import time

import pytest

from preflight import registry, runner
from preflight.checkapi import Finding
from preflight.inventory import load
from preflight.model import NodeStateKind, Status
from preflight.runner import Options, Runner
from preflight.transport import stream
from preflight.transport.local import LocalSession, LocalTransport, PipeStream
from preflight.transport.stream import Batcher
from tests.core.test_local_runner import CONNECT, node_check

HOSTILE = {
    "flood": "yes 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'",
    "trickle": "while :; do printf x; sleep 0.1; done",
}


class HostileTransport(LocalTransport):
    """node `bad` runs `program` instead of the driver; every other node is honest."""

    def __init__(self, program: str):
        self.program = program

    def connect(self, node, cancel):
        session = LocalSession(node)
        if node.name == "bad":
            session.batcher = Batcher(lambda script: PipeStream(["/bin/sh", "-c", self.program]))
        return session


@pytest.fixture
def checks(monkeypatch):
    hello = node_check("t.hello", probes=lambda node, params: {"hello": runner_cmd("echo hello")},
                       parse=lambda outs: {k: o.error or o.stdout.strip() for k, o in outs.items()},
                       evaluate=lambda facts, params, node: [
                           Finding(Status.PASS if facts == {"hello": "hello"} else Status.ERROR, str(facts))])
    slow = node_check("t.slow", probes=lambda node, params: {
        "slow": runner_cmd("sleep 600", timeout=900)})
    found = {c.id: c for c in (CONNECT, hello, slow)}
    monkeypatch.setattr(registry, "discover", lambda: found)
    monkeypatch.setattr(runner, "discover", lambda: found)
    monkeypatch.setattr(stream, "IDLE_SLACK_S", 2.0)  # the bound under test, made short


def runner_cmd(text: str, timeout: float = 1):
    from preflight.checkapi import cmd
    return cmd(text, timeout=timeout)


def inventory(tmp_path, names):
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n" + "".join(f"  - {{name: {n}, host: localhost}}\n" for n in names))
    return load(inv, ssh_config=str(tmp_path / "no-ssh-config"))


def bounded_run(r: Runner, bound: float):
    """The run's report, or a failure when it is still running after `bound` seconds."""
    box: dict = {}
    th = threading.Thread(target=lambda: box.setdefault("report", r.run()), daemon=True)
    t0 = time.monotonic()
    th.start()
    th.join(bound)
    if th.is_alive():
        r.cancel.set()
        th.join(30)
        pytest.fail(f"the run was still going after {bound:.0f}s")
    return box["report"], time.monotonic() - t0


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_node_ends_within_the_bound_and_the_others_are_reported(tmp_path, checks, kind):
    inv = inventory(tmp_path, ["good1", "bad", "good2"])
    r = Runner(inv, HostileTransport(HOSTILE[kind]), Options(checks=["t.hello"], forks=3))
    report, took = bounded_run(r, 40)
    assert took < 20, f"{kind}: the run took {took:.1f}s"
    by = {(x.check, x.node): x for x in report.results}
    for good in ("good1", "good2"):
        assert by[("t.hello", good)].status is Status.PASS, by[("t.hello", good)]
    assert by[("t.hello", "bad")].status is Status.ERROR
    why = by[("t.hello", "bad")].summary
    assert ("more than" in why) if kind == "flood" else ("no probe finished" in why), why


def test_without_a_deadline_a_run_still_ends(tmp_path, checks, monkeypatch):
    """An honest node whose probe sleeps 600 s under a 900 s timeout: the default deadline ends it."""
    monkeypatch.setattr(runner, "DEFAULT_DEADLINE_S", 3.0)
    inv = inventory(tmp_path, ["slow1", "fast1"])
    r = Runner(inv, LocalTransport(), Options(checks=["t.slow", "t.hello"], forks=2, deadline=None))
    report, took = bounded_run(r, 30)
    assert took < 15
    assert any(n.state is NodeStateKind.TIMEOUT for n in report.nodes)


def test_the_per_node_budget_spans_rounds():
    """Bytes of every round count against the node's total: a budget spent ends the next round."""
    budget = stream.Budget(left=100)

    class Flood:
        def read(self):
            return b"x" * 64

    probes = [stream.ProbeSpec("k", "true", 5.0)]
    done, why = stream.collect(Flood(), "n" * 16, probes, threading.Event(), 1 << 20, budget)
    assert "more than 100 bytes" in why and budget.left < 0
