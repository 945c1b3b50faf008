"""ssh_config options preflight honours beyond Host/User/Port/IdentityFile: `ProxyJump none`,
`StrictHostKeyChecking` (-> host_key_policy) and `IdentitiesOnly` (no agent key beyond the
configured identity's own), each below the inventory's own settings (docs/SPEC.md §2.1)."""
from __future__ import annotations

import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from preflight.inventory import load
from preflight.node import Node
from preflight.transport.ssh import KeyStore

SSH_CONFIG = """\
Host direct
  ProxyJump none
  StrictHostKeyChecking accept-new
  IdentitiesOnly yes
Host trusting
  StrictHostKeyChecking no
Host asking
  StrictHostKeyChecking ask
Host *
  ProxyJump bastion.example
"""


def _nodes(tmp_path: Path, body: str) -> dict[str, Node]:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(SSH_CONFIG)
    inv = tmp_path / "inv.yaml"
    inv.write_text(textwrap.dedent(body))
    return {n.name: n for n in load(inv, ssh_config=str(cfg)).nodes}


def test_proxyjump_none_strict_host_key_checking_and_identities_only(tmp_path: Path):
    nodes = _nodes(tmp_path, """\
        nodes:
          - {name: d, host: direct}
          - {name: t, host: trusting}
          - {name: a, host: asking}
          - {name: o, host: other}
          - {name: inv, host: trusting, host_key_policy: strict, proxy_jump: j.example}
        """)
    d, t, a, o, inv = (nodes[k] for k in ("d", "t", "a", "o", "inv"))
    assert d.proxy_jump is None and d.host_key_policy == "accept-new" and d.identities_only
    assert t.proxy_jump == "bastion.example" and t.host_key_policy == "off" and not t.identities_only
    assert a.host_key_policy == "strict", "`ask` would prompt; a batch run is strict"
    assert o.host_key_policy == "strict" and o.proxy_jump == "bastion.example"
    assert inv.host_key_policy == "strict" and inv.proxy_jump == "j.example", "the inventory wins"


@pytest.fixture
def agent(tmp_path: Path, monkeypatch):
    """A real ssh-agent holding key `agent_key`; stopped by its PID afterwards."""
    out = subprocess.run(["ssh-agent", "-s", "-a", str(tmp_path / "agent.sock")], capture_output=True, text=True,
                         check=True, timeout=10).stdout
    pid = int(out.split("SSH_AGENT_PID=")[1].split(";")[0])
    try:
        monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "agent.sock"))
        for name in ("agent_key", "file_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)], check=True,
                           timeout=10)
        subprocess.run(["ssh-add", "-q", str(tmp_path / "agent_key")], check=True, timeout=10,
                       env={**os.environ, "SSH_AUTH_SOCK": str(tmp_path / "agent.sock")}, capture_output=True)
        yield tmp_path
    finally:
        os.kill(pid, signal.SIGTERM)


def _labels(node: Node) -> list[str]:
    keys, problems = KeyStore().for_node(node)
    assert not problems
    return [k.label for k in keys]


def test_identities_only_offers_no_other_agent_key(agent: Path):
    file_key = str(agent / "file_key")
    assert any(lbl.startswith("agent key") for lbl in _labels(Node("n", "h", identity_file=file_key)))
    assert _labels(Node("n", "h", identity_file=file_key, identities_only=True)) == [file_key]
    # the agent's copy of the configured identity itself is still used (as OpenSSH does)
    own = _labels(Node("n", "h", identity_file=str(agent / "agent_key"), identities_only=True))
    assert str(agent / "agent_key") in own and any(lbl.startswith("agent key") for lbl in own)
