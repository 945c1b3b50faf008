"""Node ranges: expand `node[01-16]`, `[1-3,7]`, Ansible's `[01:32]` and `[a:c]`; fold names for display.

ClusterShell's NodeSet does the HPC syntax (padding, lists, steps, Slurm hostlists); this module
only translates Ansible's colon ranges to it and keeps expansion order for zipping name with host.
"""
from __future__ import annotations

import functools
import re
import string

_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_ANSIBLE_NUM = re.compile(r"^(\d+):(\d+)(?::(\d+))?$")
_ANSIBLE_ALPHA = re.compile(r"^([a-z]):([a-z])$|^([A-Z]):([A-Z])$")


class RangeError(ValueError):
    pass


# A bound on what one pattern may stand for (every input has a bound: `n[1-99999999]` would
# otherwise fill memory before any node is dialled): far above any cluster preflight serves (its
# benchmarks go to 20,000 nodes), far below what exhausts a control host.
MAX_NAMES = 100_000
_ITEM = re.compile(r"^(\d+)(?:[-:](\d+))?(?:[/:](\d+))?$|^([a-zA-Z]):([a-zA-Z])$")


def _top_level(pattern: str) -> list[str]:
    """`a[1-2],b[3,5]` -> ['a[1-2]', 'b[3,5]']: the commas outside brackets."""
    parts, depth, cur = [], 0, []
    for c in pattern:
        depth += (c == "[") - (c == "]")
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    return parts + ["".join(cur)]


def count(pattern: str) -> int:
    """How many names a pattern (ClusterShell's or Ansible's range forms) stands for, read from its
    text with nothing expanded; an item not understood here counts 1 (the expander then names it)."""
    total = 0
    for part in _top_level(pattern):
        product = 1
        for inner in _BRACKET.findall(part):
            n = 0
            for item in inner.split(","):
                m = _ITEM.match(item.strip())
                if m and m.group(2):
                    lo, hi, step = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)
                    n += max(0, (hi - lo) // max(step, 1) + 1)
                elif m and m.group(4):
                    n += max(0, string.ascii_letters.find(m.group(5)) - string.ascii_letters.find(m.group(4)) + 1)
                else:
                    n += 1
            product *= max(n, 1)
        total += product
    return total


def bounded(pattern: str, what: str = "range") -> None:
    """Raises RangeError when `pattern` stands for more than MAX_NAMES names."""
    n = count(pattern)
    if n > MAX_NAMES:
        raise RangeError(f"{what} {pattern!r} stands for {n:,} names, more than the {MAX_NAMES:,} preflight reads")


def _translate(pattern: str) -> list[str]:
    """Turn Ansible-only forms into ClusterShell ones; alphabetic ranges expand here."""
    if pattern.count("[") != pattern.count("]"):
        raise RangeError(f"unbalanced brackets in {pattern!r}")
    m = _BRACKET.search(pattern)
    if not m:
        return [pattern]
    inner = m.group(1)
    alpha = _ANSIBLE_ALPHA.match(inner)
    if alpha:
        lo, hi = (alpha.group(1), alpha.group(2)) if alpha.group(1) else (alpha.group(3), alpha.group(4))
        letters = string.ascii_letters
        if letters.index(hi) < letters.index(lo):
            raise RangeError(f"reversed range [{inner}] in {pattern!r}")
        out = []
        for c in letters[letters.index(lo): letters.index(hi) + 1]:
            out.extend(_translate(pattern[: m.start()] + c + pattern[m.end():]))
        return out
    num = _ANSIBLE_NUM.match(inner)
    if num:
        lo, hi, step = num.group(1), num.group(2), num.group(3)
        if int(hi) < int(lo):
            raise RangeError(f"reversed range [{inner}] in {pattern!r}")
        inner = f"{lo}-{hi}" + (f"/{step}" if step else "")
    rest = _translate(pattern[m.end():])
    return [pattern[: m.start()] + f"[{inner}]" + r for r in rest]


def expand(pattern: str) -> list[str]:
    """All names a pattern stands for, in order. Raises RangeError with the reason."""
    bounded(pattern)
    names: list[str] = []
    for part in _translate(pattern.strip()):
        if "[" not in part:
            names.append(part)
            continue
        # here, not at import: a plain name (gate --local's one node) needs no ClusterShell (~0.02 s)
        from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetParseError
        try:
            names.extend(NodeSet(part, resolver=RESOLVER_NOGROUP))
        except NodeSetParseError as exc:
            raise RangeError(f"bad range {pattern!r}: {exc}") from None
    return names


def fold(names) -> str:
    """`node01,node02,node03` -> `node[01-03]` (also the Slurm hostlist form)."""
    return _fold(tuple(names))


# fold() is pure and a report folds the same node lists again and again (a check that passed on
# every node names all of them; the table, the checklist and the HTML matrix each fold them), while
# ClusterShell parses every name anew (about 0.1 ms a name): results kept by the exact name tuple.
@functools.lru_cache(maxsize=1024)
def _fold(names: tuple[str, ...]) -> str:
    if not names:
        return ""
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetParseError
    try:
        folded = NodeSet.fromlist(list(names), resolver=RESOLVER_NOGROUP)
    except NodeSetParseError:
        folded = None
    if folded is None or set(folded) != set(names):  # `& ! ^ ,` are set operators to ClusterShell
        return ",".join(dict.fromkeys(names))
    return str(folded)


def select(names: list[str], limit: str) -> list[str]:
    """Names of `names` inside the node set `limit` (Slurm hostlist or comma list)."""
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetParseError
    try:
        bounded(limit, "--limit")
        wanted = set(NodeSet(limit, resolver=RESOLVER_NOGROUP))
    except NodeSetParseError as exc:
        raise RangeError(f"bad --limit {limit!r}: {exc}") from None
    return [n for n in names if n in wanted]
