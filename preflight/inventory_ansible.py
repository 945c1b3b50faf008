"""Ansible inventories (INI or YAML) by Ansible's own rules: groups, hosts, variables, precedence.

Both readers (inventory_ini for INI, `from_yaml` here for YAML) produce the same `Source`; `resolve`
then gives each host the variables Ansible would give it (docs.ansible.com "How variables are
merged"; ansible/inventory/helpers.py sort_groups): groups from `all` down, a parent before its
children (depth = the longest path from `all`), equal depths by `ansible_group_priority` (default 1,
higher wins) then by name (the later wins), the host's own variables last, later lines over earlier
ones. Values replace (Ansible's default hash_behaviour=replace), mappings included.

What a variable means to preflight is `settings` below: Ansible's connection variables and
preflight's own `preflight_*` variables; every other variable belongs to some other tool.
"""
from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from typing import Any

from . import sshargs
from .errors import InventoryError


@dataclass
class Var:
    value: Any
    line: int
    trap: str | None = None  # a YAML 1.1 coercion, refused only if preflight reads the variable


@dataclass
class HostDef:
    pattern: str
    names: list[str]
    vars: dict[str, Var]
    line: int
    # preflight's one extension: node[01:03] with ansible_host 10.0.0.[1:3] pairs them in order
    per_name: dict[str, dict[str, Var]] = field(default_factory=dict)


@dataclass
class Group:
    name: str
    line: int
    vars: dict[str, Var] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)
    hosts: list[HostDef] = field(default_factory=list)


@dataclass
class Host:
    """One host after Ansible's merge: its variables and where each came from."""

    name: str
    line: int
    vars: dict[str, Var]
    pattern_line: int = 0


class Source:
    """The groups of one inventory file, `all` always among them."""

    def __init__(self, path: str, fmt: str) -> None:
        self.path, self.fmt = path, fmt
        self.groups: dict[str, Group] = {"all": Group("all", 0)}

    def group(self, name: str, line: int) -> Group:
        g = self.groups.get(name)
        if g is None:
            g = self.groups[name] = Group(name, line)
        return g

    def fail(self, line: int | None, message: str) -> InventoryError:
        return InventoryError(f"{self.path}:{line}: {message}" if line else f"{self.path}: {message}")


# ---------------------------------------------------------------- host patterns, as Ansible reads them

# ansible/parsing/utils/addresses.py: a port after a bracketed address, or after a name whose
# brackets are ranges; an IPv6 address takes a port only in brackets.
_BRACKETED_HOSTPORT = re.compile(r"^\[(.+)\]:([0-9]+)$")
_HOSTPORT = re.compile(r"^((?:[^:\[\]]|\[[^\]]*\])*):([0-9]+)$")


def expand_pattern(pattern: str) -> tuple[list[str], int | None]:
    """`node[01:03]:2222` -> (['node01', 'node02', 'node03'], 2222). Raises ValueError (Ansible's
    reason) for a range Ansible refuses."""
    host, port = pattern, None
    for rx in (_BRACKETED_HOSTPORT, _HOSTPORT):
        m = rx.match(host)
        if m:
            host, port = m.group(1), int(m.group(2))
    if "[" not in host:
        return [host], port
    from .nodeset import bounded

    bounded(host)
    return _expand_range(host), port


def _expand_range(line: str) -> list[str]:
    """ansible/plugins/inventory/__init__.py expand_hostname_range: the first [beg:end(:step)] expanded,
    then the rest; zero-padded when `beg` starts with 0; one letter ranges [a:f]."""
    if line.count("[") < 1 or "]" not in line:
        raise ValueError(f"unbalanced brackets in {line!r}")
    head, rest = line.split("[", 1)
    nrange, tail = rest.split("]", 1)
    bounds = nrange.split(":")
    if len(bounds) not in (2, 3):
        raise ValueError(f"host range [{nrange}] must be begin:end or begin:end:step")
    beg, end = bounds[0] or "0", bounds[1]
    step = bounds[2] if len(bounds) == 3 else "1"
    if not end:
        raise ValueError(f"host range [{nrange}] must specify an end value")
    width = len(beg) if beg[0] == "0" and len(beg) > 1 else 0
    if width and width != len(end):
        raise ValueError(f"host range [{nrange}] must have begin and end of equal length")
    try:
        if not step.isdigit() or int(step) < 1:
            raise ValueError
        if beg in string.ascii_letters and end in string.ascii_letters and len(beg) == len(end) == 1:
            i, j = string.ascii_letters.index(beg), string.ascii_letters.index(end)
            if i > j:
                raise ValueError(f"host range [{nrange}] must have begin <= end")
            seq = list(string.ascii_letters[i:j + 1:int(step)])
        else:
            seq = [str(x).zfill(width) for x in range(int(beg), int(end) + 1, int(step))]
    except ValueError as exc:
        raise ValueError(str(exc) or f"host range [{nrange}] is not numeric or one letter to one letter") from None
    out: list[str] = []
    for s in seq:
        name = head + s + tail
        out.extend(_expand_range(name) if "[" in name else [name])
    return out


# ---------------------------------------------------------------- YAML

GROUP_KEYS = ("hosts", "children", "vars")


def from_yaml(path: str, doc: Any) -> Source:
    """Ansible's YAML inventory plugin (ansible/plugins/inventory/yaml.py): every top-level key is a
    group (`all:` or not); a group holds hosts:, children:, vars:; `hosts: name` is `{name: ~}`."""
    src = Source(path, "yaml")

    def lines(m: Any) -> dict[str, int]:
        return getattr(m, "lines", {})

    def variables(m: Any, where: str, line: int) -> dict[str, Var]:
        if m is None:
            return {}
        if not isinstance(m, dict):
            raise src.fail(line, f"{where}: expected a mapping of variables")
        ln, traps = lines(m), getattr(m, "traps", {})
        return {str(k): Var(v, ln.get(k, line), traps.get(k)) for k, v in m.items()}

    def walk(name: str, body: Any, line: int, parent: str | None) -> None:
        g = src.group(name, line)
        if parent and name not in src.groups[parent].children:
            src.groups[parent].children.append(name)
        if body is None:
            return
        if not isinstance(body, dict):
            raise src.fail(line, f"group {name!r} must be a mapping with hosts, children or vars")
        ln = lines(body)
        for key in body:
            if key not in GROUP_KEYS:
                raise src.fail(ln.get(key, line), f"{key}: unknown key in Ansible group {name!r} (hosts, children, vars)")
        g.vars.update(variables(body.get("vars"), f"group {name} vars", ln.get("vars", line)))
        hosts = body.get("hosts")
        if isinstance(hosts, str):
            hosts = {hosts: None}
        if hosts is not None and not isinstance(hosts, dict):
            raise src.fail(ln.get("hosts", line), f"hosts of group {name!r}: expected a mapping of host name to vars")
        for pattern, hvars in (hosts or {}).items():
            hline = lines(hosts).get(pattern, ln.get("hosts", line))
            if not isinstance(pattern, str):
                raise src.fail(hline, f"host {pattern!r}: quote host names that look like numbers")
            g.hosts.append(_host(src, pattern, variables(hvars, f"host {pattern}", hline), hline))
        children = body.get("children")
        if isinstance(children, str):
            children = {children: None}
        if children is not None and not isinstance(children, dict):
            raise src.fail(ln.get("children", line), f"children of group {name!r}: expected a mapping of group names")
        for child, sub in (children or {}).items():
            walk(str(child), sub, lines(children).get(child, line), name)

    for name, body in doc.items():
        walk(str(name), body, lines(doc).get(name, 1), None)
    return src


def _host(src: Source, pattern: str, hvars: dict[str, Var], line: int) -> HostDef:
    try:
        names, port = expand_pattern(pattern.strip())
    except ValueError as exc:
        raise src.fail(line, f"{pattern}: {exc}") from None
    if port is not None:  # Ansible sets the pattern's port as the host's ansible_port, before its inline vars
        hvars = {"ansible_port": Var(port, line), **hvars}
    per_name: dict[str, dict[str, Var]] = {}
    address = hvars.get("ansible_host")
    if len(names) > 1 and address is not None and isinstance(address.value, str) and "[" in address.value:
        from . import nodeset
        try:
            addresses = nodeset.expand(address.value)
        except nodeset.RangeError as exc:
            raise src.fail(address.line, f"ansible_host: {exc}") from None
        if len(addresses) != len(names):
            raise src.fail(line, f"{pattern} expands to {len(names)} names but its ansible_host to {len(addresses)}")
        per_name = {n: {"ansible_host": Var(a, address.line)} for n, a in zip(names, addresses)}
    return HostDef(pattern, names, hvars, line, per_name)


# ---------------------------------------------------------------- Ansible's merge

def resolve(src: Source) -> list[Host]:
    """Every host with the variables Ansible gives it, in the order hosts first appear."""
    parents: dict[str, set[str]] = {n: set() for n in src.groups}
    for g in src.groups.values():
        for c in g.children:
            if c == g.name:
                raise src.fail(g.line, f"group {c!r} cannot be its own child")
            src.group(c, g.line)
            parents.setdefault(c, set()).add(g.name)
    for name, ps in parents.items():
        if name != "all" and not ps:
            ps.add("all")
    depth: dict[str, int] = {"all": 0}

    def depth_of(name: str, seen: tuple[str, ...] = ()) -> int:
        if name in seen:
            raise src.fail(src.groups[name].line, f"group {name!r} is its own ancestor ({' > '.join(seen + (name,))})")
        if name not in depth:
            depth[name] = 1 + max(depth_of(p, seen + (name,)) for p in parents[name])
        return depth[name]

    def ancestors(name: str, out: set[str]) -> set[str]:
        if name not in out:
            out.add(name)
            for p in parents[name]:
                ancestors(p, out)
        return out

    def priority(g: Group) -> int:
        v = g.vars.get("ansible_group_priority")
        if v is None:
            return 1
        if v.trap:
            raise src.fail(v.line, f"ansible_group_priority: {v.trap}")
        try:
            return int(v.value) if not isinstance(v.value, bool) else 1 // 0
        except (TypeError, ValueError, ZeroDivisionError):
            raise src.fail(v.line, f"ansible_group_priority of group {g.name}: expected an integer, "
                                   f"got {v.value!r}") from None

    places: dict[str, list[tuple[str, HostDef]]] = {}
    for g in src.groups.values():
        for h in g.hosts:
            for n in h.names:
                places.setdefault(n, []).append((g.name, h))
    order = sorted(places, key=lambda n: min(h.line for _, h in places[n]))
    out = []
    for name in order:
        member: set[str] = set()
        for gname, _ in places[name]:
            ancestors(gname, member)
        merged: dict[str, Var] = {}
        for g in sorted((src.groups[n] for n in member), key=lambda g: (depth_of(g.name), priority(g), g.name)):
            merged.update(g.vars)
        defs = sorted((h for _, h in places[name]), key=lambda h: h.line)
        for h in defs:
            merged.update(h.vars)
            merged.update(h.per_name.get(name, {}))
        out.append(Host(name, defs[0].line, merged, defs[0].line))
    return out


# ---------------------------------------------------------------- what the variables mean to preflight

# Ansible's connection variables -> preflight's node keys (docs.ansible.com "Connecting to hosts:
# behavioral inventory parameters"; the ansible_ssh_* spellings are Ansible's older aliases).
CONNECTION_VARS: dict[str, str] = {
    "ansible_host": "host", "ansible_ssh_host": "host",
    "ansible_port": "port", "ansible_ssh_port": "port",
    "ansible_user": "user", "ansible_ssh_user": "user", "ansible_remote_user": "user",
    "ansible_ssh_private_key_file": "identity_file", "ansible_private_key_file": "identity_file",
    "ansible_become_user": "become_user",
    "ansible_python_interpreter": "python",
    "ansible_timeout": "connect_timeout", "ansible_ssh_timeout": "connect_timeout",
}
SSH_ARG_VARS = ("ansible_ssh_common_args", "ansible_ssh_extra_args")  # OpenSSH takes the first value given
BECOME, BECOME_METHOD = "ansible_become", "ansible_become_method"
CONNECTION = "ansible_connection"
# ansible_connection values that reach the host over SSH; `local` is this host (preflight: SSH to it,
# or `gate --local`). Others (winrm, docker, kubectl ...) are not SSH and are refused.
SSH_CONNECTIONS = ("ssh", "smart", "paramiko", "paramiko_ssh", "ansible.builtin.ssh", "ansible.builtin.paramiko_ssh",
                   "local", "ansible.builtin.local")
# Interpreter discovery modes (Ansible "Interpreter Discovery"): preflight keeps its own default then.
AUTO_INTERPRETERS = ("auto", "auto_legacy", "auto_silent", "auto_legacy_silent")
# Variables an operator may expect preflight to use and that it does not, said by `inventory show`
# rather than dropped silently (their values are never printed: they are passwords).
_KEYS_ONLY = ("not used: preflight logs in with keys (ssh-agent or an identity file) and becomes root "
              "with sudo -n, never with a password")
UNUSED_VARS: dict[str, str] = {var: _KEYS_ONLY for var in (
    "ansible_password", "ansible_ssh_pass", "ansible_ssh_password", "ansible_become_pass",
    "ansible_become_password", "ansible_sudo_pass", "ansible_sudo_password")}
LOCAL_UNUSED = ("local, yet preflight still reaches this host over SSH at its address; "
                "on the host itself, `preflight gate --local` runs without SSH")


def not_used(host: Host) -> list[tuple[str, str, int]]:
    """(variable, why preflight does not use it, line) for this host, for `inventory show`."""
    out = [(var, why, host.vars[var].line) for var, why in UNUSED_VARS.items() if var in host.vars]
    c = host.vars.get(CONNECTION)
    if c is not None and str(c.value) in ("local", "ansible.builtin.local"):
        out.append((CONNECTION, LOCAL_UNUSED, c.line))
    return out


# Well-known variables of Huawei's Ascend deployer (ascend-deployer inventory_file) that mean a
# preflight setting: npu_num, the NPU count it checks a node against.
ASCEND_DEPLOYER_VARS: dict[str, str] = {"npu_num": "devices"}
NUMBER_KEYS = ("port", "devices", "connect_timeout")
PREFIX = "preflight_"  # preflight's own variables in an Ansible inventory: preflight_<node key>
_JINJA = re.compile(r"\{\{|\{%|\{#")


@dataclass
class Setting:
    """One preflight setting taken from an Ansible variable."""

    key: str       # preflight's node key
    value: Any
    var: str       # the variable's own name, for messages
    line: int


def settings(src: Source, host: Host, node_keys: set[str]) -> dict[str, Setting]:
    """The preflight settings this host's variables give, each with its variable and line. Within one
    setting: preflight_<key> over Ansible's connection variable over ssh arguments."""
    out: dict[str, Setting] = {}
    v = host.vars

    def take(key: str, var: str, value: Any, line: int) -> None:
        jinja(var, value, line)
        if key in NUMBER_KEYS and isinstance(value, str) and value.strip().isdigit():
            value = int(value)  # Ansible hands the text to ssh (-o Port=2200): digits are the number
        out[key] = Setting(key, value, var, line)

    def jinja(var: str, value: Any, line: int) -> None:
        if isinstance(value, str) and _JINJA.search(value):
            raise src.fail(line, f"{var}: {value!r} is a Jinja template; preflight does not evaluate templates "
                                 f"(write the value itself)")

    def trap(var: str) -> None:
        if v[var].trap:
            raise src.fail(v[var].line, f"{var}: {v[var].trap}")

    for var in reversed(SSH_ARG_VARS):  # extra first, so that common (earlier on ssh's line) wins
        if var in v:
            trap(var)
            jinja(var, v[var].value, v[var].line)
            for key, value in sshargs.parse(v[var].value, var, lambda msg, _l=v[var].line: src.fail(_l, msg)).items():
                take(key, var, value, v[var].line)
    for var, key in CONNECTION_VARS.items():
        if var in v and key not in {s.key for s in out.values() if s.var in CONNECTION_VARS}:
            trap(var)
            if key == "python" and v[var].value in AUTO_INTERPRETERS:
                continue
            take(key, var, v[var].value, v[var].line)
    if CONNECTION in v and str(v[CONNECTION].value) not in SSH_CONNECTIONS:
        raise src.fail(v[CONNECTION].line, f"{CONNECTION}: {v[CONNECTION].value!r}: preflight reaches nodes over "
                                           f"SSH only ({', '.join(SSH_CONNECTIONS[:3])} or local)")
    if BECOME_METHOD in v and v[BECOME_METHOD].value != "sudo":
        raise src.fail(v[BECOME_METHOD].line, f"{BECOME_METHOD}: {v[BECOME_METHOD].value!r}: preflight becomes root "
                                              f"with sudo only (sudo -n, never a password prompt)")
    if BECOME in v:
        flag = v[BECOME].value
        if isinstance(flag, str) and flag.lower() in ("true", "false", "yes", "no", "on", "off", "1", "0"):
            flag = flag.lower() in ("true", "yes", "on", "1")
        if isinstance(flag, int) and not isinstance(flag, bool) and flag in (0, 1):
            flag = bool(flag)
        if not isinstance(flag, bool):
            raise src.fail(v[BECOME].line, f"{BECOME}: expected true or false, got {v[BECOME].value!r}")
        take("become", BECOME, "sudo" if flag else "none", v[BECOME].line)
    for var, key in ASCEND_DEPLOYER_VARS.items():
        if var in v:
            trap(var)
            take(key, var, v[var].value, v[var].line)
    for var in v:
        if var.startswith(PREFIX) and var[len(PREFIX):] in node_keys:
            trap(var)
            take(var[len(PREFIX):], var, v[var].value, v[var].line)
        elif var.startswith(PREFIX):
            import difflib
            close = difflib.get_close_matches(var[len(PREFIX):], sorted(node_keys), n=1, cutoff=0.7)
            raise src.fail(v[var].line, f"{var}: not a preflight variable" +
                           (f" (did you mean {PREFIX}{close[0]}?)" if close else
                            f" (known: {', '.join(PREFIX + k for k in sorted(node_keys))})"))
    return out
