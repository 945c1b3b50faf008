"""Spec validation: bad input is refused with one line naming the problem."""
from __future__ import annotations

import pytest

from preflight.sim import SimSpecError, load_spec, parse_spec


def refused(spec) -> str:
    with pytest.raises(SimSpecError) as exc:
        parse_spec(spec, "s.yaml") if isinstance(spec, dict) else load_spec(spec)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_defaults() -> None:
    sp = parse_spec({"nodes": 3})
    assert [n.name for n in sp.nodes] == ["node01", "node02", "node03"]
    assert sp.subnet is None and sp.device_subnet is None  # chosen free at bring-up
    sp = parse_spec({"nodes": 3, "network": {"subnet": "198.18.7.0/24"}})
    assert str(sp.subnet) == "198.18.7.0/24" and str(sp.device_subnet) == "198.19.0.0/24"


def test_list_of_nodes_with_overrides() -> None:
    sp = parse_spec({"nodes": ["a", {"name": "b", "layout": "A3", "cann_version": "8.2.RC1"}],
                     "defaults": {"layout": "910B"}})
    assert [(n.name, n.layout) for n in sp.nodes] == [("a", "910B"), ("b", "A3")]
    assert sp.nodes[1].cann_version == "8.2.RC1"


def test_unknown_keys_refused() -> None:
    assert "unknown key 'layuot'" in refused({"nodes": 2, "defaults": {"layuot": "910B"}})
    assert "unknown key 'nodez'" in refused({"nodez": 2})
    assert "unknown key 'gateway'" in refused({"network": {"gateway": "198.18.0.1"}})
    assert "nodes[1]" in refused({"nodes": ["a", {"name": "b", "colour": "red"}]})


def test_duplicate_names_refused() -> None:
    assert "duplicate node name 'a'" in refused({"nodes": ["a", "b", "a"]})


def test_too_many_nodes_for_subnet() -> None:
    msg = refused({"nodes": 6, "network": {"subnet": "198.18.0.0/29"}})
    assert "6 nodes do not fit subnet 198.18.0.0/29 (holds 5)" in msg


def test_non_test_ranges_refused() -> None:
    assert "outside the test range" in refused({"network": {"subnet": "10.0.0.0/24"}})
    assert "outside the test range" in refused({"network": {"device_subnet": "192.168.1.0/24"}})


def test_faults_validated() -> None:
    assert "unknown fault 'npu_on_fire'" in refused({"nodes": 1, "faults": [{"node": "node01", "fault": "npu_on_fire"}]})
    assert "no node named 'node09'" in refused({"nodes": 1, "faults": [{"node": "node09", "fault": "sshd_down"}]})
    assert "unknown parameter 'colour'" in refused(
        {"nodes": 1, "faults": [{"node": "node01", "fault": "link_down", "device": 1, "colour": 2}]})
    assert "needs device" in refused({"nodes": 1, "faults": [{"node": "node01", "fault": "link_down"}]})


def test_yaml_text_and_errors(tmp_path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text("nodes: 2\nfaults:\n  - {node: node02, fault: npu_health, chip: 3, status: Alarm}\n")
    assert load_spec(str(p)).faults[0]["chip"] == 3
    p.write_text("nodes: [a\n")
    assert "not valid YAML" in refused(str(p))
    p.write_text("- 1\n- 2\n")
    assert "must be a mapping" in refused(str(p))


def test_builtin_demo_spec_is_valid() -> None:
    from importlib import resources

    import yaml
    text = resources.files("preflight.sim").joinpath("templates", "demo.yaml").read_text()
    sp = parse_spec(yaml.safe_load(text), "demo.yaml")
    assert len(sp.nodes) == 4 and [f["fault"] for f in sp.faults] == ["npu_health", "link_down"]
