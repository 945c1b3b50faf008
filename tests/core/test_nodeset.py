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
    assert nodeset.count(pattern) == len(expected)  # the bound reads the text the way NodeSet expands it


# just over the bound, so that without it each expands (and the test fails) in a moment
@pytest.mark.parametrize("pattern", ["n[1-100001]", "n[1:100001]", "r[1-400]n[1-400]", "n[1-50000],m[1-50001]",
                                     "n[1-200002/2]"])
def test_a_pattern_standing_for_too_many_names_is_refused_before_it_is_expanded(pattern):
    with pytest.raises(nodeset.RangeError, match=r"stands for [\d,]+ names, more than the 100,000"):
        nodeset.expand(pattern)
    with pytest.raises(nodeset.RangeError, match="--limit"):
        nodeset.select(["n1"], pattern)


def test_a_huge_range_in_any_inventory_form_is_one_line_at_once(tmp_path):
    """`n[1-99999999]` once kept the loader building names until memory ran out (no bound)."""
    import subprocess

    (tmp_path / "a.yaml").write_text('nodes:\n  - {name: "n[1-99999999]", host: "10.0.0.1"}\n')
    (tmp_path / "hosts").write_text("[workers]\nn[1:99999999]\n")
    for name, line in (("a.yaml", 2), ("hosts", 2)):
        r = subprocess.run(["preflight", "inventory", "show", str(tmp_path / name)], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert r.stderr.startswith(f"preflight: {tmp_path / name}:{line}:") and "99,999,999 names" in r.stderr, r.stderr


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
