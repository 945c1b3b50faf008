"""preflight's reading of real inventories and ssh_configs, held to the real parsers' answers.

tests/fixtures/inventories/: public inventory files (Ascend deployer, DeepOps, kubespray, SuperBench,
Ansible's examples), each with its source in a header comment. The oracle is ansible-core's own
`ansible-inventory -i FILE --list` (a test dependency); preflight must find the same hosts with
the same address, port, user, become, become user and key file, or refuse the file where Ansible refuses it, or differ
for the reason written in DIFFERS. tests/fixtures/ssh_config/: HPC centres' published ssh
configs, held to OpenSSH's `ssh -G`.
"""
from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from preflight.inventory import InventoryError, load

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
INVENTORIES = sorted((FIXTURES / "inventories").iterdir())
SSH_CONFIGS = sorted((FIXTURES / "ssh_config").iterdir())
ANSIBLE = shutil.which("ansible-inventory")

# Files where preflight's answer is not Ansible's, on purpose: file -> the words preflight's
# refusal must contain (and why it refuses).
DIFFERS = {
    # `ansible_host=<>` is a placeholder left for the user; Ansible keeps the text, preflight
    # cannot dial it and says so at load rather than per node at connect time.
    "kubespray_ha-calico-kube-vip_inventory.ini": "'<>' is not a host name or address",
    # `ansible_host: TODO`, the same kind of placeholder, is a valid host *name* to both: no difference.
    # `hosts:` followed by indented names is one YAML scalar "node1 node2 node3": Ansible makes it one
    # host with that name (spaces included), preflight refuses the name.
    "kubespray_sample_inventory.yml": "'node1 node2 node3' is not a valid node name",
}
# In CI the oracle is installed (.ci/run installs the test extras): a missing one fails there, never skips.
pytestmark = pytest.mark.skipif(ANSIBLE is None and not os.environ.get("CI"),
                                reason="ansible-core (a test extra) is not installed")


def ansible_answer(path: Path) -> dict[str, dict] | str:
    """host -> its variables, as ansible-inventory reads the file; a string when Ansible refuses it."""
    env = {**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCAL_TEMP": "/tmp", "ANSIBLE_HOME": "/tmp/preflight-ansible-home"}
    res = subprocess.run([ANSIBLE, "-i", str(path), "--list"], capture_output=True, text=True, env=env, timeout=120)
    if res.returncode != 0:
        return res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.returncode}"
    data = json.loads(res.stdout)
    hosts: dict[str, dict] = {h: dict(v) for h, v in data["_meta"]["hostvars"].items()}
    for group, body in data.items():
        for h in body.get("hosts", []) if isinstance(body, dict) else []:
            hosts.setdefault(h, {})
    return hosts


def _truthy(value) -> bool:
    return value is True or str(value).lower() in ("true", "yes", "on", "1")


def expected(name: str, hvars: dict) -> tuple:
    address = hvars.get("ansible_host", hvars.get("ansible_ssh_host", name))
    port = hvars.get("ansible_port", hvars.get("ansible_ssh_port", 22))
    user = hvars.get("ansible_user", hvars.get("ansible_ssh_user"))
    become = "sudo" if _truthy(hvars.get("ansible_become", False)) else None
    become_user = hvars.get("ansible_become_user", "root")  # Ansible's default become_user is root
    key = hvars.get("ansible_ssh_private_key_file", hvars.get("ansible_private_key_file"))
    return str(address), int(port), user, become, become_user, os.path.expanduser(key) if key else None


@pytest.mark.parametrize("path", INVENTORIES, ids=[p.name for p in INVENTORIES])
def test_inventory_read_as_ansible_reads_it(path, tmp_path):
    assert path.read_text().startswith("# Source: github.com/"), "every corpus file names its source"
    answer = ansible_answer(path)
    try:
        inv = load(path, ssh_config=str(tmp_path / "no-ssh-config"))
        got: dict[str, tuple] | str = {n.name: (n.host, n.port, n.user, n.become, n.become_user, n.identity_file)
                                       for n in inv.nodes}
    except InventoryError as exc:
        got = str(exc)
    if path.name in DIFFERS:
        assert isinstance(got, str) and DIFFERS[path.name] in got and "\n" not in got, got
        assert isinstance(answer, dict), f"Ansible refuses it too now: {answer}"
        return
    if isinstance(answer, str):  # Ansible refuses the file: so must preflight, in one line
        assert isinstance(got, str) and "\n" not in got, f"Ansible refuses ({answer}); preflight read {got}"
        return
    if not answer:  # no hosts at all: preflight says so
        assert isinstance(got, str) and "the inventory lists no host" in got, got
        return
    assert isinstance(got, dict), f"Ansible reads {len(answer)} hosts; preflight refused: {got}"
    assert set(got) == set(answer), (sorted(got), sorted(answer))
    for host, hvars in answer.items():
        assert got[host] == expected(host, hvars), (host, got[host], hvars)


def ssh_g(config: Path, host: str) -> dict[str, list[str]]:
    out = subprocess.run(["ssh", "-G", "-F", str(config), host], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    seen: dict[str, list[str]] = {}
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        seen.setdefault(key, []).append(value)
    return seen


def hosts_of(config: Path) -> list[str]:
    header = config.read_text().splitlines()[1]
    return header.split("hosts the test resolves:")[1].rstrip(")").split()


@pytest.mark.skipif(shutil.which("ssh") is None, reason="OpenSSH client not installed")
@pytest.mark.parametrize("config", SSH_CONFIGS, ids=[p.name for p in SSH_CONFIGS])
def test_ssh_config_read_as_openssh_reads_it(config, tmp_path):
    """Each alias as a node: HostName, User, Port, IdentityFile, ProxyJump as `ssh -G` resolves them,
    and each jump hop resolved through the same file as `ssh -G HOP` resolves it."""
    assert config.read_text().startswith("# Source: github.com/")
    inv_path = tmp_path / "inv.yaml"
    names = hosts_of(config)
    inv_path.write_text("nodes:\n" + "".join(f"  - {{name: {h}, host: {h}}}\n" for h in names))
    nodes = {n.name: n for n in load(inv_path, ssh_config=str(config)).nodes}
    for alias in names:
        g, node = ssh_g(config, alias), nodes[alias]
        assert node.host == g["hostname"][0], alias
        assert (node.user or getpass.getuser()) == g["user"][0], alias
        assert node.port == int(g["port"][0]), alias
        if node.identity_file:
            assert node.identity_file == os.path.expanduser(g["identityfile"][0]), alias
        assert (node.proxy_jump or None) == (g.get("proxyjump", [None])[0]), alias
        for hop in node.jump_hops:
            hop_name = node.proxy_jump.split(",")[node.jump_hops.index(hop)]
            hg = ssh_g(config, hop_name)
            assert (hop.host, hop.port, hop.user or getpass.getuser()) == \
                   (hg["hostname"][0], int(hg["port"][0]), hg["user"][0]), hop_name


@pytest.mark.skipif(shutil.which("ssh") is None, reason="OpenSSH client not installed")
@pytest.mark.parametrize("path", INVENTORIES, ids=[p.name for p in INVENTORIES])
def test_jump_hosts_as_ansibles_ssh_command_would_reach_them(path, tmp_path):
    """A host whose Ansible variables carry ssh arguments (a bastion: `-o ProxyJump=...`, `-J`):
    Ansible splits them as a shell does and appends them to its `ssh` command; `ssh -G` with those
    words is the oracle for where the connection goes through, and as whom to which port."""
    import shlex

    answer = ansible_answer(path)
    if not isinstance(answer, dict) or path.name in DIFFERS:
        return
    carried = {h: v for h, v in answer.items() if v.get("ansible_ssh_common_args") or v.get("ansible_ssh_extra_args")}
    if not carried:
        return
    nodes = {n.name: n for n in load(path, ssh_config=str(tmp_path / "no-ssh-config")).nodes}
    empty = tmp_path / "empty_ssh_config"
    empty.write_text("")
    for host, hvars in carried.items():
        words = shlex.split(str(hvars.get("ansible_ssh_common_args", ""))) + \
            shlex.split(str(hvars.get("ansible_ssh_extra_args", "")))
        address, port, user = expected(host, hvars)[:3]
        opts = ["-o", f"Port={port}"] + (["-o", f"User={user}"] if user else [])
        out = subprocess.run(["ssh", "-G", "-F", str(empty), *opts, *words, address], capture_output=True, text=True,
                             timeout=30, check=True).stdout
        seen = dict(line.partition(" ")[::2] for line in out.splitlines())
        node = nodes[host]
        assert (node.host, str(node.port)) == (seen["hostname"], seen["port"]), (host, seen)
        # ssh -G prints each hop's host in brackets (user@[3.232.173.107]); only IPv6 needs them
        hops = seen.get("proxyjump")
        hops = re.sub(r"\[([^:\]]+)\]", r"\1", hops) if hops else None
        assert (node.proxy_jump or None) == hops, (host, node.proxy_jump, seen.get("proxyjump"))
