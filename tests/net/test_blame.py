"""docs/SPEC.md §3.1, the blame rule: majority values with outliers, and pair failures peeled worst first."""
from itertools import combinations

from preflight.net.blame import blame_pairs, consensus, pair_key


def test_consensus_all_agree():
    c = consensus({"n1": "a", "n2": "a"})
    assert c.agreed and c.majority == "a" and not c.outliers


def test_consensus_majority_names_outlier():
    c = consensus({"n1": "a", "n2": "a", "n3": "b"})
    assert not c.agreed
    assert c.majority == "a"
    assert c.outliers == {"n3": "b"}
    assert c.describe() == "a on n1,n2; b on n3"


def test_consensus_two_nodes_two_values_blames_nobody():
    c = consensus({"n1": "a", "n2": "b"})
    assert c.majority is None and not c.outliers and not c.agreed
    assert "a on n1" in c.describe() and "b on n2" in c.describe()


def test_consensus_even_split_blames_nobody():
    c = consensus({"n1": "a", "n2": "a", "n3": "b", "n4": "b"})
    assert c.majority is None and not c.outliers


def test_consensus_plurality_is_not_majority():
    c = consensus({"n1": "a", "n2": "a", "n3": "b", "n4": "c"})
    assert c.majority is None and not c.outliers


def test_describe_cuts_long_lists():
    c = consensus({f"n{i:02}": "a" for i in range(12)})
    assert c.describe(limit=3) == "a on n00,n01,n02,+9 more"


def all_pairs(nodes):
    return list(combinations(nodes, 2))


def test_no_failures_blames_nobody():
    b = blame_pairs(all_pairs("abcd"), [])
    assert b.blamed == set() and b.pairs == () and b.endpoints == ()


def test_isolated_node_blamed_alone():
    b = blame_pairs(all_pairs("abcd"), [("a", "b"), ("c", "a"), ("a", "d")])
    assert b.endpoints == ("a",) and b.pairs == ()
    assert b.failures_of("a") == [("a", "b"), ("a", "c"), ("a", "d")]


def test_single_bad_pair_names_both_ends():
    b = blame_pairs(all_pairs("abcd"), [("c", "b")])
    assert b.endpoints == () and b.pairs == (("b", "c"),)
    assert b.blamed == {"b", "c"}


def test_two_node_cluster_bad_pair_names_both():
    b = blame_pairs([("a", "b")], [("a", "b")])
    assert b.endpoints == () and b.blamed == {"a", "b"}


def test_two_dead_nodes_peeled_healthy_not_blamed():
    dead = {"a", "b"}
    failed = [p for p in all_pairs("abcd") if dead & set(p)]
    b = blame_pairs(all_pairs("abcd"), failed)
    assert set(b.endpoints) == dead and b.pairs == ()


def test_dead_node_plus_unrelated_bad_pair():
    nodes = "abcdef"
    failed = [p for p in all_pairs(nodes) if "a" in p] + [("c", "d")]
    b = blame_pairs(all_pairs(nodes), failed)
    assert b.endpoints == ("a",) and b.pairs == (("c", "d"),)


def test_device_endpoints():
    tested = [(("n1", 0), ("n2", 0)), (("n1", 0), ("n3", 0)), (("n2", 0), ("n3", 0))]
    b = blame_pairs(tested, tested[:2])
    assert b.endpoints == (("n1", 0),)


def test_pair_key_unordered():
    assert pair_key("b", "a") == pair_key("a", "b") == ("a", "b")
