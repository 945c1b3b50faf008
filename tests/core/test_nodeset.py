"""Node ranges (preflight.nodeset): expansion order, padding, Ansible forms, refusals, folding."""
from __future__ import annotations

import pytest

from preflight import nodeset


@pytest.mark.parametrize("pattern, expected", [
    ("node01", ["node01"]),
    ("node[01-03]", ["node01", "node02", "node03"]),
    ("node[1-3,7]", ["node1", "node2", "node3", "node7"]),
    ("node[01:03]", ["node01", "node02", "node03"]),                  # Ansible
    ("node[01:10:3]", ["node01", "node04", "node07", "node10"]),      # Ansible step
    ("node[a:c]", ["nodea", "nodeb", "nodec"]),                       # Ansible letters
    ("10.0.0.[1-3]", ["10.0.0.1", "10.0.0.2", "10.0.0.3"]),
    ("10.0.0.[8-11]", ["10.0.0.8", "10.0.0.9", "10.0.0.10", "10.0.0.11"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("node[098-101]", ["node098", "node099", "node100", "node101"]),  # padding kept across the decade
])
def test_expand(pattern, expected):
    assert nodeset.expand(pattern) == expected


def test_expand_keeps_padding_of_sixteen():
    names = nodeset.expand("node[01-16]")
    assert len(names) == 16 and names[0] == "node01" and names[-1] == "node16"
    assert all(len(n) == 6 for n in names)


@pytest.mark.parametrize("pattern", [
    "node[1:",        # unterminated
    "node[1-",        # unterminated
    "node1]",         # unbalanced
    "node[5:1]",      # reversed (Ansible)
    "node[5-1]",      # reversed
    "node[c:a]",      # reversed letters
    "node[01:100]",   # mismatched padding
    "node[01-100]",   # mismatched padding
    "node[x-y]",      # not a range
])
def test_bad_ranges_refused(pattern):
    with pytest.raises(nodeset.RangeError) as exc:
        nodeset.expand(pattern)
    assert pattern in str(exc.value) or "range" in str(exc.value)


@pytest.mark.parametrize("names, folded", [
    (["node01", "node02", "node03"], "node[01-03]"),
    (["node01", "node03"], "node[01,03]"),
    (["a"], "a"),
    ([], ""),
])
def test_fold(names, folded):
    assert nodeset.fold(names) == folded


def test_fold_expand_roundtrip():
    names = nodeset.expand("node[01-16]")
    assert nodeset.expand(nodeset.fold(names)) == names


def test_select():
    names = nodeset.expand("node[01-08]")
    assert nodeset.select(names, "node[03-05]") == ["node03", "node04", "node05"]
    assert nodeset.select(names, "node01,node08") == ["node01", "node08"]
    assert nodeset.select(names, "other[1-2]") == []
    with pytest.raises(nodeset.RangeError):
        nodeset.select(names, "node[3-")


@pytest.mark.parametrize("names", [["a&b"], ["n1", "x!y"], ['node<&"04>']])
def test_fold_never_loses_names(names):
    folded = nodeset.fold(names)
    assert all(n in folded for n in names), folded


def test_fold_answers_each_list_for_itself():
    """fold(): a list met again gets its own fold back, a list that differs in one name, in order
    or by a set operator gets its own, and an iterator is read once like a list."""
    from preflight import nodeset

    assert nodeset.fold(["n01", "n02", "n03"]) == "n[01-03]"
    assert nodeset.fold(["n01", "n02", "n04"]) == "n[01-02,04]"
    assert nodeset.fold(iter(["n01", "n02", "n03"])) == "n[01-03]"
    assert nodeset.fold(["a&b", "c"]) == "a&b,c"
    assert nodeset.fold(["n01", "n02", "n03"]) == "n[01-03]"
