"""ckpt.resume on real checkpoint trees: the probe commands run in a local shell on trees built with
Megatron's own names (tests/job/trees.py); the per-node cases (one node without the tracker) run on
the simulated cluster in tests/job/test_job_sim.py."""
from __future__ import annotations

import subprocess

import pytest

from preflight.checkapi import ClusterContext, CommandOutput, Status
from preflight.checks import ckpt_resume as check
from preflight.megatron import ckpt
from preflight.node import Node
from tests.job.trees import megatron_tree


def _sh(cmd: str) -> CommandOutput:
    p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=30)
    return CommandOutput(p.stdout, p.stderr, p.returncode)


def _run(job, nodes=("node01", "node02"), params=None):
    """The runner's two plan rounds, every node on this host's filesystem (one storage group)."""
    ctx = ClusterContext(nodes={n: Node(n, n) for n in nodes}, facts={n: {} for n in nodes},
                         params={**check.DEFAULTS, **(params or {})}, planned={}, job=job)
    for _ in range(check.POLICY.plan_rounds):
        for node, probes in check.plan(ctx).items():
            ctx.planned.setdefault(node, {}).update({k: _sh(p.cmd) for k, p in probes.items()})
    return check.evaluate(ctx)


def test_matching_torch_layout_passes_and_is_listed_once(tmp_path):
    megatron_tree(tmp_path / "ck", 2000, tp=4, pp=2)
    head = _run({"load": str(tmp_path / "ck"), "tp": 4, "pp": 2})[0]
    assert head.status is Status.PASS, head.summary
    assert head.details["saved_layout"] == {"tp": 4, "pp": 2, "ep": 1}
    assert head.details["iteration"] == "2000" and "shared by 2 nodes, listed once" in head.summary


def test_saved_tp8_against_job_tp4_fails_reshard_first(tmp_path):
    megatron_tree(tmp_path / "ck", 100, tp=8)
    head = _run({"load": str(tmp_path / "ck"), "tp": 4, "pp": 1})[0]
    assert head.status is Status.FAIL
    assert "saved with tp=8 pp=1, the job uses tp=4 pp=1: reshard first" in head.summary
    assert "convert.py" in head.remediation


def test_tp8_pp4_vs_tp4_pp4(tmp_path):
    megatron_tree(tmp_path / "ck", 100, tp=8, pp=4)
    head = _run({"load": str(tmp_path / "ck"), "tp": 4, "pp": 4})[0]
    assert "saved with tp=8 pp=4, the job uses tp=4 pp=4: reshard first" in head.summary


def test_expert_ranks_three_part_names(tmp_path):
    megatron_tree(tmp_path / "ck", 10, tp=2, pp=2, ep=4)
    assert _run({"load": str(tmp_path / "ck"), "tp": 2, "pp": 2, "ep": 4})[0].status is Status.PASS
    head = _run({"load": str(tmp_path / "ck"), "tp": 2, "pp": 2, "ep": 2})[0]
    assert head.status is Status.FAIL and "ep=4" in head.summary


def test_two_part_name_is_ep_when_the_job_has_no_pp(tmp_path):
    megatron_tree(tmp_path / "ck", 10, tp=2, ep=4)  # mp_rank_01_003: tp 1, ep 3 (no pp part)
    assert _run({"load": str(tmp_path / "ck"), "tp": 2, "ep": 4})[0].status is Status.PASS


def test_missing_rank_directory_fails_as_incomplete(tmp_path):
    ranks = {(t, p, 0) for t in range(2) for p in range(2)} - {(1, 1, 0)}
    megatron_tree(tmp_path / "ck", 10, tp=2, pp=2, ranks=ranks)
    head = _run({"load": str(tmp_path / "ck"), "tp": 2, "pp": 2})[0]
    assert head.status is Status.FAIL and "mp_rank_01_001 missing" in head.summary


def test_distributed_format_reads_metadata_json(tmp_path):
    megatron_tree(tmp_path / "ck", 500, tp=8, fmt="torch_dist")
    head = _run({"load": str(tmp_path / "ck"), "tp": 4})[0]
    assert head.status is Status.PASS, head.summary
    assert head.details["format"] == "torch_dist" and "dist_checkpointing" in head.details["note"]


def test_load_path_that_is_a_file_is_one_clear_line(tmp_path):
    f = tmp_path / "ckpt.pt"
    f.write_bytes(b"x")
    findings = _run({"load": str(f)})
    assert findings[0].status is Status.FAIL
    mine = [x for x in findings if x.node == "node01"]
    assert mine[0].summary == f"node01: {f} is a file, not a directory"
    assert "\n" not in mine[0].summary


def test_tracker_naming_a_missing_iteration_fails(tmp_path):
    megatron_tree(tmp_path / "ck", 100, tp=1, tracker="200")
    findings = _run({"load": str(tmp_path / "ck")})
    assert findings[0].status is Status.FAIL
    assert any("names iter_0000200, which is not in" in f.summary for f in findings if f.node)


def test_release_and_garbage_tracker(tmp_path):
    assert ckpt.iteration_dir("release") == "release" and ckpt.iteration_dir(" 42\n") == "iter_0000042"
    megatron_tree(tmp_path / "ck", 1, tracker="latest")
    findings = _run({"load": str(tmp_path / "ck")})
    assert any("not an iteration number" in f.summary for f in findings if f.node)


def test_save_without_room_fails(tmp_path):
    megatron_tree(tmp_path / "ck", 1, tp=2, file_bytes=1 << 20)
    job = {"load": str(tmp_path / "ck"), "save": str(tmp_path / "new" / "deeper"), "tp": 2}
    assert _run(job)[0].status is Status.PASS
    head = _run(job, params={"headroom": 1e9})[0]  # 2 MiB x 1e9 cannot fit anywhere
    assert head.status is Status.FAIL and "one more checkpoint needs" in head.summary


def test_no_load_skips():
    [f] = check.evaluate(ClusterContext(nodes={}, facts={}, params={}, job={"tp": 2}))
    assert f.status is Status.SKIP


@pytest.mark.parametrize("names, pp, ep, want", [
    ({(0,), (1,)}, 1, 1, (2, 1, 1)),
    ({(0, 0), (0, 1), (0, 2)}, 3, 1, (1, 3, 1)),
    ({(0, 0), (0, 1)}, 1, 2, (1, 1, 2)),
    ({(1, 3, 1), (0, 0, 0)}, 4, 2, (2, 4, 2)),
])
def test_saved_layout_from_names(names, pp, ep, want):
    lay = ckpt.saved_layout(frozenset(names), pp, ep)
    assert (lay.tp, lay.pp, lay.ep) == want
