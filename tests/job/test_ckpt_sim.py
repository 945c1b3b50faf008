"""ckpt.resume over real SSH on the 8-node simulated cluster: each node's checkpoint directory is its
own (a namespace-local bind mount at the same path), so every node is its own storage group, as on
local disks. The tree is split the way Megatron saves it with pp across nodes: node k holds
`mp_rank_TT_{k:03d}` for every tp rank."""
from __future__ import annotations

import shutil

import pytest

from preflight import inventory as inv_mod
from preflight import runner
from preflight.model import Status
from tests.simfixtures import requires_netns
from preflight.transport.ssh import SSHTransport
from tests.job.conftest import write_inventory
from tests.job.trees import megatron_tree

pytestmark = requires_netns
RUN = "run1"


@pytest.fixture(scope="module")
def trees(job_cluster):
    for k, n in enumerate(job_cluster.nodes):
        megatron_tree(n.dir / "ckpt" / RUN, 3000, tp=8, pp=8, ranks={(t, k, 0) for t in range(8)})
    yield job_cluster
    for n in job_cluster.nodes:
        shutil.rmtree(n.dir / "ckpt" / RUN, ignore_errors=True)


def _run(c, tmp_path, job):
    load = str(c.dir / "mnt" / "ckpt" / RUN)
    inv = inv_mod.load(write_inventory(c, tmp_path / "inv.yaml", {"load": load, **job}))
    report = runner.run(inv, SSHTransport(), runner.Options(checks=["ckpt.resume"]))
    return [r for r in report.results if r.check == "ckpt.resume"]


def test_split_tree_matches_the_job(trees, tmp_path):
    head = _run(trees, tmp_path, {"tp": 8, "pp": 8})[0]
    assert head.status is Status.PASS, head.summary
    assert head.details["saved_layout"] == {"tp": 8, "pp": 8, "ep": 1}
    assert len(head.details["storage_groups"]) == 8  # one per node: no shared storage here


def test_saved_tp8_against_job_tp4_fails(trees, tmp_path):
    head = _run(trees, tmp_path, {"tp": 4, "pp": 8})[0]
    assert head.status is Status.FAIL
    assert "saved with tp=8 pp=8, the job uses tp=4 pp=8: reshard first" in head.summary


def test_missing_tracker_on_one_node_fails_that_node(trees, tmp_path):
    tracker = trees.node("node03").dir / "ckpt" / RUN / "latest_checkpointed_iteration.txt"
    tracker.unlink()
    try:
        results = _run(trees, tmp_path, {"tp": 8, "pp": 8})
    finally:
        tracker.write_text("3000")
    assert results[0].status is Status.FAIL
    blamed = {r.node: r.summary for r in results if r.node}
    assert set(blamed) == {"node03"}
    assert "latest_checkpointed_iteration.txt missing" in blamed["node03"]


def test_other_iteration_on_one_node_is_blamed(trees, tmp_path):
    tracker = trees.node("node05").dir / "ckpt" / RUN / "latest_checkpointed_iteration.txt"
    tracker.write_text("2500")
    try:
        results = _run(trees, tmp_path, {"tp": 8, "pp": 8})
    finally:
        tracker.write_text("3000")
    blamed = {r.node: r.summary for r in results if r.node and r.status is Status.FAIL}
    assert "node05" in blamed and "says 2500, the other nodes 3000" in blamed["node05"]
