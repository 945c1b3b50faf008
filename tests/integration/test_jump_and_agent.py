"""ProxyJump (one hop, two hops, aliases from ssh_config) and ssh-agent keys, against real sshd nodes.

node01 is the jump host of node02 and node03; the control host reaches them only through it when
the inventory (or ~/.ssh/config) says so. A dead jump host makes every node behind it unreachable,
with the jump host named as the cause.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from preflight.inventory import load
from preflight.model import NodeStateKind
from preflight.runner import Options, Runner
from tests.simfixtures import requires_netns
from preflight.transport.hostkeys import KnownHosts
from preflight.transport.ssh import SSHTransport

pytestmark = requires_netns

SIM_SPEC = {"nodes": 3}
SIM_MODE = "netns"


def inventory(cluster, tmp_path: Path, node_overrides: dict, defaults: dict | None = None) -> str:
    doc = yaml.safe_load(Path(cluster.inventory_path).read_text())
    doc["defaults"].update(defaults or {})
    for entry in doc["nodes"]:
        entry.update(node_overrides.get(entry["name"], {}))
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def run(path: str, ssh_config: str | None = None):
    KnownHosts.forget_all()
    inv = load(path, ssh_config=ssh_config or os.devnull)
    return Runner(inv, SSHTransport(), Options(checks=["npu.health"])).run()


def states(report) -> dict[str, tuple]:
    return {n.name: (n.state, n.error) for n in report.nodes}


@pytest.fixture
def only_via_jump(sim_cluster):
    """node02 and node03 accept SSH from the jump host (node01) only: a direct attempt times out."""
    jump = sim_cluster.node("node01").host
    rule = f"INPUT -p tcp --dport 22 ! -s {jump} -j DROP"
    for n in ("node02", "node03"):
        sim_cluster.exec(n, f"iptables -I {rule}")
    try:
        yield jump
    finally:
        for n in ("node02", "node03"):
            sim_cluster.exec(n, f"iptables -D {rule}")


def test_nodes_behind_a_jump_host_are_checked_through_it(sim_cluster, tmp_path, only_via_jump):
    jump = only_via_jump
    direct = run(inventory(sim_cluster, tmp_path, {}, defaults={"connect_timeout": 1.5}))
    assert states(direct)["node02"][0] is NodeStateKind.UNREACHABLE  # the DROP rule really blocks us
    path = inventory(sim_cluster, tmp_path, {n: {"proxy_jump": f"root@{jump}"} for n in ("node02", "node03")})
    report = run(path)
    assert all(s == NodeStateKind.OK for s, _ in states(report).values()), states(report)
    assert all(r.status.value == "pass" for r in report.results if r.check == "npu.health")


def test_proxyjump_from_ssh_config_is_honoured(sim_cluster, tmp_path, only_via_jump):
    target = sim_cluster.node("node03").host
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host {target}\n    ProxyJump root@{only_via_jump}\n")
    report = run(inventory(sim_cluster, tmp_path, {}, defaults={"connect_timeout": 1.5}), ssh_config=str(cfg))
    st = states(report)
    assert st["node03"][0] is NodeStateKind.OK and st["node02"][0] is NodeStateKind.UNREACHABLE


def test_dead_jump_host_names_itself_for_every_node_behind_it(sim_cluster, tmp_path):
    jump = sim_cluster.node("node01").host
    path = inventory(sim_cluster, tmp_path, {n: {"proxy_jump": f"root@{jump}:2222"} for n in ("node02", "node03")},
                     defaults={"connect_timeout": 2})
    st = states(run(path))
    assert st["node01"][0] is NodeStateKind.OK
    for n in ("node02", "node03"):
        assert st[n][0] is NodeStateKind.UNREACHABLE and f"jump host root@{jump}:2222" in st[n][1] and "refused" in st[n][1]


@pytest.fixture
def chain(sim_cluster):
    """node03 accepts SSH from node02 only, node02 from node01 only: a two-hop chain."""
    a, b = sim_cluster.node("node01").host, sim_cluster.node("node02").host
    rules = {"node02": f"INPUT -p tcp --dport 22 ! -s {a} -j DROP", "node03": f"INPUT -p tcp --dport 22 ! -s {b} -j DROP"}
    for n, rule in rules.items():
        sim_cluster.exec(n, f"iptables -I {rule}")
    try:
        yield a, b
    finally:
        for n, rule in rules.items():
            sim_cluster.exec(n, f"iptables -D {rule}")


def test_multi_hop_proxyjump_is_honoured(sim_cluster, tmp_path, chain):
    """`ProxyJump a,b` as OpenSSH: node03 through node01 then node02 (paramiko channels chained)."""
    a, b = chain
    path = inventory(sim_cluster, tmp_path, {"node02": {"proxy_jump": f"root@{a}"},
                                             "node03": {"proxy_jump": f"root@{a},root@{b}"}})
    st = states(run(path))
    assert all(s is NodeStateKind.OK for s, _ in st.values()), st


def test_jump_alias_resolved_through_the_ssh_config_in_force(sim_cluster, tmp_path, chain):
    """`ProxyJump first,second`: each alias's HostName, User and Port come from the given ssh_config."""
    a, b = chain
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host first\n    HostName {a}\n    User root\n    Port 22\n"
                   f"Host second\n    HostName {b}\n    User root\n")
    path = inventory(sim_cluster, tmp_path, {"node03": {"proxy_jump": "first,second"}},
                     defaults={"connect_timeout": 2})
    inv = load(path, ssh_config=str(cfg))
    assert [(h.host, h.user) for h in by_name(inv)["node03"].jump_hops] == [(a, "root"), (b, "root")]
    st = states(run(path, ssh_config=str(cfg)))
    assert st["node03"][0] is NodeStateKind.OK, st


def by_name(inv):
    return {n.name: n for n in inv.nodes}


@pytest.fixture
def agent(sim_cluster, tmp_path, monkeypatch):
    """A real ssh-agent holding the cluster's client key; HOME without any key file."""
    out = subprocess.run(["ssh-agent", "-s", "-a", str(tmp_path / "agent.sock")], capture_output=True, text=True,
                         check=True).stdout
    pid = int(out.split("SSH_AGENT_PID=")[1].split(";")[0])
    try:
        monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "agent.sock"))
        monkeypatch.setenv("HOME", str(tmp_path))
        subprocess.run(["ssh-add", "-q", str(sim_cluster.client_key)], check=True, capture_output=True)
        yield
    finally:
        os.kill(pid, 15)


def test_agent_key_is_used_when_no_identity_file_is_given(sim_cluster, tmp_path, agent):
    doc = yaml.safe_load(Path(sim_cluster.inventory_path).read_text())
    del doc["defaults"]["identity_file"]
    path = tmp_path / "agent-inv.yaml"
    path.write_text(yaml.safe_dump(doc))
    report = run(str(path))
    assert all(s == NodeStateKind.OK for s, _ in states(report).values()), states(report)


def encrypted_copy(key: Path, dest: Path) -> Path:
    """The cluster's client key, passphrase-protected (what `ssh-keygen -p` leaves on a workstation)."""
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    dest.write_bytes(key.read_bytes())
    os.chmod(dest, 0o600)
    subprocess.run(["ssh-keygen", "-q", "-p", "-P", "", "-N", "correct horse", "-f", str(dest)], check=True,
                   capture_output=True, stdin=subprocess.DEVNULL)
    return dest


def inventory_with_key(cluster, tmp_path: Path, identity_file: Path | None) -> str:
    doc = yaml.safe_load(Path(cluster.inventory_path).read_text())
    if identity_file is None:
        del doc["defaults"]["identity_file"]
    else:
        doc["defaults"]["identity_file"] = str(identity_file)
    path = tmp_path / "enc-inv.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def run_cli(path: str) -> tuple[dict, subprocess.CompletedProcess]:
    """A real process with no terminal to prompt on (stdin /dev/null), bounded: a prompt or a hang fails."""
    proc = subprocess.run([sys.executable, "-m", "preflight.cli", "run", path, "--checks", "ssh.connect",
                           "--format", "json", "--ssh-config", os.devnull],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    return json.loads(proc.stdout), proc


@pytest.mark.parametrize("where", ["identity_file", "default ~/.ssh/id_ed25519"])
def test_encrypted_key_is_used_through_the_agent(sim_cluster, tmp_path, agent, where):
    enc = encrypted_copy(Path(sim_cluster.client_key),
                         tmp_path / ("enc_key" if where == "identity_file" else ".ssh/id_ed25519"))
    report, proc = run_cli(inventory_with_key(sim_cluster, tmp_path, enc if where == "identity_file" else None))
    assert [n["state"] for n in report["nodes"]] == ["ok"] * 3, report["nodes"]
    assert proc.returncode == 0 and proc.stderr == ""


@pytest.mark.parametrize("where", ["identity_file", "default ~/.ssh/id_ed25519"])
def test_encrypted_key_without_agent_is_auth_failed_naming_it_and_ssh_add(sim_cluster, tmp_path, monkeypatch,
                                                                         where):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    enc = encrypted_copy(Path(sim_cluster.client_key),
                         tmp_path / ("enc_key" if where == "identity_file" else ".ssh/id_ed25519"))
    report, proc = run_cli(inventory_with_key(sim_cluster, tmp_path, enc if where == "identity_file" else None))
    for n in report["nodes"]:
        assert n["state"] == "auth_failed", n
        assert f"{enc} is encrypted" in n["error"] and f"ssh-add {enc}" in n["error"], n["error"]
    said = json.dumps([report["nodes"], report["results"]])  # not cut by a deadline (the options name it)
    assert proc.returncode == 3 and "deadline" not in said and "Traceback" not in proc.stderr
