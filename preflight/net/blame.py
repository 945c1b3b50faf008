"""docs/SPEC.md §3.1: the blame rule for cluster checks, as two pure functions any cluster check can reuse.

SPEC: "Blame goes to what the failures have in common: a node (or device) that fails with most of its
peers is blamed alone; an isolated bad pair names both ends; a disagreement without a majority (two
nodes, two values) blames no node and the summary lists the values." Unreachable nodes are never
blamed: callers pass only reachable nodes' values / tested pairs.

Values that must agree (env.consistency, sw.consistency, storage.consistency)::

    from preflight.net.blame import consensus
    c = consensus({"node01": "8.0.RC3", "node02": "8.0.RC3", "node03": "8.1.RC1"})
    c.agreed            # False: more than one value
    c.majority          # "8.0.RC3" (held by more than half of the nodes), or None
    c.outliers          # {"node03": "8.1.RC1"}: blame these; empty when there is no majority
    c.groups            # {"8.0.RC3": ["node01", "node02"], "8.1.RC1": ["node03"]}, biggest first
    c.describe()        # "8.0.RC3 on node01,node02; 8.1.RC1 on node03" for the summary line

Pairwise tests (net.ping_mesh, hccn.ping_mesh; endpoints may be nodes or (node, device) tuples)::

    from preflight.net.blame import blame_pairs
    b = blame_pairs(tested=[("a", "b"), ("a", "c"), ("b", "c")], failed=[("a", "b"), ("a", "c")])
    b.endpoints         # ("a",): fails with most of its peers, blamed alone
    b.pairs             # (): bad pairs not explained by a blamed endpoint (both ends named)
    b.blamed            # {"a"}: every endpoint to name (blamed endpoints plus both ends of b.pairs)
    b.failures_of("a")  # [("a", "b"), ("a", "c")]: the failed pairs that touch "a"

Which pairs to test on a big cluster: spread_pairs(names, max_pairs), every endpoint testing and
tested by the same number of peers.

Pairs are unordered (("a", "b") is ("b", "a")); merge directions before calling when a test is
directed (a pair fails when either direction fails).
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Generic, Hashable, Iterable, Mapping, TypeVar

V = TypeVar("V", bound=Hashable)
E = TypeVar("E", bound=Hashable)

__all__ = ["Consensus", "PairBlame", "blame_pairs", "consensus", "pair_key"]


@dataclass(frozen=True)
class Consensus(Generic[V]):
    """How the nodes' values of one setting group. `majority` is None when no value has more than half."""

    values: Mapping[str, V]
    groups: Mapping[V, list[str]]
    majority: V | None
    outliers: Mapping[str, V] = field(default_factory=dict)

    @property
    def agreed(self) -> bool:
        return len(self.groups) <= 1

    def describe(self, limit: int = 8) -> str:
        """`value on node,node; value on node` biggest group first; long node lists are cut."""
        parts = []
        for value, nodes in self.groups.items():
            shown = ",".join(nodes[:limit]) + (f",+{len(nodes) - limit} more" if len(nodes) > limit else "")
            parts.append(f"{value} on {shown}")
        return "; ".join(parts)


def consensus(values: Mapping[str, V]) -> Consensus[V]:
    """Group `node -> value`; the majority value is the one held by more than half of the nodes.

    A strict majority, not a plurality: with node01=a, node02=b (or a/a/b/b) nobody is blamed,
    because nothing says which side is right.
    """
    groups: dict[V, list[str]] = defaultdict(list)
    for node in sorted(values):
        groups[values[node]].append(node)
    ordered = dict(sorted(groups.items(), key=lambda kv: (-len(kv[1]), str(kv[0]))))
    top = next(iter(ordered), None)
    majority = top if top is not None and len(ordered[top]) * 2 > len(values) else None
    if len(ordered) <= 1 or majority is None:
        return Consensus(dict(values), ordered, majority if len(ordered) <= 1 else None, {})
    outliers = {n: v for n, v in values.items() if v != majority}
    return Consensus(dict(values), ordered, majority, dict(sorted(outliers.items())))


def pair_key(a: E, b: E) -> tuple[E, E]:
    """The unordered form of a pair, stable across calls (sorted by repr for mixed types)."""
    return (a, b) if repr(a) <= repr(b) else (b, a)


@dataclass(frozen=True)
class PairBlame(Generic[E]):
    endpoints: tuple[E, ...]  # blamed alone, in the order they were found (worst first)
    pairs: tuple[tuple[E, E], ...]  # remaining bad pairs: name both ends
    failed: frozenset[tuple[E, E]]  # every failed pair, unordered

    @property
    def blamed(self) -> set[E]:
        out = set(self.endpoints)
        for a, b in self.pairs:
            out.update((a, b))
        return out

    def failures_of(self, endpoint: E) -> list[tuple[E, E]]:
        return sorted((p for p in self.failed if endpoint in p), key=repr)


def blame_pairs(
    tested: Iterable[tuple[E, E]],
    failed: Iterable[tuple[E, E]],
    most: float = 0.5,
    min_failures: int = 2,
) -> PairBlame[E]:
    """Peel off, worst first, every endpoint that fails with more than `most` of its remaining peers
    (and with at least `min_failures` of them, so a lone bad pair between two nodes names both ends
    instead of picking one); the failed pairs left over are isolated bad pairs.

    Peeling matters: with two dead nodes out of four, each healthy node fails with 2 of its 3 peers;
    once the first dead node's pairs are removed, the healthy ones no longer look bad.
    """
    tested_set = {pair_key(a, b) for a, b in tested if a != b}
    failed_set = {pair_key(a, b) for a, b in failed if a != b}
    tested_set |= failed_set
    remaining_tested, remaining_failed = set(tested_set), set(failed_set)
    blamed: list[E] = []
    while remaining_failed:
        bad = Counter(e for p in remaining_failed for e in p)
        total = Counter(e for p in remaining_tested for e in p)
        worst = min(bad, key=lambda e: (-bad[e] / total[e], -bad[e], repr(e)))
        if bad[worst] < min_failures or bad[worst] / total[worst] <= most:
            break
        blamed.append(worst)
        remaining_tested = {p for p in remaining_tested if worst not in p}
        remaining_failed = {p for p in remaining_failed if worst not in p}
    pairs = tuple(sorted(remaining_failed, key=repr))
    return PairBlame(tuple(blamed), pairs, frozenset(failed_set))


def spread_pairs(names: list[str], max_pairs: int) -> list[tuple[str, str]]:
    """Ordered (src, dst) pairs to test: all of them, or k evenly spread ring offsets when sampling
    (`max_pairs`), so each endpoint tests k peers and is tested by k peers (what blame_pairs needs)."""
    n = len(names)
    if n < 2:
        return []
    k = n - 1 if not max_pairs or max_pairs >= n * (n - 1) else max(1, max_pairs // n)
    offsets = sorted({1 + math.floor(j * (n - 1) / k) for j in range(k)})
    return [(names[i], names[(i + off) % n]) for i in range(n) for off in offsets]
