"""The group-testing algorithm of smoke.allreduce `mode: all` (preflight/smoke/isolate.py), on simulated outcomes.

The algorithm is the thing under test: a small simulator plays the fleet (which nodes fail, which
are slow, how noisy the bandwidth is) and answers each round the algorithm asks for, exactly as the
check reads real ranks. Exhaustive where the promise is: every position of one bad node for
N = 2..64 within ceil(log2 N) + 2 rounds; random k-bad sets; slow nodes; a healthy fleet with noisy
bandwidths never blamed.
"""
from __future__ import annotations

import math
import random

import pytest

from preflight.smoke import isolate as I


def names(n: int) -> list[str]:
    return [f"n{i:02d}" for i in range(n)]


class Fleet:
    """Outcomes of group collectives: a group fails if it holds a failing node (or a broken pair),
    is slow by the slowest member's factor, and every busbw carries multiplicative noise."""

    def __init__(self, fail=(), slow=None, local=(), pairs=(), noise=0.0, seed=0, base=10.0, kind="wrong_sum"):
        self.fail, self.local, self.kind = set(fail), set(local), kind
        self.slow = dict(slow or {})
        self.pairs = [frozenset(p) for p in pairs]
        self.noise, self.rng, self.base = noise, random.Random(seed), base

    def run(self, groups) -> list[I.Result]:
        out = []
        for members, control in groups:
            ms = set(members)
            local = tuple(m for m in members if m in self.local)
            failed = bool(local) or bool(ms & self.fail) or any(p <= ms for p in self.pairs)
            factor = min([self.slow.get(m, 1.0) for m in members])
            bw = None if failed else self.base * factor * (1 + self.rng.uniform(-self.noise, self.noise))
            out.append(I.Result(tuple(members), failed, bw, "no_torch" if local else (self.kind if failed else ""),
                                local, control))
        return out


def isolate(nodes, fleet, policy=I.Policy()):
    history = []
    while True:
        groups = I.next_round(nodes, history, policy)
        if not groups:
            break
        for members, _ in groups:  # a node is in at most one group per round, and groups are collectives
            assert len(members) >= 2
        flat = [m for members, _ in groups for m in members]
        assert len(flat) == len(set(flat)), groups
        history.append(fleet.run(groups))
        assert len(history) <= policy.max_rounds
    return I.verdict(nodes, history, policy), history


# ---------------------------------------------------------------- one bad node, every position

@pytest.mark.parametrize("n", range(2, 65))
def test_one_failing_node_every_position_within_the_bound(n):
    nodes = names(n)
    worst = 0
    for bad in nodes:
        v, history = isolate(nodes, Fleet(fail={bad}))
        if n == 2:  # no third node to tell the two ends apart: both named, nothing proven
            assert v.culprits == {} and v.unresolved == nodes
            continue
        assert list(v.culprits) == [bad], (bad, v)
        assert v.culprits[bad].why == "fail" and v.culprits[bad].kind == "wrong_sum"
        assert v.unresolved == [] and set(v.good) == set(nodes) - {bad}
        assert len(history) <= I.round_bound(n), (bad, len(history))
        partners = v.culprits[bad].partners
        assert partners and set(partners) <= set(v.good)  # confirmed against proven-good nodes
        worst = max(worst, len(history))
    assert worst <= math.ceil(math.log2(n)) + 2


@pytest.mark.parametrize("n", [3, 4, 5, 7, 8, 13, 16, 31, 32, 33, 64])
def test_one_slow_node_every_position_within_the_bound(n):
    nodes = names(n)
    for bad in nodes:
        v, history = isolate(nodes, Fleet(slow={bad: 0.1}, noise=0.1, seed=n))
        if n < 4:  # no survey below four nodes: one collective has no peers to be slow against
            assert v.culprits == {} and len(history) == 1
            continue
        assert list(v.culprits) == [bad], (bad, [(g.round, g.result.members, g.outcome) for g in v.unexplained])
        c = v.culprits[bad]
        assert c.why == "slow" and len(c.confirming) >= 3
        assert all(g.expected and g.result.busbw < 0.7 * g.expected for g in c.confirming)
        assert len(history) <= I.round_bound(n), (bad, len(history))


def test_node_that_cannot_start_is_blamed_without_isolation_rounds():
    nodes = names(16)
    v, history = isolate(nodes, Fleet(local={"n05"}))
    assert list(v.culprits) == ["n05"] and v.culprits["n05"].why == "local"
    assert v.culprits["n05"].kind == "no_torch"
    assert len(history) == 2  # the whole, then the rest as one group to clear them
    assert v.unresolved == [] and len(v.good) == 15


# ---------------------------------------------------------------- k bad nodes

@pytest.mark.parametrize("seed", range(60))
def test_random_k_bad_sets_are_found_in_o_k_log_n(seed):
    rng = random.Random(seed)
    n = rng.choice([8, 16, 24, 32, 48, 64])
    k = rng.randint(1, 4)
    nodes = names(n)
    bad = set(rng.sample(nodes, k))
    v, history = isolate(nodes, Fleet(fail=bad), I.Policy(max_rounds=40))
    assert set(v.culprits) == bad, (sorted(bad), v)
    assert v.unresolved == [] and set(v.good) == set(nodes) - bad
    assert len(history) <= 2 + k * (math.ceil(math.log2(n)) + 1), (k, n, len(history))


def test_mixed_fail_and_slow():
    nodes = names(32)
    v, _ = isolate(nodes, Fleet(fail={"n03"}, slow={"n20": 0.2}, noise=0.05), I.Policy(max_rounds=30))
    assert v.culprits["n03"].why == "fail"
    # n20's slowness hides behind the failing whole until the fail is isolated: the halving rounds
    # then grade it against its peers like any group
    assert v.culprits.get("n20") is not None and v.culprits["n20"].why == "slow"


def test_slow_group_of_two_nodes_both_named():
    nodes = names(16)
    v, _ = isolate(nodes, Fleet(slow={"n04": 0.1, "n11": 0.15}, noise=0.1, seed=3), I.Policy(max_rounds=30))
    assert set(v.culprits) == {"n04", "n11"}


# ---------------------------------------------------------------- never blame the healthy

@pytest.mark.parametrize("seed", range(200))
def test_healthy_noisy_fleet_is_never_blamed(seed):
    rng = random.Random(seed)
    n = rng.choice([4, 8, 16, 32, 64])
    v, history = isolate(names(n), Fleet(noise=0.35, seed=seed))
    assert v.culprits == {}, (seed, n, [(g.round, g.result.members, g.result.busbw, g.expected)
                                         for c in v.culprits.values() for g in c.evidence])


def test_loaded_machine_noise_costs_at_most_a_few_extra_rounds():
    rounds = []
    for seed in range(100):
        v, history = isolate(names(16), Fleet(noise=0.35, seed=seed))
        assert v.culprits == {}
        rounds.append(len(history))
    assert max(rounds) <= I.round_bound(16) + 2
    assert sorted(rounds)[len(rounds) // 2] == 2  # the whole and the survey


def test_intermittent_failure_is_reported_unexplained_not_blamed():
    class Once(Fleet):
        def run(self, groups):
            out = super().run(groups)
            if not hasattr(self, "done"):
                self.done = True
                return [I.Result(r.members, True, None, "hang") for r in out]
            return out
    v, history = isolate(names(8), Once())
    assert v.culprits == {} and len(v.unexplained) == 1 and v.unexplained[0].round == 1
    assert len(history) == 2


def test_a_bad_pair_is_unexplained_when_each_half_passes():
    """A link that breaks only between n01 and n06: the halves pass, the whole fails."""
    v, _ = isolate(names(8), Fleet(pairs=[("n01", "n06")]))
    assert v.culprits == {} and v.unexplained and v.unexplained[0].result.members == tuple(names(8))


def test_grade_is_relative_to_the_round_and_honours_the_floor():
    rs = [I.Result(("a", "b"), False, 10.0), I.Result(("c", "d"), False, 9.0), I.Result(("e", "f"), False, 6.0),
          I.Result(("g", "h"), True)]
    assert I.grade(rs, I.Policy())[0] == ["ok", "ok", "slow", "fail"]  # 6 < 0.7 * median 9
    assert I.grade(rs, I.Policy(slow_fraction=0.5))[0] == ["ok", "ok", "ok", "fail"]
    assert I.grade(rs, I.Policy(slow_fraction=None, floor=9.5))[0] == ["ok", "slow", "slow", "fail"]
    assert I.grade(rs[:1], I.Policy()) == (["ok"], None)  # alone: nothing to be slow against


def test_whole_selection_that_passes_is_surveyed_once_then_done():
    nodes = names(16)
    v, history = isolate(nodes, Fleet())
    assert len(history) == 2 and [len(r) for r in history] == [1, 4]
    assert v.good == nodes
    v, history = isolate(nodes, Fleet(), I.Policy(slow_fraction=None))
    assert len(history) == 1


def test_a_slow_group_that_does_not_reproduce_is_noise_not_a_finding():
    class Blip(Fleet):
        def run(self, groups):
            out = super().run(groups)
            if len(groups) > 1 and not hasattr(self, "done"):  # the survey: one group at half speed once
                self.done = True
                out[1] = I.Result(out[1].members, False, out[1].busbw * 0.4)
            return out
    v, history = isolate(names(8), Blip())
    assert v.culprits == {} and v.unexplained == [] and v.unresolved == []
    assert len(history) == 3


def test_lost_outcomes_prove_nothing_and_are_run_again():
    """A group whose result never came back (the control host lost a node's connection) neither
    clears nor convicts anyone: the whole runs again, then the isolation goes on as if it had not
    happened, naming the bad node and nobody else."""
    class Lossy(Fleet):
        def run(self, groups):
            out = super().run(groups)
            self.calls = getattr(self, "calls", 0) + 1
            if self.calls in (1, 3):  # round 1, and one group of round 3
                out[0] = I.Result(out[0].members, True, kind="connection_lost", unknown=True)
            return out
    v, history = isolate(names(16), Lossy(fail={"n09"}))
    assert list(v.culprits) == ["n09"] and v.unresolved == [] and len(v.good) == 15
    assert history[1][0].members == tuple(names(16))  # round 1 lost: the whole again
