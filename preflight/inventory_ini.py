"""Ansible's INI inventory format, read as ansible-core's ini plugin reads it
(ansible/plugins/inventory/ini.py; docs.ansible.com "How to build your inventory").

Lines before any section are hosts of `ungrouped`; `[g]` holds hosts with inline `key=value`
variables, `[g:vars]` one `key=value` a line, `[g:children]` one group name a line; `#` and `;`
start a comment line, `#` also ends a host line (shlex). Values are typed as Ansible types them:
Python literal syntax (`ast.literal_eval`: 22 is an int, 'x' a string, True a boolean, [1, 2] a
list), anything else the text as written (`yes` stays the string "yes").
"""
from __future__ import annotations

import ast
import re
import shlex
import warnings
from typing import Any

from .inventory_ansible import Source, Var, _host

# ansible's ini plugin: a section is [name] or [name:tag], a trailing # comment allowed
_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$")
_GROUPNAME = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?$")
COMMENT = (";", "#")


def parse_value(text: str) -> Any:
    """ini.py _parse_value: a Python literal when it is one, else the text itself."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    if value is ... or isinstance(value, (complex, bytes)):  # types Ansible turns back into text
        return text if isinstance(value, bytes) else str(value) if value is not ... else "..."
    return value


def read(path: str, text: str) -> Source:
    """Raises InventoryError at the first line Ansible would refuse, with its line number."""
    src = Source(path, "ini")
    src.group("ungrouped", 0)
    group, state = "ungrouped", "hosts"
    pending: dict[str, tuple[str, int, list[str]]] = {}  # group -> (state, line, parents)
    declared = {"all", "ungrouped"}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in COMMENT:
            continue
        m = _SECTION.match(line)
        if m:
            group, state = m.group(1), m.group(2) or "hosts"
            if state not in ("hosts", "children", "vars"):
                raise src.fail(number, f"section [{group}:{state}] has unknown type {state!r} (hosts, children, vars)")
            src.group(group, number)
            if state != "vars":
                declared.add(group)
                pending.pop(group, None)
            elif group not in declared and group not in pending:
                pending[group] = ("vars", number, [])
            continue
        if line.startswith("[") and line.endswith("]"):
            raise src.fail(number, f"invalid section {line!r}: no spaces, and [group], [group:vars] or "
                                   f"[group:children]")
        if state == "hosts":
            src.groups[group].hosts.append(_host_line(src, line, number))
        elif state == "vars":
            if "=" not in line:
                raise src.fail(number, f"expected key=value in [{group}:vars], got {line!r}")
            k, v = (e.strip() for e in line.split("=", 1))
            src.groups[group].vars[k] = Var(parse_value(v), number)
        else:
            gm = _GROUPNAME.match(line)
            if not gm:
                raise src.fail(number, f"expected a group name in [{group}:children], got {line!r}")
            child = gm.group(1)
            if child not in src.groups[group].children:
                src.groups[group].children.append(child)
            if child not in declared:
                pending.setdefault(child, ("children", number, []))[2].append(group)
    for name, (state, number, parents) in pending.items():
        if state == "vars":
            raise src.fail(number, f"section [{name}:vars] is for a group defined nowhere in this file")
        raise src.fail(number, f"section [{parents[-1]}:children] names group {name!r}, defined nowhere in this file")
    return src


def _host_line(src: Source, line: str, number: int):
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError as exc:
        raise src.fail(number, f"cannot read host line {line!r}: {exc}") from None
    if not tokens:
        raise src.fail(number, f"no host name in {line!r}")
    pattern = tokens[0]
    if pattern.endswith(":") and not pattern.endswith("]:"):
        raise src.fail(number, f"host {pattern!r} ends in ':' (reserved for a port)")
    if pattern == "---":
        raise src.fail(number, "'---' is not a host: this looks like a YAML file")
    variables: dict[str, Var] = {}
    for t in tokens[1:]:
        if "=" not in t:
            raise src.fail(number, f"expected key=value after host {pattern}, got {t!r}")
        k, v = t.split("=", 1)
        variables[k] = Var(parse_value(v), number)
    return _host(src, pattern, variables, number)
