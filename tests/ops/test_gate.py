"""The gate: fast subset, SPEC exit codes, hostlists for the scheduler, --local for prologs."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from preflight.transport import factory
from preflight.ops import gate
from preflight.cli import main
from preflight.inventory import InventoryError
from preflight.model import CommandOutput
from tests.ops import ScriptedTransport, make_report
from tests.support import fixture_body

BUSY = fixture_body("npu-smi_info__910B3_8card_1proc__vllm-ascend-6512.txt")
IDLE = fixture_body("npu-smi_info__910B1_8card_idle_npu-smi24.1.0__vllm-ascend-4037.txt")
NAMES = [f"node{i:02d}" for i in range(1, 9)]


def _answer(text):
    return lambda cmd: CommandOutput(text if "npu-smi info" in cmd else "", "", 0 if "npu-smi info" in cmd else 127)


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """Eight nodes; node03 and node07 have a leftover process on an NPU."""
    inv = tmp_path / "inv.yaml"
    inv.write_text("defaults: {env: {MASTER_PORT: '29500'}}\nnodes:\n  - {name: 'node[01-08]', host: '10.0.0.[1-8]'}\n")
    transport = ScriptedTransport({n: _answer(BUSY if n in ("node03", "node07") else IDLE) for n in NAMES})
    monkeypatch.setattr(factory, "make_transport", lambda replay=None, local=False: transport)
    return inv, transport


def test_split_and_hostlists(tmp_path):
    report = make_report(nodes=NAMES, fail={"node03": "hccn.link"}, unreachable={"node07"})
    good, bad = gate.split_nodes(report)
    assert bad == ["node03", "node07"] and len(good) == 6
    gate.write_lists(report, str(tmp_path / "ex"), str(tmp_path / "good"))
    assert (tmp_path / "ex").read_text() == "node[03,07]\n"
    assert (tmp_path / "good").read_text() == "node[01-02,04-06,08]\n"
    gate.write_lists(make_report(nodes=NAMES), str(tmp_path / "ex"), None)
    assert (tmp_path / "ex").read_text() == ""  # nothing to exclude: an empty file, not a stale list


def test_gate_cli_writes_exclude_and_good_lists(cluster, tmp_path):
    inv, transport = cluster
    ex, good = tmp_path / "exclude", tmp_path / "good"
    r = CliRunner().invoke(main, ["gate", str(inv), "--checks", "npu.idle", "--exclude-out", str(ex),
                                  "--good-out", str(good), "--quiet"])
    assert r.exit_code == 1, r.output
    assert r.output == ""
    assert ex.read_text() == "node[03,07]\n" and good.read_text() == "node[01-02,04-06,08]\n"


def test_gate_limit_takes_a_slurm_hostlist(cluster):
    inv, transport = cluster
    r = CliRunner().invoke(main, ["gate", str(inv), "--checks", "npu.idle", "--limit", "node[01-02,05]", "-q"])
    assert r.exit_code == 0
    assert sorted(transport.connects) == ["node01", "node02", "node05"]


def test_gate_default_subset_and_deadline():
    # the fast set is what the checks declare (Policy(gate=True)), never a list in the core
    assert sorted(gate.gate_checks(None, local=False)) == sorted(
        ["ssh.connect", "npu.health", "npu.idle", "cann.env", "hccn.link", "hccn.ip", "env.comm", "net.ports",
         "gpu.health", "gpu.idle", "gpu.topology", "cuda.env", "ib.link"])
    assert gate.DEFAULT_DEADLINE == 30.0
    params = {p.name: p.default for p in main.get_command(None, "gate").params}
    assert params["deadline"] == 30.0


def test_local_keeps_node_checks_only():
    chosen = gate.gate_checks(["hccn", "sw.consistency", "ssh.connect"], local=True)
    assert "hccn.link" in chosen and "ssh.connect" in chosen
    assert all(gate.discover()[c].scope == "node" for c in chosen)
    with pytest.raises(InventoryError, match="node checks only"):
        gate.gate_checks(["sw.consistency"], local=True)
    with pytest.raises(InventoryError, match="no check matches"):
        gate.gate_checks(["nosuch"], local=True)


def test_local_inventory_uses_this_hosts_entry_or_the_defaults(tmp_path, monkeypatch):
    inv = tmp_path / "inv.yaml"
    inv.write_text("cluster: c1\ndefaults: {env: {HCCL_SOCKET_IFNAME: eth0}, devices: 16}\n"
                   "checks: {npu.idle: {max_hbm_used_pct: 5}}\n"
                   "nodes:\n  - {name: gpu07, host: 10.0.0.7, env: {HCCL_IF_IP: 10.0.0.7}}\n")
    monkeypatch.setenv("SLURMD_NODENAME", "gpu07")
    mine = gate.local_inventory(str(inv))
    assert [n.name for n in mine.nodes] == ["gpu07"] and mine.nodes[0].env["HCCL_IF_IP"] == "10.0.0.7"
    monkeypatch.setenv("SLURMD_NODENAME", "gpu99")
    other = gate.local_inventory(str(inv))
    node = other.nodes[0]
    assert node.host == "localhost" and node.devices == 16 and node.env == {"HCCL_SOCKET_IFNAME": "eth0"}
    assert other.cluster == "c1" and other.path == str(inv) and node.params["npu.idle"]["max_hbm_used_pct"] == 5
    bare = gate.local_inventory(None)
    assert bare.nodes[0].host == "localhost"


def test_local_gate_is_named_by_slurm_not_by_the_host_name(tmp_path, monkeypatch):
    """Issue 29 finding 10: the prolog's node was the host name, so --drain drained (or missed) the
    wrong node where Slurm's name differs. An entry matching the host name is not used under Slurm."""
    import socket
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"nodes:\n  - {{name: {socket.gethostname().split('.')[0]}, host: 10.0.0.7}}\n")
    monkeypatch.setenv("SLURMD_NODENAME", "node03")
    assert [n.name for n in gate.local_inventory(str(inv)).nodes] == ["node03"]
    assert [n.name for n in gate.local_inventory(None).nodes] == ["node03"]
    monkeypatch.delenv("SLURMD_NODENAME")
    r = CliRunner().invoke(main, ["gate", "--local", "--drain", "--dry-run"])
    assert r.exit_code in (2, 5) and "Traceback" not in r.output
    if r.exit_code == 2:  # (5: no sinfo on PATH, asked first)
        assert "$SLURMD_NODENAME, which is not set" in r.output


def test_bad_input_is_one_line(tmp_path):
    r = CliRunner().invoke(main, ["gate"])
    assert r.exit_code == 2 and "needs an INVENTORY" in r.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes:\n  - {name: n1, host: h, port: 22:22}\n")
    r = CliRunner().invoke(main, ["gate", "--local", str(bad)])
    assert r.exit_code == 2 and "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1
