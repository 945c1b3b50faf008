"""storage.consistency: stat-only manifests, shared-filesystem detection, sampled hashes, blame.

The probes are shell text for sh/find/stat/dd/sha256sum; these tests run them for real on
temporary trees (one tree per simulated node) and feed their outputs to parse/plan/evaluate, plus
pure cases built from the same output grammar."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from preflight.checks import storage_consistency as check
from preflight.checkapi import ClusterContext, CommandOutput, ParseError, Status
from preflight.node import Node


def _run(cmd: str) -> CommandOutput:
    r = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True)
    return CommandOutput(r.stdout, r.stderr, r.returncode)


def _tree(root: Path, big: int = 3_000_000) -> Path:
    ds = root / "ds"
    (ds / "sub").mkdir(parents=True)
    (ds / "a.idx").write_bytes(b"aaaa")
    (ds / "big.bin").write_bytes(b"\0" * big)
    (ds / "sub" / "c.bin").write_text("x\n")
    (ds / "sub" / "c.idx").write_text("x\n")
    return ds


def _cluster(paths: list[Path], params=None) -> tuple[ClusterContext, dict]:
    params = {**check.DEFAULTS, **(params or {})}
    nodes = {f"node{i:02d}": Node(f"node{i:02d}", "h", paths={"data": [str(p)]}) for i, p in enumerate(paths, 1)}
    facts = {n: {check.ID: check.parse({k: _run(p.cmd) for k, p in check.probes(node, params).items()})}
             for n, node in nodes.items()}
    ctx = ClusterContext(nodes=nodes, facts=facts, params=params)
    plan = check.plan(ctx)
    for n, probes in plan.items():
        ctx.planned[n] = {k: _run(p.cmd) for k, p in probes.items()}  # type: ignore[index]
    return ctx, plan


@pytest.fixture
def three(tmp_path):
    return [_tree(tmp_path / f"n{i}") for i in (1, 2, 3)]


def test_identical_copies_pass(three):
    ctx, plan = _cluster(three)
    [f] = check.evaluate(ctx)
    assert f.status is Status.PASS and set(plan) == {"node01", "node02", "node03"}


def test_node_missing_idx_is_blamed_alone(three):
    (three[1] / "sub" / "c.idx").unlink()
    ctx, _ = _cluster(three)
    summary, blamed = check.evaluate(ctx)
    assert summary.status is Status.FAIL and blamed.node == "node02"
    assert "sub/c.idx missing" in blamed.summary and "rsync -a --checksum node01:" in blamed.remediation


def test_same_size_different_bin_is_found_by_sampled_hash(three):
    with open(three[2] / "big.bin", "r+b") as fh:  # one byte near the end: the tail block catches it
        fh.seek(2_999_990)
        fh.write(b"X")
    ctx, _ = _cluster(three)
    summary, blamed = check.evaluate(ctx)
    assert blamed.node == "node03" and "big.bin content differs at the same size" in blamed.summary


def _listed(cmd: str) -> str:
    """The `blocks<TAB>relpath` words the hash probe hands to printf."""
    return cmd.split("printf '%s\\n' ", 1)[1].split(" | while", 1)[0]


def test_size_difference_named_and_not_hashed(three):
    (three[0] / "a.idx").write_bytes(b"aaaaa")
    ctx, plan = _cluster(three)
    assert "a.idx" not in _listed(plan["node01"]["hash_0"].cmd)
    summary, blamed = check.evaluate(ctx)
    assert blamed.node == "node01" and "a.idx size 5 bytes, expected 4" in blamed.summary


def test_file_only_on_one_node_blames_that_node(three):
    (three[0] / "index_cache.npy").write_text("cache")  # Megatron's index cache built only on rank 0
    ctx, _ = _cluster(three)
    _, blamed = check.evaluate(ctx)
    assert blamed.node == "node01" and "index_cache.npy present only on the minority" in blamed.summary


def test_two_nodes_disagreeing_blames_nobody(tmp_path):
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    (b / "a.idx").write_bytes(b"bbbb")
    ctx, _ = _cluster([a, b])
    [summary] = check.evaluate(ctx)
    assert summary.status is Status.FAIL and summary.node is None and "no majority" in summary.summary


def test_shared_filesystem_is_said_and_hashed_once(tmp_path):
    ds = _tree(tmp_path / "shared")
    ctx, plan = _cluster([ds, ds, ds])
    assert list(plan) == ["node01"]
    [f] = check.evaluate(ctx)
    assert f.status is Status.PASS and "same filesystem" in f.summary and "hashed once" in f.summary


def test_missing_data_path_on_one_node(three, tmp_path):
    ctx, _ = _cluster([three[0], three[1], tmp_path / "absent"])
    _, blamed = check.evaluate(ctx)
    assert blamed.node == "node03" and "data path missing" in blamed.summary


def test_full_hash_on_request(three):
    ctx, plan = _cluster(three, {"full_hash": True})
    body = _listed(plan["node01"]["hash_0"].cmd)
    assert "all\tbig.bin" in body


def test_sample_blocks():
    p = check.DEFAULTS
    assert check.sample_blocks(100, p) is None
    blocks = check.sample_blocks(20 * (64 << 10) + 5, p)  # > small_file_bytes (1 MiB)
    assert blocks[0] == 0 and blocks[-1] == 20 and len(blocks) <= p["sample_blocks"]
    assert check.sample_blocks(10 << 30, {**p, "full_hash": True}) is None


def test_manifest_probe_is_bounded_and_quoted():
    probes = check.probes(Node("n", "h", paths={"data": ["/d a"]}), check.DEFAULTS)
    cmd = probes["manifest_0"].cmd
    assert "p='/d a'" in cmd and "-maxdepth 4" in cmd and "head -n 1001" in cmd and "python" not in cmd


def test_truncated_manifest_is_noted(three):
    ctx, _ = _cluster(three, {"max_files": 2})
    [f] = check.evaluate(ctx)
    assert "listing cut at max_files=2" in f.summary
    assert all(len(x[check.ID].manifests[0].files) == 2 for x in ctx.facts.values())


def test_manifest_timeout_is_parse_error():
    with pytest.raises(ParseError, match="timed out"):
        check.parse({"manifest_0": CommandOutput(rc=124, timed_out=True, duration_s=30)})


def test_bad_manifest_line_is_parse_error():
    with pytest.raises(ParseError):
        check.parse({"manifest_0": CommandOutput(stdout="path=/d\nlimit=1001\nfsid=1\nf\tbroken\n")})


def test_unreadable_hash_output_is_noted_not_passed(three):
    ctx, _ = _cluster(three)
    ctx.planned["node02"] = {"hash_0": CommandOutput(rc=2, stderr="sh: cd: can't cd to /x")}  # type: ignore[index]
    [f] = check.evaluate(ctx)
    assert "hashes from node02 unreadable" in f.summary


def test_no_data_paths_skips():
    ctx = ClusterContext(nodes={"n": Node("n", "h")}, facts={"n": {check.ID: check.Facts(())}}, params=check.DEFAULTS)
    [f] = check.evaluate(ctx)
    assert f.status is Status.SKIP
