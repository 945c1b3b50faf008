"""A transport that says how many workers help it (replay: one) gets no more threads than that;
one that says nothing gets --forks of them. The report is the same either way."""
from __future__ import annotations

import threading

from preflight.model import CommandOutput
from preflight.runner import Options, Runner
from preflight.transport.replay import ReplayTransport
from tests.core.test_local_runner import checks, inventory, node_check, one  # noqa: F401 - fixtures


class Session:
    def run(self, probes, cancel):
        return {p.key: CommandOutput(stdout="hi\n") for p in probes}

    def close(self) -> None:
        pass


class CountingTransport:
    def __init__(self, workers=None):
        if workers is not None:
            self.workers = workers
        self.threads: set[int] = set()
        self.gate = threading.Barrier(2, timeout=2)

    def connect(self, node, cancel):
        self.threads.add(threading.get_ident())
        if getattr(self, "workers", None) is None:
            try:
                self.gate.wait()  # two nodes meet: only possible with two workers
            except threading.BrokenBarrierError:
                pass
        return Session()

    def close(self) -> None:
        pass


def test_workers_bound_the_pool_and_the_report_is_unchanged(checks, inventory):
    checks(node_check("fake.hello"))
    inv = inventory("n1", "n2", "n3", "n4")
    one_worker = CountingTransport(workers=1)
    rep1 = Runner(inv, one_worker, Options(forks=8)).run()
    assert len(one_worker.threads) == 1
    many = CountingTransport()
    rep2 = Runner(inv, many, Options(forks=8)).run()
    assert len(many.threads) >= 2
    for n in ("n1", "n2", "n3", "n4"):
        assert one(rep1, "fake.hello", n).summary == one(rep2, "fake.hello", n).summary


def test_replay_asks_for_one_worker():
    assert ReplayTransport("unused").workers == 1
