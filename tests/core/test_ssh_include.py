"""ssh_config `Include` followed as OpenSSH follows it (paramiko skips the keyword): held to `ssh -G`."""
from __future__ import annotations

import getpass
import shutil
import subprocess
from pathlib import Path

import pytest

from preflight.inventory import InventoryError, load

HOSTS = ("login1", "login9", "other", "plain", "x.cscs")


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "10-login.conf").write_text("Host login*\n  User incuser\n  Port 2222\n"
                                                       "Host *.cscs\n  User cscsuser\n")
    (tmp_path / "conf.d" / "20-nine.conf").write_text("Host login9\n  HostName nine.example\n")
    (tmp_path / "keyline").write_text("IdentityFile /keys/id_inc\n")
    config = tmp_path / "config"
    config.write_text(f"Include {tmp_path}/conf.d/*.conf {tmp_path}/conf.d/none-*.conf\n"
                      f"User topuser\n"
                      f"Host other\n  Include {tmp_path}/keyline\n  User otheruser\n"
                      f"Host *\n  Port 2200\n")
    return config


def _nodes(tmp_path: Path, config: Path, hosts=HOSTS):
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n" + "".join(f"  - {{name: {h}, host: {h}}}\n" for h in hosts))
    return {n.name: n for n in load(inv, ssh_config=str(config)).nodes}


def _ssh_g(config: Path, host: str) -> dict[str, str]:
    out = subprocess.run(["ssh", "-G", "-F", str(config), host], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    seen: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        seen.setdefault(key, value)
    return seen


@pytest.mark.skipif(shutil.which("ssh") is None, reason="OpenSSH client not installed")
def test_included_files_resolve_as_ssh_g_resolves_them(tmp_path):
    """A glob in sorted order, a pattern matching nothing, the top-level context restored after an
    included file's own Host blocks, and an Include inside a Host block that applies to it only."""
    config = _tree(tmp_path)
    nodes = _nodes(tmp_path, config)
    for host in HOSTS:
        g, node = _ssh_g(config, host), nodes[host]
        assert (node.host, node.port, node.user or getpass.getuser()) == \
               (g["hostname"], int(g["port"]), g["user"]), host
        if node.identity_file:
            assert node.identity_file == g["identityfile"], host
    assert nodes["login9"].host == "nine.example" and nodes["login1"].user == "incuser"
    assert nodes["other"].identity_file == "/keys/id_inc" and nodes["plain"].identity_file is None
    assert nodes["plain"].user == "topuser", "a top-level line after an Include is global again"


def test_include_nested_past_openssh_limit_is_one_line(tmp_path):
    config = tmp_path / "config"
    config.write_text(f"Include {config}\n")
    with pytest.raises(InventoryError) as exc:
        _nodes(tmp_path, config, ("a",))
    assert "Include nested more than 16 deep" in str(exc.value) and "\n" not in str(exc.value)


def test_include_of_blocks_inside_a_block_is_refused_with_file_and_line(tmp_path):
    (tmp_path / "blocks.conf").write_text("Host x\n  User u\n")
    config = tmp_path / "config"
    config.write_text(f"Host a\n  User b\n  Include {tmp_path}/blocks.conf\n")
    with pytest.raises(InventoryError) as exc:
        _nodes(tmp_path, config, ("a",))
    assert f"{config}:3: Include of {tmp_path}/blocks.conf inside a Host or Match block" in str(exc.value)
