"""Cluster checks that plan more than one round (smoke.allreduce's re-pairing): plan() is asked
again with ctx.planned filled, up to its Policy's plan_rounds, and stops when it returns nothing."""
from __future__ import annotations

from dataclasses import replace

from preflight.checkapi import Finding, Policy, cmd
from preflight.model import Status
from preflight.runner import Options, Runner
from preflight.transport.local import LocalTransport
from tests.core.test_local_runner import checks, cluster_check, inventory, one  # noqa: F401 - fixtures


def two_round_check(rounds: int, calls: list):
    def plan(ctx):
        calls.append({n: sorted(o) for n, o in ctx.planned.items()})
        done = {name for outs in ctx.planned.values() for name in outs}
        if "r1" not in done:
            return {n: {"r1": cmd("echo one")} for n in ctx.nodes}
        if "r2" not in done:
            return {"n1": {"r2": cmd("echo two")}}
        return {}

    def evaluate(ctx):
        seen = {n: {k: o.stdout.strip() for k, o in sorted(outs.items())} for n, outs in sorted(ctx.planned.items())}
        return [Finding(Status.PASS, f"saw {seen}")]

    return replace(cluster_check("fake.rounds", evaluate, plan=plan), policy=Policy(plan_rounds=rounds))


def test_second_round_sees_the_first_and_both_outputs_reach_evaluate(checks, inventory):
    calls: list = []
    checks(two_round_check(3, calls))
    rep = Runner(inventory("n1", "n2"), LocalTransport(), Options()).run()
    assert calls == [{}, {"n1": ["r1"], "n2": ["r1"]}, {"n1": ["r1", "r2"], "n2": ["r1"]}]
    assert one(rep, "fake.rounds", None).summary == "saw {'n1': {'r1': 'one', 'r2': 'two'}, 'n2': {'r1': 'one'}}"


def test_plan_is_asked_once_by_default(checks, inventory):
    calls: list = []
    checks(two_round_check(1, calls))
    rep = Runner(inventory("n1"), LocalTransport(), Options()).run()
    assert len(calls) == 1
    assert "r2" not in one(rep, "fake.rounds", None).summary
