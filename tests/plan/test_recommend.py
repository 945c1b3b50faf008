"""`preflight plan` recommends: the best few first, templates marked, launch arguments for both stacks."""
from __future__ import annotations

import json

from click.testing import CliRunner

from preflight.cli.plan import plan
from preflight.plan.layout import Layout, Model, check_layout, enumerate_layouts, is_valid
from preflight.plan.recommend import launch, rank


def _plan(*args):
    r = CliRunner().invoke(plan, list(args))
    assert r.exit_code == 0, r.output
    return r.output


def test_templates_first_then_whole_node_stages():
    ranked = rank(4, 8, Model(num_layers=32, heads=32))
    first = [(r.layout.tp, r.layout.pp, r.dp) for r in ranked[:3]]
    assert first == [(8, 4, 1), (4, 4, 2), (8, 2, 2)]  # the two 4-node templates, then tp 8 over 2 stages
    assert [r.template for r in ranked[:3]] == [True, True, False]
    assert all(not r.template for r in ranked[2:])
    assert ranked[-1].layout.tp == 1  # tp 1 across the most stages that do not own whole nodes comes last


def test_every_ranked_layout_is_valid_and_none_is_lost():
    model = Model(num_layers=24, heads=16, experts=8)
    ranked = rank(2, 8, model)
    assert {r.layout for r in ranked} == set(enumerate_layouts(2, 8, model))
    assert all(is_valid(check_layout(16, 8, r.layout, model), allow_warn=False) for r in ranked)


def test_ep_above_four_comes_after_smaller_ep():
    ranked = [r for r in rank(2, 8, Model(experts=16)) if (r.layout.tp, r.layout.pp) == (8, 2)]
    eps = [r.layout.ep for r in ranked]
    assert eps == sorted(eps) and eps[0] == 1


def test_best_three_by_default_all_with_flag():
    short = _plan("--nodes", "4", "--devices-per-node", "8")
    assert "18 valid layouts (tp within a node; cp <= 1); the best 3 shown (--all lists every one)." in short
    full = json.loads(_plan("--nodes", "4", "--devices-per-node", "8", "--all", "--format", "json"))
    assert full["valid"] == 18 and len(full["layouts"]) == 18 and full["layouts"][0]["template"]


def test_launch_arguments_for_both_stacks_with_scaled_lr():
    out = _plan("--nodes", "2", "--devices-per-node", "8", "--layers", "32", "--heads", "32", "--micro-batch", "1",
                "--global-batch", "64", "--base-lr", "1e-4", "--base-dp", "1", "--pick", "3", "--format", "json")
    doc = json.loads(out)
    chosen = doc["layouts"][2]
    ms = doc["launch"]["mindspeed-llm"]["args"]
    assert f"--tensor-model-parallel-size {chosen['tp']}" in ms and f"--pipeline-model-parallel-size {chosen['pp']}" in ms
    assert "--global-batch-size 64" in ms and "--micro-batch-size 1" in ms
    lr = 1e-4 * (chosen["dp"] / 1) ** 0.5
    assert f"--lr {lr:.3g}" in ms and f"--lr {lr:.3g}" in doc["launch"]["megatron-lm"]["args"]
    assert "--transformer-impl local" in ms and "--transformer-impl local" not in doc["launch"]["megatron-lm"]["args"]
    assert doc["launch"]["mindspeed-llm"]["env"]["NNODES"] == "2"


def test_table_shows_launch_lines():
    out = _plan("--nodes", "8", "--devices-per-node", "8", "--heads", "32")
    assert "Launch #1: tp=8 pp=8 cp=1 ep=1 dp=1" in out
    assert "MindSpeed-LLM on Ascend:" in out and "Megatron-LM on NVIDIA:" in out
    assert "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 8" in out


def test_pick_beyond_the_list_is_a_usage_error():
    r = CliRunner().invoke(plan, ["--nodes", "1", "--devices-per-node", "2", "--pick", "9"])
    assert r.exit_code == 2 and "there are" in r.output


def test_launch_keeps_the_layout():
    st = launch(Layout(4, 2, 1, 2), Model(experts=8), 2, 8)
    assert "--expert-model-parallel-size 2" in st["megatron-lm"]["args"] and "--num-experts 8" in st["megatron-lm"]["args"]
