"""Ansible inventories by Ansible's rules: INI and YAML, which variables preflight reads, ssh
arguments, bad input. tests/core/test_inventory_corpus.py holds real files to ansible-inventory."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from preflight.inventory import InventoryError, load
from tests.core.test_inventory import by_name, error_of, inv_of, line_of, write

INI = """\
# a comment
; another
bastion ansible_host=203.0.113.5 ansible_user=jump

[npu]
node[01:03] ansible_host=10.0.0.[1:3]
node09:2222 ansible_host=10.0.0.9 ansible_user='root'   # inline comment
fd00::9 npu_num=16

[gpu]
gpu[a:c].example.org
gpu[0:20:10]

[train:children]
npu
gpu

[train:vars]
ansible_user=ops
ansible_port=2200
ansible_become=yes
preflight_backend="ascend"
user=billybob
devices=3
"""


def test_ini_inventory_loads_with_ansible_semantics(tmp_path):
    inv = inv_of(tmp_path, INI)
    nodes = by_name(inv)
    assert list(nodes) == ["bastion", "node01", "node02", "node03", "node09", "fd00::9", "gpua.example.org",
                           "gpub.example.org", "gpuc.example.org", "gpu0", "gpu10", "gpu20"]
    assert inv.fmt == "ansible-ini"
    n1, n9, v6 = nodes["node01"], nodes["node09"], nodes["fd00::9"]
    assert (n1.host, n1.user, n1.port, n1.become, n1.backend) == ("10.0.0.1", "ops", 2200, "sudo", "ascend")
    assert (n9.host, n9.user, n9.port) == ("10.0.0.9", "root", 2222), "host:port and the host's own vars win"
    assert (v6.host, v6.devices) == ("fd00::9", 16), "npu_num is the Ascend deployer's NPU count"
    assert n1.devices == 8, "a bare `devices=` is some other tool's variable"
    assert nodes["bastion"].user == "jump" and nodes["bastion"].port == 22
    assert nodes["gpu10"].user == "ops"


def test_only_connection_and_preflight_variables_count(tmp_path):
    """A plain `user: billybob` (another role's variable) never beats ansible_user."""
    nodes = by_name(inv_of(tmp_path, """\
        all:
          hosts:
            a: {ansible_host: 10.0.0.1, ansible_user: ubuntu, user: billybob, devices: /dev/sda,
                host: elsewhere, port: 1}
        """))
    a = nodes["a"]
    assert (a.host, a.user, a.port, a.devices) == ("10.0.0.1", "ubuntu", 22, 8)


def test_yaml_top_level_groups_without_all(tmp_path):
    inv = inv_of(tmp_path, """\
        masters:
          hosts:
            m1: {ansible_host: 10.0.0.1}
        workers:
          hosts: w1
          vars: {ansible_user: ops}
        k8s:
          children:
            masters:
            workers:
          vars: {ansible_port: 2200}
        """)
    nodes = by_name(inv)
    assert inv.fmt == "ansible-yaml" and list(nodes) == ["m1", "w1"]
    assert (nodes["m1"].port, nodes["w1"].port, nodes["w1"].user) == (2200, 2200, "ops")


def test_format_from_content_not_name(tmp_path):
    for name in ("hosts", "inventory_file", "inventory.ini", "inv.yaml"):
        p = write(tmp_path, "[g]\nh1 ansible_host=10.0.0.1\n", name)
        assert [n.host for n in load(p, ssh_config=str(tmp_path / "none")).nodes] == ["10.0.0.1"]


@pytest.mark.parametrize("text, line, says", [
    ("[g]\nh1\n[g:bogus]\nx\n", 3, "unknown type"),
    ("[g]\nh1 novalue\n", 2, "key=value"),
    ("[g:vars]\nx=1\n", 1, "defined nowhere"),
    ("[g]\nh1\n[p:children]\ng\nmissing\n", 5, "'missing'"),
    ("[g]\nh1\n[g:vars]\njust words\n", 4, "key=value"),
    ("[g]\nh[a:9]\n", 2, "h[a:9]"),
    ("[g]\nh[01:2]\n", 2, "equal length"),
    ("[ g ]\nh\n", 1, "invalid section"),
    ("[g]\nh1 ansible_host='unclosed\n", 2, "cannot read host line"),
])
def test_ini_lines_ansible_refuses_name_file_and_line(tmp_path, text, line, says):
    msg = error_of(tmp_path, text)
    assert line_of(msg) == line and says in msg, msg


def test_ini_values_typed_as_ansible_types_them(tmp_path):
    """ast.literal_eval: 2200 an int, '2200' a string (a port in digits, as ssh takes it), abc text."""
    nodes = by_name(inv_of(tmp_path, "[g]\na ansible_port=2200 ansible_become=True\nb ansible_port='2201'\n"))
    assert (nodes["a"].port, nodes["a"].become, nodes["b"].port) == (2200, "sudo", 2201)
    msg = error_of(tmp_path, "[g]\na ansible_port=abc\n")
    assert line_of(msg) == 2 and "ansible_port" in msg


def test_multi_group_host_merged_by_precedence_ini(tmp_path):
    nodes = by_name(inv_of(tmp_path, """\
        [a]
        n1
        [b]
        n1
        [a:vars]
        ansible_port=2201
        [b:vars]
        ansible_port=2202
        ansible_group_priority=0
        """))
    assert nodes["n1"].port == 2201, "b sorts later but its priority 0 is below a's default 1"


@pytest.mark.parametrize("var, value", [("ansible_host", "{{ lookup('env', 'X') }}"),
                                        ("ansible_user", "{{ admin }}"), ("ansible_ssh_common_args", "{% if x %}")])
def test_jinja_in_a_connection_variable_refused_by_its_own_name(tmp_path, var, value):
    msg = error_of(tmp_path, f"""\
        all:
          hosts:
            a:
              {var}: "{value}"
        """)
    assert line_of(msg) == 4 and f": {var}: " in msg and "Jinja" in msg, msg


def test_bad_connection_value_named_by_its_variable(tmp_path):
    msg = error_of(tmp_path, "[g]\na ansible_host='a;reboot'\n")
    assert line_of(msg) == 2 and ": ansible_host: " in msg and "host:" not in msg.split("ansible_host")[0]


def test_not_yaml_nor_ini_says_both(tmp_path):
    msg = error_of(tmp_path, "[g]\nh1\n  bad: [\nh2 x\n")
    assert "Ansible INI" in msg and "YAML" in msg and line_of(msg) == 3, msg


def test_unknown_preflight_variable_refused_with_hint(tmp_path):
    msg = error_of(tmp_path, "[g]\na preflight_device=4\n")
    assert line_of(msg) == 2 and "preflight_devices" in msg


def test_non_ssh_connection_refused(tmp_path):
    msg = error_of(tmp_path, "[g]\na ansible_connection=winrm\n")
    assert line_of(msg) == 2 and "ansible_connection" in msg


# ---------------------------------------------------------------- ssh arguments

@pytest.mark.parametrize("args, want", [
    ("-J ops@bastion:2222", {"proxy_jump": "ops@bastion:2222"}),
    ("-o ProxyJump=bastion -p 2200 -i /keys/k -o User=ops", {"proxy_jump": "bastion", "port": 2200,
                                                             "identity_file": "/keys/k", "user": "ops"}),
    ("-o Port=2300 -o Port=2400", {"port": 2300}),  # OpenSSH: the first value wins
    ("-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -C -o ControlMaster=auto",
     {"host_key_policy": "off", "known_hosts": "/dev/null"}),
    ("-oProxyJump=a,b", {"proxy_jump": "a,b"}),
])
def test_ssh_common_args_honoured(tmp_path, args, want):
    node = inv_of(tmp_path, f'[g]\nn1 ansible_host=10.0.0.1\n[g:vars]\nansible_ssh_common_args="{args}"\n').nodes[0]
    for k, v in want.items():
        assert getattr(node, k) == v, (k, getattr(node, k))


def test_ansible_port_beats_the_port_in_ssh_args(tmp_path):
    """Ansible puts -o Port={ansible_port} before the common args; OpenSSH keeps the first."""
    node = inv_of(tmp_path, "[g]\nn1 ansible_port=2200 ansible_ssh_extra_args='-p 2300'\n").nodes[0]
    assert node.port == 2200


@pytest.mark.parametrize("args, says", [
    ("-o ProxyCommand=\"ssh -W %h:%p bastion\"", "ProxyCommand"),
    ("-o LocalCommand=x", "'localcommand'"),
    ("-F /etc/other", "-F"),
    ("bastion", "not an ssh option"),
])
def test_ssh_args_preflight_cannot_honour_refused(tmp_path, args, says):
    msg = error_of(tmp_path, f"[g]\nn1\n[g:vars]\nansible_ssh_common_args='{args}'\n")
    assert line_of(msg) == 4 and ": ansible_ssh_common_args: " in msg and says in msg, msg


# ---------------------------------------------------------------- hostile input (issue 29)

def test_alias_bomb_refused_quickly(tmp_path):
    """An 847-byte class of document: nine levels of nine aliases = 9**9 values if expanded."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    p = write(tmp_path, "\n".join(lines) + "\n")
    assert len(p.read_bytes()) < 1000
    t = time.monotonic()
    with pytest.raises(InventoryError, match="alias bomb"):
        load(p, ssh_config=str(tmp_path / "none"))
    assert time.monotonic() - t < 5


def test_a_few_aliases_are_fine(tmp_path):
    nodes = by_name(inv_of(tmp_path, """\
        all:
          vars: &common {ansible_user: ops}
          children:
            g: {vars: *common, hosts: {a: ~}}
        """))
    assert nodes["a"].user == "ops"


@pytest.mark.parametrize("text, line", [
    ('cluster: "demo\\nrm -rf /"\nnodes:\n  - {name: a, host: h}\n', 1),
    ('nodes:\n  - name: "a\\nb"\n    host: h\n', 2),
    ('nodes:\n  - name: "a\\n"\n    host: h\n', 2),
    ('all:\n  hosts:\n    "a\\nb": {}\n', 3),
    ('nodes:\n  - name: a\n    host: h\n    user: "ops\\n"\n', 4),
])
def test_control_characters_in_names_refused_at_load(tmp_path, text, line):
    assert line_of(error_of(tmp_path, text)) == line


def test_cli_inventory_show_names_the_variables_used(tmp_path):
    p = write(tmp_path, INI, "hosts")
    res = subprocess.run([sys.executable, "-m", "preflight.cli", "inventory", "show", str(p),
                          "--ssh-config", str(tmp_path / "none")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert f"user from ansible_user ({p}:19)" in res.stdout and f"devices from npu_num ({p}:8)" in res.stdout
    assert "billybob" not in res.stdout


def test_inventory_show_says_which_variables_it_does_not_use_never_their_values():
    """Real files: kubespray's passwords and the Ascend deployer's `ansible_connection='local'` are
    said with file:line, not dropped silently; a password's value is never printed."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "inventories"
    kube = fixtures / "kubespray_mycluster-single-online_inventory.ini"
    res = subprocess.run([sys.executable, "-m", "preflight.cli", "inventory", "show", str(kube),
                          "--ssh-config", "/nonexistent"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "ansible_ssh_pass: not used: preflight logs in with keys" in res.stdout
    assert "ansible_become_pass: not used" in res.stdout and f"({kube}:11)" in res.stdout
    for line in kube.read_text().splitlines():
        if line.startswith(("ansible_ssh_pass=", "ansible_become_pass=")):
            assert line.split("=", 1)[1].strip() not in res.stdout
    deployer = fixtures / "ascend-deployer_inventory_file"
    res = subprocess.run([sys.executable, "-m", "preflight.cli", "inventory", "show", str(deployer),
                          "--ssh-config", "/nonexistent"], capture_output=True, text=True, timeout=60)
    assert "ansible_connection: local, yet preflight still reaches this host over SSH" in res.stdout
    assert "gate --local" in res.stdout and f"({deployer}:4)" in res.stdout
