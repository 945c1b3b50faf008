"""A typo in the inventory's `checks:` must not silently leave a default threshold in force."""
from __future__ import annotations

import pytest

from preflight.inventory import load
from preflight.registry import SelectionError
from preflight.engine.selection import params
from preflight.runner import Runner
from preflight.transport.local import LocalTransport


def inv(tmp_path, text: str):
    p = tmp_path / "inv.yaml"
    p.write_text(text + "nodes:\n  - {name: a, host: localhost}\n")
    return load(p, ssh_config=str(tmp_path / "none"))


def test_unknown_parameter_is_refused_with_a_suggestion(tmp_path):
    with pytest.raises(SelectionError, match=r"storage.disk: unknown parameter 'min_free_gb' \(did you mean 'min_free_gib'\?\)"):
        Runner(inv(tmp_path, "checks:\n  storage.disk: {min_free_gb: 100}\n"), LocalTransport())


def test_unknown_check_id_is_refused(tmp_path):
    with pytest.raises(SelectionError, match=r"unknown check 'storage.dsk' \(did you mean 'storage.disk'\?\)"):
        Runner(inv(tmp_path, "checks:\n  storage.dsk: {min_free_gib: 1}\n"), LocalTransport())


def test_known_parameters_pass(tmp_path):
    Runner(inv(tmp_path, "checks:\n  storage.disk: {min_free_gib: 1}\n  npu.idle: {max_hbm_used_pct: 5}\n"), LocalTransport())


# A cluster check reads its parameters once for the whole cluster: one node's own value would be
# accepted and ignored, so it is refused, naming the file, the node's line and the place to set it.

def _nodes_inv(tmp_path, text: str):
    p = tmp_path / "inv.yaml"
    p.write_text(text)
    return load(p, ssh_config=str(tmp_path / "none"))


def test_per_node_parameter_of_a_cluster_check_is_refused_with_file_and_line(tmp_path):
    inventory = _nodes_inv(tmp_path, "nodes:\n  - {name: a, host: localhost}\n"
                                     "  - name: b\n    host: localhost\n    checks: {net.ping_mesh: {warn_rtt_ms: 5}}\n")
    with pytest.raises(SelectionError, match=r"inv.yaml:3 \(node b\): checks: net.ping_mesh: 'warn_rtt_ms' applies "
                                             r"to the whole cluster; set it in the top-level `checks:`"):
        Runner(inventory, LocalTransport())


def test_cluster_check_parameter_in_defaults_is_refused_too(tmp_path):
    inventory = _nodes_inv(tmp_path, "defaults:\n  checks: {net.ping_mesh: {warn_rtt_ms: 5}}\n"
                                     "nodes:\n  - {name: a, host: localhost}\n")
    with pytest.raises(SelectionError, match=r"net.ping_mesh: 'warn_rtt_ms' applies to the whole cluster"):
        Runner(inventory, LocalTransport())


def test_top_level_cluster_parameter_and_declared_node_params_pass(tmp_path):
    inventory = _nodes_inv(tmp_path, "checks: {net.ping_mesh: {warn_rtt_ms: 5}}\n"
                                     "nodes:\n  - {name: a, host: localhost}\n"
                                     "  - name: b\n    host: localhost\n    paths: {data: [/data/a]}\n"
                                     "    checks: {storage.consistency: {timeout_s: 600}}\n")
    runner = Runner(inventory, LocalTransport())
    b = next(n for n in inventory.nodes if n.name == "b")
    info = runner.every["storage.consistency"]
    assert "timeout_s" in info.node_params
    # honoured where it means something: that node's manifest probe gets the longer timeout
    probes = info.module.probes(b, params(b, info))
    assert probes and all(p.timeout == 600 for p in probes.values())
