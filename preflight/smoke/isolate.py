"""Find the bad nodes among N by adaptive group testing: which collectives to run next, and the verdict.

Pure: no I/O, no clock. smoke.allreduce `mode: all` replays this module over the outcomes it has
(`next_round(nodes, history)`), runs the groups it returns in parallel (each its own rendezvous),
and asks again until it returns none; `verdict(nodes, history)` then names the culprits. The whole
state is the history, so the check needs no memory between the runner's plan() calls.

The model (docs/ISOLATION.md has the walk-through and the round bounds):
- A test is one collective over a group of nodes. Its outcome is `unknown` when a rank's result
  never came back (the control host lost its connection to the node: that proves nothing about
  the node, so the test is left out and its groups run again), else `fail` (error, hang, wrong sum),
  `slow` (busbw below the median of the round's passing tests by more than `slow_fraction`, or
  below the absolute `floor`), or `ok`. Relative, because a loaded fabric (or a loaded test
  machine) slows every group alike: only a group slower than its own round's peers is slow.
- Members of an `ok` test that had peers in its round (a median to be measured against) are
  proven good. Members of any passing test, slow or alone in its round, are proven correct, not
  fast. The residual of a failed test is its members not proven correct; of a slow test, its
  members not proven good. Pads beside a slow suspect are good nodes; beside a failing one,
  correct nodes suffice.
- A node is a culprit when bad tests whose residual is that node alone reach the confirmation
  count: 1 for fail (a wrong sum or a hang beside proven-good nodes is conclusive), 3 for slow
  (bandwidth is noisy: a healthy node under a loaded machine's ±35% noise lands 30% under the
  median about one test in fifteen; three independent times, about one in 3,000). The tests on
  its path count once its companions are cleared (the survey group, the halves, the pair with a
  good node), so a real slow node reaches three with at most one round of its own. A node whose own rank could not start (no torch, a taken port)
  is a culprit at once, without a collective (`Result.local`).
- Next round: each unexplained bad test's residual is a positive pool (holds a bad node): it is
  split into `fanout` parts, a one-node part padded with a proven-good node. Suspects whose bad
  test is already explained by a culprit are an unknown pool, tested whole. Slow suspects get
  control groups of good nodes beside them, so the round's median means something. A whole
  selection that passed is surveyed once (split into up to four groups) when slowness is judged,
  because one collective has no peers to be slow against.
One bad node among N is named in at most ceil(log2 N) + 2 rounds (the survey or the whole round,
one halving per round, the slow confirmation), k bad in O(k log N): pools are halved in parallel.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import median
from typing import Iterable, Sequence

OK, SLOW, FAIL, UNKNOWN = "ok", "slow", "fail", "unknown"


@dataclass(frozen=True)
class Policy:
    """The knobs, with the defaults smoke.allreduce documents."""

    slow_fraction: float | None = 0.3  # slow: busbw < (1 - this) * the round's median; None: never relative
    floor: float | None = None  # slow: busbw under this absolute figure (min_busbw_gbps)
    fanout: int = 2  # parts a positive pool is split into per round
    confirm_slow: int = 3  # slow tests in which it is the only node not proven good, before it is named
    controls: int = 2  # control groups of good nodes in a round that tests slow suspects
    survey_groups: int = 4  # groups of the survey round after a whole selection that passed
    max_rounds: int = 16


@dataclass(frozen=True)
class Result:
    """One group's collective: what the check read from its ranks."""

    members: tuple[str, ...]
    failed: bool
    busbw: float | None = None
    kind: str = ""  # wrong_sum | hang | error | a rank's diagnosis kind
    local: tuple[str, ...] = ()  # nodes whose own rank could not start: blamed without a collective
    control: bool = False  # a control group of proven-good nodes (a baseline for the median)
    unknown: bool = False  # no outcome came back (the connection to a node was lost): proves nothing


Round = Sequence[Result]


@dataclass(frozen=True)
class Graded:
    result: Result
    round: int
    outcome: str
    expected: float | None  # the round's median busbw (what a healthy group of this round did)


@dataclass
class Culprit:
    node: str
    why: str  # fail | slow | local
    kind: str  # the failing kind (wrong_sum, hang, no_torch, ...) or "slow"
    evidence: list[Graded] = field(default_factory=list)  # every bad test it was in, in order
    partners: tuple[str, ...] = ()  # the proven-good nodes of its confirming tests (the other ends)

    @property
    def confirming(self) -> list[Graded]:
        return [g for g in self.evidence if g.outcome != OK and len(g.result.members) > 1
                and set(g.result.members) - {self.node} <= set(self.partners)]


@dataclass
class Verdict:
    culprits: dict[str, Culprit]
    good: list[str]  # proven good: in a passing, not slow, test
    unresolved: list[str]  # suspects the rounds could not clear or convict
    unexplained: list[Graded]  # failed tests with no culprit among their members (intermittent, or an interaction)
    rounds: int
    unjudged: list[str] = field(default_factory=list)  # of `unresolved`, those no evidence points at (only
    # in groups a culprit explains, or whose outcomes were lost): not judged, rather than suspect


def grade(results: Round, policy: Policy) -> tuple[list[str], float | None]:
    """(outcome per result, the round's median busbw of passing tests)."""
    bws = [r.busbw for r in results if not r.failed and not r.unknown and r.busbw is not None]
    med = median(bws) if len(bws) >= 2 else None
    out = []
    for r in results:
        if r.unknown:
            out.append(UNKNOWN)
        elif r.failed:
            out.append(FAIL)
        elif r.busbw is not None and policy.floor is not None and r.busbw < policy.floor:
            out.append(SLOW)
        elif (r.busbw is not None and med is not None and policy.slow_fraction is not None
              and r.busbw < (1.0 - policy.slow_fraction) * med):
            out.append(SLOW)
        else:
            out.append(OK)
    return out, med


def graded(history: Sequence[Round], policy: Policy) -> list[Graded]:
    out = []
    for i, rnd in enumerate(history, 1):
        outcomes, med = grade(rnd, policy)
        out += [Graded(r, i, o, med) for r, o in zip(rnd, outcomes)]
    return out


@dataclass
class _State:
    good: set[str]  # fast and correct: in an ok test with peers to be measured against
    correct: set[str]  # right sum: in any passing test
    culprits: dict[str, Culprit]
    bad: list[Graded]

    def residual(self, g: Graded) -> frozenset[str]:
        return frozenset(g.result.members) - (self.correct if g.outcome == FAIL else self.good)


def _state(history: Sequence[Round], policy: Policy) -> _State:
    tests = graded(history, policy)
    good = {n for g in tests if g.outcome == OK and (g.expected is not None or policy.slow_fraction is None)
            for n in g.result.members}
    correct = good | {n for g in tests if g.outcome in (OK, SLOW) for n in g.result.members}
    bad = [g for g in tests if g.outcome in (SLOW, FAIL)]
    st = _State(good, correct, {}, bad)
    for g in bad:  # a rank that could not start convicts its node without a collective
        for n in g.result.local:
            st.culprits.setdefault(n, Culprit(n, "local", g.result.kind or "error"))
    alone: dict[str, list[Graded]] = {}
    for g in bad:
        res = st.residual(g)
        if len(res) == 1 and not g.result.local:
            alone.setdefault(next(iter(res)), []).append(g)
    for n, gs in alone.items():
        if n in st.culprits:
            continue
        fails = [g for g in gs if g.outcome == FAIL]
        slows = [g for g in gs if g.outcome == SLOW]
        if fails:
            st.culprits[n] = Culprit(n, "fail", fails[0].result.kind or "error")
            partners = fails
        elif len(slows) >= policy.confirm_slow:
            st.culprits[n] = Culprit(n, "slow", "slow")
            partners = slows
        else:
            continue
        st.culprits[n].partners = tuple(dict.fromkeys(m for g in partners for m in g.result.members if m != n))
    for c in st.culprits.values():
        c.evidence = [g for g in bad if c.node in g.result.members]
    return st


def _suspects(st: _State) -> tuple[list[frozenset[str]], set[str]]:
    """(positive pools: disjoint residuals of unexplained bad tests, smallest first; unknown: the
    other suspects, whose bad tests a culprit already explains)."""
    residuals = [st.residual(g) for g in st.bad]
    suspects = {n for r in residuals for n in r} - set(st.culprits)
    unexplained = sorted({r for r in residuals if r and not (r & set(st.culprits))}, key=lambda r: (len(r), sorted(r)))
    pools, taken = [], set()
    for r in unexplained:
        if r & taken:
            continue
        pools.append(r)
        taken |= r
    return pools, suspects - taken


def _split(nodes: list[str], parts: int) -> list[list[str]]:
    parts = max(1, min(parts, len(nodes)))
    size, extra = divmod(len(nodes), parts)
    out, i = [], 0
    for k in range(parts):
        n = size + (1 if k < extra else 0)
        out.append(nodes[i:i + n])
        i += n
    return out


def next_round(nodes: Sequence[str], history: Sequence[Round], policy: Policy = Policy()) -> list[tuple[tuple[str, ...], bool]]:
    """The groups of the next round, as (members, is_control); [] when the isolation is over.
    Round 1 is the whole selection. Members keep the selection's order (rank 0 first)."""
    order = {n: i for i, n in enumerate(nodes)}
    if not history:
        return [(tuple(nodes), False)] if len(nodes) >= 2 else []
    if len(history) >= policy.max_rounds:
        return []
    st = _state(history, policy)
    pools, unknown = _suspects(st)
    untested = [n for n in nodes if n not in st.correct and n not in st.culprits
                and not any(n in p for p in pools) and n not in unknown]
    if len(untested) == len(nodes):  # not one outcome yet (round 1 lost): the whole again
        return [(tuple(nodes), False)]
    unknown |= set(untested)
    tried = {frozenset(g.result.members) for g in st.bad}
    suspects = {n for p in pools for n in p} | unknown
    free = [n for n in nodes if n in st.correct and n not in suspects and n not in st.culprits]
    slow_suspect = {n for g in st.bad if g.outcome == SLOW for n in st.residual(g)}
    paired_with: dict[str, set[str]] = {}
    for g in st.bad:
        for n in g.result.members:
            paired_with.setdefault(n, set()).update(g.result.members)

    def pad(x: str) -> str | None:
        """A free node proven good (beside a slow suspect) or correct (beside a failing one, good
        ones kept for the slow), one not yet tested beside x where possible: a confirmation is
        against a different node."""
        cands = [n for n in free if n in st.good]
        if x not in slow_suspect:
            cands += [n for n in free if n not in st.good]
        if not cands:
            return None
        pick = next((g for g in cands if g not in paired_with.get(x, ())), cands[0])
        free.remove(pick)
        return pick

    groups: list[list[str]] = []
    lone: list[str] = []
    parts_of = [part for pool in pools for part in _split(sorted(pool, key=order.get), policy.fanout)]
    if unknown:  # likely good: tested whole, or split as a survey when speed is judged too
        rest = sorted(unknown, key=order.get)
        parts_of += _survey(rest, 1, policy) or [rest]
    for part in parts_of:
        if len(part) >= 2:
            groups.append(part)
        else:
            lone.append(part[0])
    for x in sorted(lone, key=lambda n: n not in slow_suspect):  # slow suspects need the good pads
        g = pad(x)
        if g is not None:
            groups.append(sorted([x, g], key=order.get))
            lone = [y for y in lone if y != x]
    while len(lone) >= 2:  # no good node to pad with: two suspects together, a pair not tried yet
        x = lone.pop(0)
        y = next((y for y in lone if frozenset((x, y)) not in tried), None)
        if y is None:
            continue
        lone.remove(y)
        groups.append(sorted([x, y], key=order.get))
    groups = [g for g in groups if frozenset(g) not in tried]  # a failed set again teaches nothing
    groups += _survey([n for n in free if n not in st.good], len(groups), policy)
    free = [n for n in free if n in st.good]
    if not groups:
        return []
    out = [(tuple(g), False) for g in groups]
    if (slow_suspect or len(groups) == 1) and policy.controls > 0 and policy.slow_fraction is not None:
        size = max(2, sorted(len(g) for g in groups)[len(groups) // 2])
        for _ in range(policy.controls):
            if len(free) < size:
                break
            out.append((tuple(free[:size]), True))
            del free[:size]
    return out


def _survey(unmeasured: list[str], others: int, policy: Policy) -> list[list[str]]:
    """Groups that measure nodes proven correct but never measured against peers (the whole
    selection that passed alone; a half that passed beside a failing one). Idle nodes anyway, so
    it runs beside the isolation's own groups."""
    if policy.slow_fraction is None or len(unmeasured) < 2:
        return []
    parts = _split(unmeasured, max(1, min(policy.survey_groups, len(unmeasured) // 2)))
    return parts if len(parts) + others >= 2 else []


def verdict(nodes: Sequence[str], history: Sequence[Round], policy: Policy = Policy()) -> Verdict:
    st = _state(history, policy)
    pools, unknown = _suspects(st)
    unresolved = {n for p in pools for n in p} | unknown
    untested = {n for n in nodes if n not in st.correct and n not in st.culprits and n not in unresolved}
    unresolved |= untested
    explained = set(st.culprits)
    # A failed test whose members were all proven later is unexplained (intermittent, or between
    # nodes the halving separated). A slow one is noise that did not reproduce: not a finding.
    unexplained = [g for g in st.bad if g.outcome == FAIL and not (set(g.result.members) & explained)
                   and not st.residual(g)]
    order = {n: i for i, n in enumerate(nodes)}
    return Verdict(culprits=dict(sorted(st.culprits.items(), key=lambda kv: order.get(kv[0], 0))),
                   good=[n for n in nodes if n in st.correct and n not in unresolved and n not in st.culprits],
                   unresolved=sorted(unresolved - set(st.culprits), key=order.get),
                   unexplained=unexplained, rounds=len(history),
                   unjudged=sorted((unknown | untested) - set(st.culprits), key=order.get))


def round_bound(n: int) -> int:
    """The promise for one bad node among n: ceil(log2 n) + 2 rounds."""
    return math.ceil(math.log2(max(n, 2))) + 2


def members_of(groups: Iterable[tuple[tuple[str, ...], bool]]) -> list[tuple[str, ...]]:
    return [m for m, _ in groups]
