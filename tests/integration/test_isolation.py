"""smoke.allreduce `mode: all` on an 8-node simulated cluster: real sshd nodes in network namespaces,
real gloo, faults on real traffic and on a node's own interpreter.

Each test injects one fault (a tc tbf throttle on a node's link, a test-only sitecustomize that
makes one node's all_reduce contribution wrong, a node whose python has no torch), runs only
smoke.allreduce through the real runner and SSH transport, and checks that the fault is found on
its node only, within ceil(log2 8) + 2 = 5 rounds, that a healthy cluster is never blamed, and that
no rank process or temp dir is left on any node (also after a cut by --deadline).
"""
from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest
import yaml

from preflight.inventory import load
from preflight.model import Status
from preflight.runner import Options, Runner
from tests.simfixtures import requires_netns
from preflight.smoke import isolate
from preflight.transport.hostkeys import KnownHosts
from preflight.transport.ssh import SSHTransport

pytestmark = [requires_netns,
              pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch not installed (pip install torch==2.13.0, CPU build)")]

SIM_SPEC = {"nodes": 8}
SIM_MODE = "netns"
N = 8
PARAMS = {"mode": "all", "size_mib": 2, "iters": 3, "warmup": 1, "rendezvous_timeout_s": 30,
          "run_timeout_s": 60, "startup_s": 40}


def run_all(cluster, tmp_path: Path, params=None, deadline=None):
    """Run smoke.allreduce alone; returns (cluster row, {node: row}, seconds, temp dirs before it)."""
    before = tmp_dirs()
    doc = yaml.safe_load(Path(cluster.inventory_path).read_text())
    doc["defaults"]["python"] = sys.executable
    doc.setdefault("checks", {})["smoke.allreduce"] = {**PARAMS, **(params or {})}
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(doc))
    KnownHosts.forget_all()
    t0 = time.monotonic()
    report = Runner(load(str(path)), SSHTransport(), Options(checks=["smoke.allreduce"], deadline=deadline)).run()
    rows = [r for r in report.results if r.check == "smoke.allreduce"]
    head = next(r for r in rows if r.node is None)
    took = time.monotonic() - t0
    print(f"\n{head.status.value}: {head.summary} [{took:.1f}s]")
    for g in head.details.get("groups", []):
        print(f"  round {g['round']}: {len(g['members'])} node(s) {g['outcome']} busbw {g.get('busbw_gbps')} "
              f"expected {g.get('expected_gbps')} {g.get('error', '')[:160]}")
    for r in rows:
        if r.node:
            print(f"  {r.node}: {r.status.value}: {r.summary}")
    return head, {r.node: r for r in rows if r.node is not None}, took, before


def leftovers(cluster, before: frozenset[str] = frozenset()) -> list[str]:
    """Rank processes in the nodes' own network namespaces, and temp dirs created since `before`.
    The nodes share the host's PID namespace and /tmp, so a plain pgrep or ls inside a node would
    also see other test runs' ranks on this machine."""
    found = [f"{n.name}: {pid} {args[:160]}" for n in cluster.nodes
             for pid, args in cluster.node_processes(n.name) if "allreduce_worker" in args]
    return found + sorted(tmp_dirs() - before)


def tmp_dirs() -> frozenset[str]:
    return frozenset(str(p) for p in Path("/tmp").glob(".pf-smoke.*"))


def wait_clean(cluster, before: frozenset[str], timeout: float = 15.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        left = leftovers(cluster, before)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.3)


@pytest.fixture
def fault(sim_cluster):
    """Inject one fault on one node; the node is reset afterwards."""
    done = []

    def inject(node: str, name: str, **params):
        sim_cluster.inject(node, name, **params)
        done.append(node)
    yield inject
    for node in done:
        sim_cluster.reset(node)


def test_healthy_cluster_passes_and_nobody_is_blamed(sim_cluster, tmp_path):
    head, rows, _, before = run_all(sim_cluster, tmp_path)
    assert head.status is Status.PASS and not rows, head.summary
    # the whole and one survey round; a slow blip on the loaded machine costs a round, never a blame
    assert head.details["rounds"] <= isolate.round_bound(N) and len(head.details["good"]) == N
    metrics = {m["name"]: m for m in head.details["metrics"]}
    assert metrics["busbw"]["labels"]["nodes"] == str(N)
    assert wait_clean(sim_cluster, before) == []


def test_wrong_sum_node_is_found_alone(sim_cluster, tmp_path, fault):
    bad = sim_cluster.nodes[5].name
    fault(bad, "collective_wrong_sum")
    head, rows, _, before = run_all(sim_cluster, tmp_path)
    assert head.status is Status.FAIL and list(rows) == [bad], head.summary
    assert rows[bad].details["why"] == "fail" and rows[bad].details["kind"] == "wrong_sum"
    assert "wrong all_reduce result" in rows[bad].summary and "proven-good" in rows[bad].summary
    assert head.details["rounds"] <= isolate.round_bound(N)
    assert len(head.details["good"]) == N - 1
    assert wait_clean(sim_cluster, before) == []


def test_node_without_torch_is_blamed_without_a_collective(sim_cluster, tmp_path, fault):
    bad = sim_cluster.nodes[2].name
    fault(bad, "no_torch")
    head, rows, _, before = run_all(sim_cluster, tmp_path)
    assert list(rows) == [bad], head.summary
    assert rows[bad].details["why"] == "local" and "No module named 'torch'" in rows[bad].summary
    assert head.details["rounds"] == 2
    assert wait_clean(sim_cluster, before) == []


def test_throttled_node_is_found_slow_with_figures(sim_cluster, tmp_path, fault):
    bad = sim_cluster.nodes[6].name
    fault(bad, "link_throttle", rate="50mbit")
    head, rows, _, before = run_all(sim_cluster, tmp_path)
    assert list(rows) == [bad], head.summary
    d = rows[bad].details
    assert d["why"] == "slow" and d["measured_gbps"] < 0.7 * d["expected_gbps"]
    assert head.details["rounds"] <= isolate.round_bound(N)
    assert wait_clean(sim_cluster, before) == []


def test_deadline_cut_leaves_no_rank_or_temp_dir(sim_cluster, tmp_path, fault):
    bad = sim_cluster.nodes[1].name
    fault(bad, "link_throttle", rate="1mbit")  # the whole collective crawls: the deadline cuts it
    head, _, took, before = run_all(sim_cluster, tmp_path, params={"size_mib": 16}, deadline=25)
    assert head.status is not Status.PASS
    assert took < 25 + 20
    assert wait_clean(sim_cluster, before, 20) == []
