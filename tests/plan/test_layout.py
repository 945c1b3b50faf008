"""preflight.parallel: each Megatron rule, the migration templates, lr rescaling, visible devices."""
from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from preflight.plan.layout import (MIGRATION_TEMPLATES, Layout, Model, check_layout, enumerate_layouts,
                                is_valid, rescaled_lr, template_for, visible_devices)
from preflight.cli.plan import plan


def _by_rule(results):
    return {r.rule: r for r in results}


@pytest.mark.parametrize("rule, world, layout, model, ok, text", [
    ("world_divisible", 16, Layout(tp=4, pp=2), Model(), True, "world 16 % (tp 4 * pp 2 * cp 1 = 8) = 0"),
    ("world_divisible", 16, Layout(tp=3, pp=1), Model(), False, "world 16 % (tp 3 * pp 1 * cp 1 = 3) = 1"),
    ("layers_divisible", 16, Layout(pp=4), Model(num_layers=32), True, "num_layers 32 % pp 4 = 0"),
    ("layers_divisible", 16, Layout(pp=4), Model(num_layers=30), False, "num_layers 30 % pp 4 = 2"),
    ("heads_divisible", 16, Layout(tp=8), Model(heads=32), True, "num_attention_heads 32 % tp 8 = 0"),
    ("heads_divisible", 16, Layout(tp=8), Model(heads=12), False, "num_attention_heads 12 % tp 8 = 4"),
    ("experts_divisible", 16, Layout(ep=4), Model(experts=8), True, "num_experts 8 % ep 4 = 0"),
    ("experts_divisible", 16, Layout(ep=3), Model(experts=8), False, "num_experts 8 % ep 3 = 2"),
    # dp = 16/(8*2) = 1, so tp*cp*dp = 8; ep*etp = 16 does not divide it
    ("expert_layout", 16, Layout(tp=8, pp=2, ep=16), Model(experts=16), False,
     "(tp 8 * cp 1 * dp 1 = 8) % (ep 16 * etp 1 = 16) = 8"),
    ("expert_layout", 16, Layout(tp=4, pp=2, ep=2, etp=2), Model(experts=8), True,
     "(tp 4 * cp 1 * dp 2 = 8) % (ep 2 * etp 2 = 4) = 0"),
    ("batch_divisible", 16, Layout(tp=8), Model(micro_batch=2, global_batch=8), True,
     "global_batch 8 % (micro_batch 2 * dp 2 = 4) = 0"),
    ("batch_divisible", 16, Layout(tp=8), Model(micro_batch=3, global_batch=8), False,
     "global_batch 8 % (micro_batch 3 * dp 2 = 6) = 2"),
])
def test_each_rule_shows_its_arithmetic(rule, world, layout, model, ok, text):
    r = _by_rule(check_layout(world, 8, layout, model))[rule]
    assert (r.ok, r.arithmetic) == (ok, text)


def test_tp_across_nodes_warns_but_is_not_invalid():
    results = check_layout(16, 8, Layout(tp=16), Model(heads=32))
    r = _by_rule(results)["tp_within_node"]
    assert (r.ok, r.status) == (False, "warn")
    assert is_valid(results) and not is_valid(results, allow_warn=False)


def test_indivisible_world_stops_before_dp_rules():
    results = check_layout(12, 8, Layout(tp=8), Model(num_layers=32, heads=32))
    assert [r.rule for r in results] == ["world_divisible"]


def test_nonpositive_size_fails():
    assert not check_layout(8, 8, Layout(tp=0))[0].ok


def test_ep_without_experts_warns():
    r = _by_rule(check_layout(8, 8, Layout(ep=2)))["experts_divisible"]
    assert r.status == "warn"


def test_enumeration_obeys_every_rule():
    model = Model(num_layers=30, heads=12, experts=6)
    layouts = list(enumerate_layouts(2, 8, model))
    assert layouts
    for lay in layouts:
        assert 30 % lay.pp == 0 and 12 % lay.tp == 0 and 6 % lay.ep == 0 and lay.tp <= 8
        assert (lay.tp * lay.dp(16)) % lay.ep == 0
    assert Layout(tp=8, pp=1) not in layouts  # 12 % 8 != 0


@pytest.mark.parametrize("nodes, tp, pp, ep", [(1, 8, 1, 1), (2, 8, 2, 1), (4, 4, 4, 1), (4, 8, 4, 8), (8, 8, 8, 4)])
def test_migration_templates_are_marked_when_valid(nodes, tp, pp, ep):
    layouts = list(enumerate_layouts(nodes, 8, Model(experts=8)))
    lay = Layout(tp=tp, pp=pp, ep=ep)
    assert lay in layouts and template_for(nodes, nodes * 8, lay) is not None


def test_template_ep_outside_expert_layout_is_not_offered():
    # 4 nodes, tp 4 pp 4: dp 2, tp*cp*dp = 8; the template allows EP 1-8 but ep 3 breaks the rules
    layouts = list(enumerate_layouts(4, 8, Model(experts=24)))
    assert Layout(tp=4, pp=4, ep=3) not in layouts
    assert template_for(4, 32, Layout(tp=4, pp=4, ep=3)) is not None  # it is a template row, yet invalid


def test_templates_match_migration_table():
    assert [(t.nodes, t.cards, t.pp) for t in MIGRATION_TEMPLATES] == [(1, 8, 1), (2, 16, 2), (4, 32, 4), (8, 64, 8)]


def test_lr_rescaling():
    assert math.isclose(rescaled_lr(1e-4, 8, 2), 2e-4)
    assert math.isclose(rescaled_lr(3e-4, 1, 4), 1.5e-4)
    with pytest.raises(ValueError):
        rescaled_lr(1e-4, 0, 1)


@pytest.mark.parametrize("value, devices, ids, ignored", [
    (None, 8, tuple(range(8)), ""),
    ("", 4, (0, 1, 2, 3), ""),
    ("0,1,2,3", 8, (0, 1, 2, 3), ""),
    ("1, 2,3", 8, (1,), " 2,3"),      # docs/ENV.md §A.10: parsing stops at the first invalid character
    ("1,3,8", 8, (1, 3), "8"),        # docs/ENV.md §A.10: an id >= device count stops it
    ("3,1", 8, (3,), "1"),            # ascending only
])
def test_visible_devices(value, devices, ids, ignored):
    v = visible_devices(value, devices)
    assert (v.ids, v.ignored) == (ids, ignored)


def test_plan_command_lists_templates_and_lr():
    r = CliRunner().invoke(plan, ["--nodes", "2", "--devices-per-node", "8", "--layers", "32", "--heads", "32",
                                  "--base-lr", "1e-4", "--base-dp", "1", "--templates-only"])
    assert r.exit_code == 0, r.output
    assert "migration template" in r.output and "1 valid layouts" in r.output
    assert "0.0001" in r.output  # tp 8 pp 2 -> dp 1 -> lr unchanged


def test_plan_command_refuses_zero_nodes():
    r = CliRunner().invoke(plan, ["--nodes", "0", "--devices-per-node", "8"])
    assert r.exit_code == 2
