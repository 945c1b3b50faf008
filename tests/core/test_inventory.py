"""Inventory loading (preflight.inventory.load): merging, ranges, validation, errors with file:line."""
from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest

from preflight.inventory import InventoryError, load


def write(tmp_path: Path, text: str, name: str = "inv.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def inv_of(tmp_path: Path, text: str, **kw):
    """Load hermetically: never read the developer's ~/.ssh/config."""
    kw.setdefault("ssh_config", str(tmp_path / "no-ssh-config"))
    return load(write(tmp_path, text), **kw)


def error_of(tmp_path: Path, text: str, **kw) -> str:
    kw.setdefault("ssh_config", str(tmp_path / "no-ssh-config"))
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as exc:
        load(path, **kw)
    msg = str(exc.value)
    assert "\n" not in msg, f"error is not one line: {msg!r}"
    assert msg.startswith(str(path)), f"error does not name the file: {msg!r}"
    return msg


def line_of(msg: str) -> int:
    m = re.match(r"^[^:]+:(\d+)(?::\d+)?: ", msg)
    assert m, f"error does not carry a line number: {msg!r}"
    return int(m.group(1))


def by_name(inv):
    return {n.name: n for n in inv.nodes}


# ---------------------------------------------------------------- defaults and overrides

BASIC = """\
    cluster: demo
    defaults:
      user: root
      port: 2222
      devices: 16
      env: {GLOO_SOCKET_IFNAME: eth0, MASTER_PORT: "29500"}
      env_files: [/etc/a.sh, /etc/b.sh]
      paths: {data: [/data/a], checkpoint: /ckpt}
      checks:
        npu.idle: {max_hbm_used_pct: 5, other: 1}
    checks:
      storage.disk: {min_free_gib: 100, min_free_inodes: 1000}
    nodes:
      - name: node01
        host: 10.0.0.1
        port: 22
        env: {HCCL_IF_IP: 10.0.0.1, MASTER_PORT: "29600"}
        env_files: [/etc/c.sh]
        paths: {data: [/data/b]}
        checks:
          storage.disk: {min_free_gib: 10}
          npu.idle: {other: 2}
      - name: node[02-04]
        host: 10.0.0.[2-4]
    """


def test_defaults_and_overrides(tmp_path):
    inv = inv_of(tmp_path, BASIC)
    assert inv.cluster == "demo"
    nodes = by_name(inv)
    assert list(nodes) == ["node01", "node02", "node03", "node04"]
    n1, n2 = nodes["node01"], nodes["node02"]
    # scalars replace
    assert (n1.port, n2.port) == (22, 2222)
    assert n1.user == n2.user == "root" and n1.devices == n2.devices == 16
    # mappings merge key by key
    assert n1.env == {"GLOO_SOCKET_IFNAME": "eth0", "MASTER_PORT": "29600", "HCCL_IF_IP": "10.0.0.1"}
    assert n2.env == {"GLOO_SOCKET_IFNAME": "eth0", "MASTER_PORT": "29500"}
    assert n1.paths == {"data": ["/data/b"], "checkpoint": "/ckpt"}
    assert n2.paths == {"data": ["/data/a"], "checkpoint": "/ckpt"}
    # lists replace
    assert tuple(n1.env_files) == ("/etc/c.sh",)
    assert tuple(n2.env_files) == ("/etc/a.sh", "/etc/b.sh")


def test_top_level_check_parameters_merge_under_node_checks(tmp_path):
    nodes = by_name(inv_of(tmp_path, BASIC))
    n1, n2 = nodes["node01"], nodes["node02"]
    assert n1.check_params("storage.disk", {"min_free_gib": 50, "x": 0}) == \
        {"min_free_gib": 10, "min_free_inodes": 1000, "x": 0}
    assert n2.check_params("storage.disk", {"min_free_gib": 50}) == {"min_free_gib": 100, "min_free_inodes": 1000}
    assert n1.check_params("npu.idle", {}) == {"max_hbm_used_pct": 5, "other": 2}
    assert n2.check_params("npu.idle", {}) == {"max_hbm_used_pct": 5, "other": 1}


def test_builtin_defaults(tmp_path):
    n = inv_of(tmp_path, """\
        nodes:
          - {name: a, host: h}
        """).nodes[0]
    assert (n.port, n.user, n.host_key_policy, n.backend, n.devices) == (22, None, "strict", "auto", 8)
    assert (n.connect_timeout, n.probe_timeout, n.python, n.launch_shell) == (10, 60, "python3", "exec")
    assert n.ascend_home == "/usr/local/Ascend"


def test_inventory_hash_and_path(tmp_path):
    import hashlib
    inv = inv_of(tmp_path, BASIC)
    raw = (tmp_path / "inv.yaml").read_bytes()
    assert inv.sha256 == hashlib.sha256(raw).hexdigest()
    assert inv.path.endswith("inv.yaml")


# ---------------------------------------------------------------- ranges

@pytest.mark.parametrize("name, host, names, hosts", [
    ("node[01-16]", "10.0.0.[1-16]", [f"node{i:02d}" for i in range(1, 17)], [f"10.0.0.{i}" for i in range(1, 17)]),
    ("n[1-3,7]", "h[1-3,7]", ["n1", "n2", "n3", "n7"], ["h1", "h2", "h3", "h7"]),
    ("node[01:32]", "10.1.0.[1:32]", [f"node{i:02d}" for i in range(1, 33)], [f"10.1.0.{i}" for i in range(1, 33)]),
    ("node[01:10:3]", "10.0.0.[1:10:3]", ["node01", "node04", "node07", "node10"],
     ["10.0.0.1", "10.0.0.4", "10.0.0.7", "10.0.0.10"]),
    ("node[a:c]", "host-[a:c]", ["nodea", "nodeb", "nodec"], ["host-a", "host-b", "host-c"]),
])
def test_ranges_expand_in_name_and_host_together(tmp_path, name, host, names, hosts):
    inv = inv_of(tmp_path, f"""\
        nodes:
          - name: "{name}"
            host: "{host}"
        """)
    assert [n.name for n in inv.nodes] == names
    assert [n.host for n in inv.nodes] == hosts


def test_range_without_host_uses_names(tmp_path):
    inv = inv_of(tmp_path, """\
        nodes:
          - name: node[1-2]
        """)
    assert [(n.name, n.host) for n in inv.nodes] == [("node1", "node1"), ("node2", "node2")]


@pytest.mark.parametrize("name, host", [
    ("node[1:", "h"),             # unterminated
    ("node[5:1]", "h[5:1]"),      # reversed
    ("node[3-1]", "h[3-1]"),      # reversed
    ("node[01:100]", "h[1:100]"),  # mismatched padding
    ("node[1-4]", "h[1-3]"),      # name and host counts differ
    ("node[1-4]", "10.0.0.1"),    # a range of names on one address
])
def test_bad_ranges_refused(tmp_path, name, host):
    msg = error_of(tmp_path, f"""\
        nodes:
          - name: a
            host: a
          - name: "{name}"
            host: "{host}"
        """)
    assert line_of(msg) in (4, 5)


# ---------------------------------------------------------------- job

def test_job_section(tmp_path):
    inv = inv_of(tmp_path, """\
        nodes: [{name: a, host: h}]
        job: {tp: 2, pp: 4, num_layers: 32}
        """)
    assert inv.job == {"tp": 2, "pp": 4, "num_layers": 32}
    assert inv_of(tmp_path, "nodes: [{name: a, host: h}]\n").job is None


@pytest.mark.parametrize("job, key", [
    ("{tp: 2, tensor_parallel: 4}", "tensor_parallel"),
    ("{tp: 0}", "tp"),
    ("{tp: two}", "tp"),
    ("{pp: 2.5}", "pp"),
    ("[1, 2]", "job"),
])
def test_job_section_validated(tmp_path, job, key):
    msg = error_of(tmp_path, f"""\
        nodes: [{{name: a, host: h}}]
        job: {job}
        """)
    assert f": {key}: " in msg and line_of(msg) == 2


def test_job_paths_and_hccl(tmp_path):
    inv = inv_of(tmp_path, """\
        nodes: [{name: a, host: h}]
        job: {load: /ckpt/run1, save: /ckpt/run1, megatron_path: /opt/Megatron-LM, hccl: {HCCL_BUFFSIZE: 200}}
        """)
    assert inv.job["load"] == "/ckpt/run1" and inv.job["hccl"] == {"HCCL_BUFFSIZE": 200}


@pytest.mark.parametrize("job, key, text", [
    ("{lod: /ckpt}", "lod", "unknown job key (did you mean 'load'?)"),
    ("{load: ckpt/run1}", "load", "expected an absolute path"),
    ("{load: 3}", "load", "expected an absolute path"),
    ("{hccl: [HCCL_BUFFSIZE]}", "hccl", "expected a mapping of HCCL_* variable names"),
    ("{hccl: {NCCL_DEBUG: INFO}}", "NCCL_DEBUG", "job.hccl holds HCCL_* variables only"),
])
def test_job_keys_refused_with_one_line(tmp_path, job, key, text):
    msg = error_of(tmp_path, f"""\
        nodes: [{{name: a, host: h}}]
        job: {job}
        """)
    assert f": {key}: " in msg and text in msg and "\n" not in msg


# ---------------------------------------------------------------- Ansible

ANSIBLE = """\
    all:
      vars:
        ansible_user: ops
        ansible_port: 2200
        preflight_devices: 16
      children:
        npu:
          vars:
            ansible_ssh_private_key_file: /keys/id_npu
            ansible_python_interpreter: /usr/bin/python3
          hosts:
            node[01:03]:
              ansible_host: 10.0.0.[1:3]
            node09:
              ansible_host: 10.0.0.9
              ansible_user: root
              ansible_port: 22
    """


def test_ansible_inventory(tmp_path):
    nodes = by_name(inv_of(tmp_path, ANSIBLE))
    assert list(nodes) == ["node01", "node02", "node03", "node09"]
    n1, n9 = nodes["node01"], nodes["node09"]
    assert (n1.host, n1.user, n1.port, n1.identity_file, n1.devices) == ("10.0.0.1", "ops", 2200, "/keys/id_npu", 16)
    assert (n9.host, n9.user, n9.port, n9.identity_file) == ("10.0.0.9", "root", 22, "/keys/id_npu")


def test_ansible_inventory_with_hosts_and_children_everywhere(tmp_path):
    """The shape that works today: every group has both hosts: and children: non-empty (or none)."""
    nodes = by_name(inv_of(tmp_path, """\
        all:
          vars: {ansible_user: ops}
          hosts:
            login: {ansible_host: 10.0.1.1}
          children:
            npu:
              vars: {ansible_port: 2200}
              hosts:
                node[1:2]: {ansible_host: "10.0.0.[1:2]"}
                node3: {ansible_host: 10.0.0.3, ansible_port: 22, ansible_user: root}
              children:
                extra:
                  hosts:
                    node4: {ansible_host: 10.0.0.4}
                  children:
                    leaf:
                      hosts:
                        node5: {ansible_host: 10.0.0.5}
                      children:
                        empty: ~
        """))
    assert list(nodes) == ["login", "node1", "node2", "node3", "node4", "node5"]
    assert (nodes["login"].user, nodes["login"].port) == ("ops", 22)
    assert (nodes["node1"].host, nodes["node1"].user, nodes["node1"].port) == ("10.0.0.1", "ops", 2200)
    assert (nodes["node3"].user, nodes["node3"].port) == ("root", 22)       # host vars win
    assert (nodes["node5"].host, nodes["node5"].port) == ("10.0.0.5", 2200)  # inherited down two levels


def test_ansible_vars_preflight_ignores_are_not_refused(tmp_path):
    inv = inv_of(tmp_path, """\
        all:
          vars: {ansible_become: yes}
          hosts:
            a: {ansible_host: h}
          children:
            g:
              hosts:
                b: {ansible_host: h2}
              children: {x: ~}
        """)
    assert [n.name for n in inv.nodes] == ["a", "b"]


def test_ansible_host_in_two_groups_is_merged_by_ansible_precedence(tmp_path):
    """Ansible's order: all < parent < child; siblings by ansible_group_priority, then name (the
    later wins); the host's own vars over every group; a host listed twice is one node."""
    inv = inv_of(tmp_path, """\
        all:
          vars: {ansible_user: base, preflight_ascend_home: /opt/all, preflight_probe_timeout: 10}
          children:
            train:
              vars: {ansible_port: 2201, preflight_ascend_home: /opt/train, ansible_python_interpreter: /opt/train/python3}
              children:
                a3:
                  vars: {preflight_ascend_home: /opt/a3}
                  hosts:
                    n1: {ansible_host: 10.0.0.1}
            beta:
              vars: {ansible_port: 2202, ansible_user: beta, npu_num: 16}
              hosts:
                n1: {ansible_user: own}
                n2: {ansible_host: 10.0.0.2}
            zeta:
              vars: {ansible_port: 2203}
              hosts:
                n2:
            early:
              vars: {ansible_group_priority: 10, ansible_port: 2210}
              hosts:
                n3: {ansible_host: 10.0.0.3}
            late:
              vars: {ansible_port: 2299}
              hosts:
                n3:
        """)
    nodes = {n.name: n for n in inv.nodes}
    assert sorted(nodes) == ["n1", "n2", "n3"]
    n1 = nodes["n1"]
    assert n1.host == "10.0.0.1" and n1.ascend_home == "/opt/a3"          # child a3 over its parent train
    assert n1.user == "own" and n1.devices == 16 and n1.probe_timeout == 10  # host vars; beta's; all's
    assert n1.port == 2201, "train (depth 1) and beta (depth 1): 'train' sorts later, so it wins"
    assert n1.python == "/opt/train/python3"
    assert nodes["n2"].port == 2203, "siblings beta and zeta: the later name wins"
    assert nodes["n3"].port == 2210, "ansible_group_priority 10 beats the name order"


def test_ansible_unknown_group_key_refused(tmp_path):
    msg = error_of(tmp_path, """\
        all:
          host:
            a: {ansible_host: h}
        """)
    assert line_of(msg) == 2 and "host" in msg


# ---------------------------------------------------------------- validation

def test_unknown_key_with_hint_and_line(tmp_path):
    msg = error_of(tmp_path, """\
        nodes:
          - name: a
            host: h
            prot: 22
        """)
    assert line_of(msg) == 4 and ": prot: " in msg and "'port'" in msg


def test_unknown_default_key_and_top_key(tmp_path):
    msg = error_of(tmp_path, """\
        defaults:
          identity: ~/.ssh/id
        nodes: [{name: a, host: h}]
        """)
    assert line_of(msg) == 2 and "identity" in msg and "identity_file" in msg
    msg = error_of(tmp_path, """\
        nodez:
          - {name: a, host: h}
        """)
    assert line_of(msg) == 1 and "'nodes'" in msg


@pytest.mark.parametrize("entry, key", [
    ("port: twentytwo", "port"),
    ("port: 70000", "port"),
    ("devices: 8.0", "devices"),
    ("devices: [8]", "devices"),
    ("user: 0", "user"),
    ("env: [A, B]", "env"),
    ("env: {A: [1]}", "A"),
    ("env: {1A: x}", "1A"),
    ("paths: {data: 5}", "data"),
    ("paths: {scratch: /s}", "scratch"),
    ("host_key_policy: yolo", "host_key_policy"),
    ("backend: tpu", "backend"),
    ("connect_timeout: soon", "connect_timeout"),
    ("checks: {storage.disk: 5}", "storage.disk"),
    ("env_files: /etc/x.sh", "env_files"),
])
def test_wrong_types_refused(tmp_path, entry, key):
    msg = error_of(tmp_path, f"""\
        nodes:
          - name: a
            host: h
            {entry}
        """)
    assert line_of(msg) == 4 and f"{key}: " in msg


@pytest.mark.parametrize("entry, key, says", [
    ('ascend_home: "opt/Ascend"', "ascend_home", "not an absolute path"),
    ('ascend_home: "/opt/x\\n$(touch /tmp/p)"', "ascend_home", "control character"),
    ('ascend_home: "/opt/x\\x9b31m"', "ascend_home", "control character"),          # C1: an 8-bit CSI
    ('ascend_home: "/opt/\\u202eAscend"', "ascend_home", "control character"),    # a bidi override
    ("paths: {data: [/ok, relative/dir]}", "data", "not an absolute path"),
    ("paths: {checkpoint: ckpt}", "checkpoint", "not an absolute path"),
    ("env_files: [set_env.sh]", "env_files", "not an absolute path"),
    ('python: "python3 -u"', "python", "neither an absolute interpreter path nor a bare command"),
    ('python: "$(touch /tmp/p)"', "python", "neither an absolute interpreter path nor a bare command"),
    ('python: "-python3"', "python", "neither an absolute interpreter path nor a bare command"),
    ('env: {HCCL_SOCKET_IFNAME: "eth0;reboot"}', "HCCL_SOCKET_IFNAME", "not a list of interface names"),
    ('env: {GLOO_SOCKET_IFNAME: "^eth0"}', "GLOO_SOCKET_IFNAME", "not a list of interface names"),
    ('env: {NCCL_SOCKET_IFNAME: "a-name-longer-than-15"}', "NCCL_SOCKET_IFNAME", "not a list of interface names"),
    ('env: {NCCL_SOCKET_IFNAME: "eth0 eth1"}', "NCCL_SOCKET_IFNAME", "not a list of interface names"),
])
def test_values_with_a_grammar_refused_at_load(tmp_path, entry, key, says):
    """Paths, the interpreter and interface names have a grammar: a value outside it is refused
    with file:line before any node is reached (probes quote every value regardless)."""
    msg = error_of(tmp_path, f"""\
        nodes:
          - name: a
            host: h
            {entry}
        """)
    assert line_of(msg) == 4 and f"{key}: " in msg and says in msg, msg


def test_values_inside_the_grammar_load(tmp_path):
    inv = load(write(tmp_path, """\
        nodes:
          - name: a
            host: h
            ascend_home: /opt/my Ascend
            python: /opt/conda envs/bin/python3.11
            paths: {data: [/data/set 1], checkpoint: /ckpt}
            env_files: [/etc/profile.d/ascend env.sh]
            env: {HCCL_SOCKET_IFNAME: "^=docker0,lo", NCCL_SOCKET_IFNAME: "=enp1s0f0.100", GLOO_SOCKET_IFNAME: "eth0,ib0"}
          - name: b
            host: h2
            python: python3
        """))
    a, b = inv.nodes
    assert a.python == "/opt/conda envs/bin/python3.11" and b.python == "python3"
    assert a.env["HCCL_SOCKET_IFNAME"] == "^=docker0,lo" and a.data_paths == ["/data/set 1"]


@pytest.mark.parametrize("where", ["top", "node", "defaults"])
@pytest.mark.parametrize("param, value, says", [
    ("storage.disk: {min_free_gib", '"lots"}', "storage.disk expects an integer (its default is 50), got str 'lots'"),
    ("storage.disk: {write_test", "maybe}", "expects true or false"),
    ("net.ping_mesh: {interval", "fast}", "expects a number"),
    ("net.ping_mesh: {count", "2.5}", "expects an integer"),
    ("net.ports: {extra_ports", "8080}", "expects a list"),
])
def test_check_parameter_types_refused_at_load(tmp_path, where, param, value, says):
    """The type a parameter takes is its default's (DEFAULTS): a wrong one is exit 2 with
    file:line naming the key, not an internal error in the middle of a run."""
    entry = f"checks: {{{param}: {value}}}"
    top, node, defaults = (entry, "", "") if where == "top" else ("", entry, "") if where == "node" else ("", "", entry)
    text = (f"{top}\n" if top else "") + (f"defaults:\n  {defaults}\n" if defaults else "") + \
        f"nodes:\n  - name: a\n    host: h\n" + (f"    {node}\n" if node else "")
    p = tmp_path / "inv.yaml"
    p.write_text(text)
    with pytest.raises(InventoryError) as exc:
        load(p, ssh_config=str(tmp_path / "none"))
    msg = str(exc.value)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "checks:" in ln)
    key = param.split("{")[1]
    assert msg.startswith(f"{p}:{line}: {key}: ") and says in msg, msg


def test_check_parameter_types_that_fit_load(tmp_path):
    inv = load(write(tmp_path, """\
        checks:
          storage.disk: {min_free_gib: 100, write_test: false}
          net.ping_mesh: {interval: 1, count: 5}
          smoke.allreduce: {port: 29500, nodes: [a]}
        nodes: [{name: a, host: h}]
        """), ssh_config=str(tmp_path / "none"))
    assert inv.checks["net.ping_mesh"]["interval"] == 1


def test_duplicate_names_name_both_lines(tmp_path):
    msg = error_of(tmp_path, """\
        nodes:
          - name: node[01-03]
            host: 10.0.0.[1-3]
          - name: node02
            host: 10.0.0.9
        """)
    assert "node02" in msg and line_of(msg) == 4 and re.search(r"\b2\b", msg.split(":", 2)[2])


def test_duplicate_yaml_key_refused(tmp_path):
    msg = error_of(tmp_path, """\
        nodes:
          - name: a
            host: h
            host: h2
        """)
    assert line_of(msg) == 4 and "host" in msg


@pytest.mark.parametrize("text", ["nodes: []\n", "", "# only a comment\n", "cluster: x\nnodes:\n"])
def test_empty_selection_refused(tmp_path, text):
    error_of(tmp_path, text)


def test_limit(tmp_path):
    inv = inv_of(tmp_path, BASIC, limit="node[03-04]")
    assert [n.name for n in inv.nodes] == ["node03", "node04"]
    msg = error_of(tmp_path, BASIC, limit="gpu[1-2]")
    assert "no nodes selected" in msg and "gpu[1-2]" in msg


def test_limit_bad_syntax(tmp_path):
    with pytest.raises(InventoryError):
        inv_of(tmp_path, BASIC, limit="node[1-")


# ---------------------------------------------------------------- YAML traps and safety

@pytest.mark.parametrize("entry, key, shown", [
    ("port: 22:22", "port", "22:22"),
    ("env: {CANN_VERSION: 8.10}", "CANN_VERSION", "8.10"),
    ("env: {HCCL_SOCKET_IFNAME: no}", "HCCL_SOCKET_IFNAME", "no"),
    ("env: {GLOO_SOCKET_IFNAME: off}", "GLOO_SOCKET_IFNAME", "off"),
    ("devices: 010", "devices", "010"),
    ("devices: 0x1A", "devices", "hexadecimal"),
    ("port: 0b101", "port", "binary"),
    ("probe_timeout: 1_000", "probe_timeout", "underscores"),
    ("connect_timeout: 1_0.5", "connect_timeout", "underscores"),
    ("env: {HCCL_BUFFSIZE: 0x1A}", "HCCL_BUFFSIZE", "0x1A"),
    ("checks: {storage.disk: {min_free_gib: 1_000}}", "min_free_gib", "1_000"),
])
def test_yaml_11_traps_refused_asking_to_quote(tmp_path, entry, key, shown):
    msg = error_of(tmp_path, f"""\
        nodes:
          - name: a
            host: h
            {entry}
        """)
    assert line_of(msg) == 4 and key in msg and shown in msg and "quote" in msg


def test_yaml_11_traps_quoted_pass(tmp_path):
    n = inv_of(tmp_path, """\
        nodes:
          - name: a
            host: h
            devices: 10
            env: {CANN_VERSION: "8.10", HCCL_SOCKET_IFNAME: "no", PORTS: "22:22", MASK: "010", "ON": "yes",
                  ID: "0x1A", BITS: "0b101", BIG: "1_000"}
        """).nodes[0]
    assert n.env == {"CANN_VERSION": "8.10", "HCCL_SOCKET_IFNAME": "no", "PORTS": "22:22", "MASK": "010", "ON": "yes",
                     "ID": "0x1A", "BITS": "0b101", "BIG": "1_000"}
    assert n.devices == 10


def test_yaml_11_trap_in_a_key_refused(tmp_path):
    msg = error_of(tmp_path, """\
        nodes:
          - name: a
            host: h
            env: {ON: "1"}
        """)
    assert line_of(msg) == 4 and "ON" in msg and "quote" in msg


def test_plain_numbers_that_are_not_traps(tmp_path):
    n = inv_of(tmp_path, """\
        nodes:
          - name: a
            host: h
            env: {MASTER_PORT: 29500, V: 8.1, FLAG: true}
        """).nodes[0]
    assert n.env == {"MASTER_PORT": "29500", "V": "8.1", "FLAG": "true"}


def test_python_tags_refused(tmp_path):
    marker = tmp_path / "pwned"
    msg = error_of(tmp_path, f"""\
        nodes:
          - name: a
            host: !!python/object/apply:os.system ["touch {marker}"]
        """)
    assert line_of(msg) == 3 and not marker.exists()
    error_of(tmp_path, """\
        nodes: !!python/object:collections.OrderedDict {}
        """)


@pytest.mark.parametrize("text, line", [
    ("nodes:\n\t- name: a\n", 2),                    # tab indentation
    ("nodes: [ {name: a, host: h}\n", 2),             # unclosed bracket
    ("nodes:\n  - name: a\n   host: h\n", 3),         # bad indentation
])
def test_invalid_yaml_with_line_and_column(tmp_path, text, line):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(InventoryError) as exc:
        load(p, ssh_config=str(tmp_path / "none"))
    msg = str(exc.value)
    m = re.match(rf"^{re.escape(str(p))}:(\d+):(\d+): ", msg)
    assert m, msg
    assert int(m.group(1)) == line and "\n" not in msg


def test_json_document_is_an_inventory(tmp_path):
    inv = inv_of(tmp_path, '{"defaults": {"port": 2200}, "nodes": [{"name": "n[1-2]", "host": "10.0.0.[1-2]"}]}')
    assert [(n.name, n.host, n.port) for n in inv.nodes] == [("n1", "10.0.0.1", 2200), ("n2", "10.0.0.2", 2200)]


@pytest.mark.parametrize("host", ["a;rm -rf /", "a b", "$(id)", "`id`", "a|b", "-oProxyCommand=x"])
def test_malicious_hosts_refused(tmp_path, host):
    msg = error_of(tmp_path, f"""\
        nodes:
          - name: a
            host: {host!r}
        """.replace("'", '"'))
    assert line_of(msg) == 3 and "host" in msg


def test_newline_in_host_refused(tmp_path):
    msg = error_of(tmp_path, 'nodes:\n  - name: a\n    host: "a\\nrm -rf /"\n')
    assert line_of(msg) == 3 and "host" in msg


@pytest.mark.parametrize("name", ["a;b", "a b", "../x", "-x"])
def test_malicious_names_refused(tmp_path, name):
    error_of(tmp_path, f'nodes:\n  - name: "{name}"\n    host: h\n')


def test_env_values_kept_literally(tmp_path):
    p = tmp_path / "inv.yaml"
    p.write_text("nodes:\n  - name: a\n    host: h\n    env:\n"
                 "      SPACES: \"a b  c\"\n"
                 "      QUOTES: \"it's \\\"q\\\"\"\n"
                 "      SUBST: \"$(rm -rf /) `id` ${HOME}\"\n"
                 "      SEMI: \"x; reboot\"\n")
    n = load(p, ssh_config=str(tmp_path / "none")).nodes[0]
    assert n.env == {"SPACES": "a b  c", "QUOTES": "it's \"q\"", "SUBST": "$(rm -rf /) `id` ${HOME}",
                     "SEMI": "x; reboot"}


# ---------------------------------------------------------------- ~/.ssh/config

SSH_CONFIG = """\
Host alias1
  HostName 10.1.1.1
  User cfguser
  Port 2022
  IdentityFile /keys/cfgkey
  UserKnownHostsFile /kh/cfg_known
Host *
  User star
"""


def test_ssh_config_precedence(tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text(SSH_CONFIG)
    inv = load(write(tmp_path, """\
        nodes:
          - name: from-config
            host: alias1
          - name: from-inventory
            host: alias1
            user: inv
            port: 2300
            identity_file: /keys/invkey
            known_hosts: /kh/inv_known
          - name: builtin
            host: other
        """), ssh_config=str(cfg))
    nodes = by_name(inv)
    c, i, b = nodes["from-config"], nodes["from-inventory"], nodes["builtin"]
    assert (c.host, c.user, c.port, c.identity_file, c.known_hosts) == \
        ("10.1.1.1", "cfguser", 2022, "/keys/cfgkey", "/kh/cfg_known")
    assert (i.host, i.user, i.port, i.identity_file, i.known_hosts) == \
        ("10.1.1.1", "inv", 2300, "/keys/invkey", "/kh/inv_known")
    assert (b.host, b.user, b.port, b.identity_file) == ("other", "star", 22, None)


def test_defaults_section_beats_ssh_config(tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text(SSH_CONFIG)
    n = load(write(tmp_path, """\
        defaults: {user: fromdefaults, port: 2400}
        nodes: [{name: a, host: alias1}]
        """), ssh_config=str(cfg)).nodes[0]
    assert (n.host, n.user, n.port) == ("10.1.1.1", "fromdefaults", 2400)


def test_missing_ssh_config_is_fine(tmp_path):
    n = inv_of(tmp_path, "nodes: [{name: a, host: alias1}]\n").nodes[0]
    assert (n.host, n.user, n.port) == ("alias1", None, 22)


# ---------------------------------------------------------------- files

def test_missing_file(tmp_path):
    p = tmp_path / "nope.yaml"
    with pytest.raises(InventoryError) as exc:
        load(p)
    assert str(p) in str(exc.value) and "No such file" in str(exc.value)


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(InventoryError) as exc:
        load(tmp_path)
    assert str(tmp_path) in str(exc.value) and "cannot read" in str(exc.value)


def _load_as(uid: int, gid: int, path: Path) -> str:
    """load(path) in a forked child that has dropped to uid/gid (no new interpreter: the one
    running the tests may live where that user cannot read). Returns "ok" or the error line."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root for good, try, report, leave without cleanup handlers
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            try:
                load(path, ssh_config="/nonexistent")
                msg = "ok"
            except InventoryError as exc:
                msg = str(exc)
            os.write(w, msg.encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    os.waitpid(pid, 0)
    return out


def test_unreadable_file(tmp_path):
    """As an unprivileged user (root reads any file): a 0000 inventory is a one-line error naming
    it; the same file at 0644 loads, so the refusal is the file's mode and not the directory."""
    import pwd
    import tempfile

    if os.geteuid() == 0:
        who = pwd.getpwnam("nobody")
        uid, gid = who.pw_uid, who.pw_gid
        run = lambda path: _load_as(uid, gid, path)  # noqa: E731
    else:
        def run(path):
            try:
                load(path, ssh_config="/nonexistent")
                return "ok"
            except InventoryError as exc:
                return str(exc)
    folder = Path(tempfile.mkdtemp(prefix="pf-unreadable-"))  # not under root's 0700 pytest dir
    try:
        folder.chmod(0o755)
        p = folder / "inv.yaml"
        p.write_text("nodes: [{name: a, host: h}]\n")
        p.chmod(0o644)
        assert run(p) == "ok"
        p.chmod(0)
        msg = run(p)
        assert msg.startswith(f"{p}: cannot read inventory") and "Permission denied" in msg, msg
    finally:
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()


def test_not_utf8(tmp_path):
    p = tmp_path / "inv.yaml"
    p.write_bytes(b"nodes:\n  - name: \xff\xfe\n")
    with pytest.raises(InventoryError) as exc:
        load(p)
    assert "UTF-8" in str(exc.value)


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n"])
def test_wrong_shape(tmp_path, text):
    msg = error_of(tmp_path, text)
    assert "YAML" in msg and "INI" in msg and "line 1" in msg, msg


def test_a_bare_name_is_an_ini_inventory_as_ansible_reads_it(tmp_path):
    """`42` is no YAML inventory (a number) but a valid Ansible INI one: host 42 in ungrouped."""
    assert [(n.name, n.host) for n in inv_of(tmp_path, "42\n").nodes] == [("42", "42")]


def test_node_entry_not_a_mapping(tmp_path):
    msg = error_of(tmp_path, "nodes:\n  - node01\n")
    assert "nodes" in msg
