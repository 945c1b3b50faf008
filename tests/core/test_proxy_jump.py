"""A malformed proxy_jump is an inventory error (exit 2, file:line), never a bug in a node's worker."""
from __future__ import annotations

import subprocess
import textwrap

import pytest

from preflight.inventory import InventoryError, load
from preflight.node import JumpHop, parse_jump


@pytest.mark.parametrize("spec", ["host:notaport", "root@host:0", "host:70000", "root@", "a b", "host:22:22",
                                  "bastion,host:x"])
def test_malformed_proxy_jump_is_refused_at_load_with_file_and_line(tmp_path, spec):
    p = tmp_path / "inv.yaml"
    p.write_text(textwrap.dedent(f"""\
        nodes:
          - name: n1
            host: 10.0.0.1
          - name: n2
            host: 10.0.0.2
            proxy_jump: "{spec}"
        """))
    with pytest.raises(InventoryError) as exc:
        load(p, ssh_config=str(tmp_path / "none"))
    msg = str(exc.value)
    assert msg.startswith(f"{p}:6: proxy_jump: ") and repr(spec.split(",")[-1]) in msg, msg


def test_malformed_proxyjump_in_ssh_config_is_refused(tmp_path):
    p = tmp_path / "inv.yaml"
    p.write_text("nodes:\n  - name: n1\n    host: 10.0.0.1\n")
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host 10.0.0.1\n    ProxyJump bastion:ssh\n")
    with pytest.raises(InventoryError, match=r"ProxyJump for 10\.0\.0\.1: 'bastion:ssh'"):
        load(p, ssh_config=str(cfg))


def test_cli_exit_2_one_line(tmp_path):
    p = tmp_path / "inv.yaml"
    p.write_text("nodes:\n  - name: n1\n    host: 10.0.0.1\n    proxy_jump: host:notaport\n")
    res = subprocess.run(["preflight", "run", str(p), "--ssh-config", str(tmp_path / "none")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and f"{p}:4: proxy_jump" in res.stderr, res.stderr


def test_valid_jump_specs_parse():
    assert parse_jump("bastion") == (JumpHop(None, "bastion", 22),)
    assert parse_jump("ops@10.0.0.9:2222") == (JumpHop("ops", "10.0.0.9", 2222),)
    assert parse_jump("[fd00::1]:2200,b") == (JumpHop(None, "fd00::1", 2200), JumpHop(None, "b", 22))


def test_proxycommand_refused_naming_the_ssh_config_actually_read(tmp_path):
    """The refusal names the file given with --ssh-config, not ~/.ssh/config."""
    p = tmp_path / "inv.yaml"
    p.write_text("nodes:\n  - name: n1\n    host: 10.0.0.1\n")
    cfg = tmp_path / "site_ssh_config"
    cfg.write_text("Host 10.0.0.*\n    ProxyCommand ssh -W %h:%p bastion\n")
    with pytest.raises(InventoryError) as exc:
        load(p, ssh_config=str(cfg))
    assert str(exc.value).startswith(f"{cfg}: ProxyCommand for 10.0.0.1") and "~/.ssh" not in str(exc.value)


def test_proxycommand_of_a_jump_alias_refused(tmp_path):
    p = tmp_path / "inv.yaml"
    p.write_text("nodes:\n  - name: n1\n    host: 10.0.0.1\n    proxy_jump: gw\n")
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host gw\n    ProxyCommand nc %h %p\n")
    with pytest.raises(InventoryError, match=rf"^{cfg}: ProxyCommand for jump host gw"):
        load(p, ssh_config=str(cfg))


def test_each_hop_resolved_through_ssh_config(tmp_path):
    """OpenSSH resolves every hop of `a,b` through the config in force; the spec's own user/port win."""
    p = tmp_path / "inv.yaml"
    p.write_text("nodes:\n  - name: n1\n    host: 10.0.0.1\n    proxy_jump: ela,ops@inner:2200\n")
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host ela\n    HostName ela.cscs.example\n    User alice\n    Port 2022\n"
                   "    IdentityFile ~/.ssh/cscs-key\nHost inner\n    HostName 10.1.0.1\n    User bob\n    Port 2300\n")
    hops = load(p, ssh_config=str(cfg)).nodes[0].jump_hops
    assert [(h.user, h.host, h.port) for h in hops] == [("alice", "ela.cscs.example", 2022), ("ops", "10.1.0.1", 2200)]
    assert hops[0].identity_file.endswith("/.ssh/cscs-key") and hops[1].identity_file is None


def test_multi_hop_from_ansible_ssh_args_loads(tmp_path):
    p = tmp_path / "hosts"
    p.write_text("[g]\nn1 ansible_host=10.0.0.1\n[g:vars]\nansible_ssh_common_args='-J a@b:2222,c'\n")
    node = load(p, ssh_config=str(tmp_path / "none")).nodes[0]
    assert node.proxy_jump == "a@b:2222,c" and [h.host for h in node.jump_hops] == ["b", "c"]
