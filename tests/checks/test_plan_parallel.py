"""plan.parallel: job-section validation against the cluster and the model."""
from __future__ import annotations

import pytest

from preflight.checks import plan_parallel as check
from preflight.checkapi import ClusterContext, CommandOutput, ParseError, Status
from preflight.node import Node

GOOD_JOB = {"nnodes": 2, "nproc_per_node": 8, "tp": 4, "pp": 2, "cp": 1, "ep": 2, "num_layers": 32,
            "num_attention_heads": 32, "num_experts": 8, "micro_batch": 1, "global_batch": 64}


def _ctx(job, visible=None, nodes=2, unreachable=()):
    names = [f"node{i:02d}" for i in range(1, nodes + 1)]
    visible = visible or {}
    facts = {n: {check.ID: check.Facts(visible.get(n))} for n in names}
    return ClusterContext(nodes={n: Node(n, n) for n in names}, facts=facts, params={}, job=job,
                          unreachable=tuple(unreachable))


def _env(**env) -> CommandOutput:
    return CommandOutput(stdout="".join(f"{k}={v}\0" for k, v in env.items()))


def test_parse_reads_visible_devices_from_launch_env():
    assert check.parse({"launch_env": _env(PATH="/bin", ASCEND_RT_VISIBLE_DEVICES="0,1,2,3")}).visible_env == "0,1,2,3"
    assert check.parse({"launch_env": _env(PATH="/bin")}).visible_env is None


def test_parse_unreadable_env_is_parse_error():
    with pytest.raises(ParseError):
        check.parse({"launch_env": CommandOutput(rc=127, stderr="bash: not found")})


def test_probe_is_the_shared_launch_env_command():
    from preflight import launchenv
    node = Node("n", "h")
    assert check.probes(node, {}) == launchenv.probe(node)


def test_no_job_section_skips():
    [f] = check.evaluate(_ctx(None))
    assert f.status is Status.SKIP and "job:" in f.summary


def test_job_without_a_layout_skips_but_a_partial_one_fails():
    [f] = check.evaluate(_ctx({"load": "/ckpt/run1", "megatron_path": "/opt/Megatron-LM"}))
    assert f.status is Status.SKIP and "no parallel layout" in f.summary
    [f] = check.evaluate(_ctx({"load": "/ckpt/run1", "tp": 2}))
    assert f.status is Status.FAIL and "lacks nnodes" in f.summary


def test_good_job_passes_with_arithmetic():
    [f] = check.evaluate(_ctx(GOOD_JOB))
    assert f.status is Status.PASS, f.summary
    assert f.details["dp"] == 2 and "world 2 x 8 = 16" in f.summary


@pytest.mark.parametrize("change, rule, text", [
    ({"tp": 3}, "world_divisible", "world 16 % (tp 3 * pp 2 * cp 1 = 6) = 4"),
    ({"num_layers": 31}, "layers_divisible", "num_layers 31 % pp 2 = 1"),
    ({"num_attention_heads": 30}, "heads_divisible", "num_attention_heads 30 % tp 4 = 2"),
    ({"num_experts": 6, "ep": 4}, "experts_divisible", "num_experts 6 % ep 4 = 2"),
    ({"ep": 16, "num_experts": 16}, "expert_layout", "(tp 4 * cp 1 * dp 2 = 8) % (ep 16 * etp 1 = 16) = 8"),
    ({"global_batch": 63}, "batch_divisible", "global_batch 63 % (micro_batch 1 * dp 2 = 2) = 1"),
    ({"nnodes": 3}, "nnodes", "job.nnodes 3 vs 2 reachable nodes"),
])
def test_each_violation_fails_showing_arithmetic(change, rule, text):
    [f, *blamed] = check.evaluate(_ctx({**GOOD_JOB, **change}))
    assert f.status is Status.FAIL and f.node is None
    assert text in f.summary and f.remediation
    assert not blamed  # a layout error is nobody's node


def test_tp_across_nodes_warns():
    [f] = check.evaluate(_ctx({**GOOD_JOB, "tp": 16, "pp": 1, "ep": 1, "num_attention_heads": 32}))
    assert f.status is Status.WARN and "tp 16 > devices per node 8" in f.summary


def test_fewer_nodes_in_job_than_reachable_warns():
    [f] = check.evaluate(_ctx({**GOOD_JOB, "nnodes": 1, "pp": 1}, nodes=2))
    assert f.status is Status.WARN


def test_unreachable_node_named_in_nnodes_rule():
    [f] = check.evaluate(_ctx(GOOD_JOB, nodes=1, unreachable=("node02",)))
    assert f.status is Status.FAIL and "node02 unreachable" in f.summary


def test_node_with_too_few_visible_devices_is_blamed_alone():
    [f, blamed] = check.evaluate(_ctx(GOOD_JOB, visible={"node02": "0,1,2,3"}))
    assert f.status is Status.FAIL and blamed.node == "node02" and blamed.status is Status.FAIL
    assert "4 visible devices" in blamed.summary and blamed.details["visible_devices"] == [0, 1, 2, 3]


def test_visible_devices_with_a_space_counts_what_the_runtime_reads():
    [f, blamed] = check.evaluate(_ctx(GOOD_JOB, visible={"node01": "0, 1,2,3,4,5,6,7"}))
    assert blamed.node == "node01" and "1 visible devices" in blamed.summary and "stops reading" in blamed.summary


def test_more_visible_than_ranks_warns():
    [f, blamed] = check.evaluate(_ctx({**GOOD_JOB, "nproc_per_node": 4, "nnodes": 2, "tp": 4, "pp": 2,
                                       "ep": 1, "global_batch": 1}, visible={"node01": "0,1,2,3"}))
    assert f.status is Status.WARN and blamed.node == "node02" and blamed.status is Status.WARN


def test_non_integer_job_field_fails():
    [f] = check.evaluate(_ctx({**GOOD_JOB, "tp": "four"}))
    assert f.status is Status.FAIL and "job.tp" in f.summary


def test_missing_required_field_fails():
    job = dict(GOOD_JOB)
    del job["pp"]
    [f] = check.evaluate(_ctx(job))
    assert f.status is Status.FAIL and "pp" in f.summary
