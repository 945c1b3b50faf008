"""`preflight fix`: per-node scripts that correct what the launch-environment and port checks found
wrong, and the scripts that put every previous value back.

What it may touch, and nothing else:
  * a variable env.comm failed (HCCL_IF_IP, HCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME) where one of
    the node's own `env_files` assigns it: that line gets the training NIC's value (the NIC that
    HCCL_IF_IP is on, else the one MASTER_ADDR routes through); the file is replaced atomically
    (temp file + rename, mode and owner kept) and only if it still holds the bytes that were read;
  * HCCL's host port range that net.ports found inside the ephemeral range and not reserved:
    `net.ipv4.ip_local_reserved_ports` gains the range (root: sudo -n when the login is not root).
A variable set by the inventory's own `env:` or nowhere preflight can see, and a port held by a
process, are reported as manual steps: the fix never edits the inventory and never kills anything.
The rollback script restores the files byte for byte (base64 of what was read) and the sysctl's
previous text.
"""
from __future__ import annotations

import base64
import hashlib
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..checks import env_comm, net_ports
from ..net import iproute

FIXED_VARS = ("HCCL_IF_IP", "HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
RESERVED = "/proc/sys/net/ipv4/ip_local_reserved_ports"
READ_MARK = "@@preflight-file"


@dataclass(frozen=True)
class Step:
    what: str
    apply: str  # shell text
    rollback: str
    root: bool = False


@dataclass
class NodeFix:
    node: str
    steps: list[Step] = field(default_factory=list)
    manual: list[str] = field(default_factory=list)

    def script(self, rollback: bool = False) -> str:
        steps = list(reversed(self.steps)) if rollback else self.steps
        kind = "rollback" if rollback else "fix"
        lines = ["#!/bin/sh", f"# preflight {kind} for {self.node}: " +
                 ("restores every value the fix changed" if rollback else "corrects what the checks found"),
                 "set -eu"]
        for s in steps:
            lines += [f"# {s.what}", s.rollback if rollback else s.apply]
        lines.append(f"echo 'preflight: {kind} done on {self.node}'")
        return "\n".join(lines) + "\n"

    @property
    def needs_root(self) -> bool:
        return any(s.root for s in self.steps)


# ---------------------------------------------------------------- reading the env files

def read_command(paths: list[str]) -> str:
    """Each file's bytes as base64, framed, so the rollback can restore them exactly."""
    parts = []
    for p in paths:
        parts.append(f"echo {READ_MARK} {shlex.quote(p)}; "
                     f"if [ -f {shlex.quote(p)} ] && [ ! -L {shlex.quote(p)} ]; then base64 -w0 < {shlex.quote(p)}; "
                     f"else echo '!notregular'; fi; echo")
    parts.append(f"echo {READ_MARK} {shlex.quote(RESERVED)}; cat {RESERVED}")
    return "; ".join(parts)


def parse_read(text: str) -> dict[str, bytes | None]:
    """path -> bytes (None when not a regular file). The sysctl comes back as its text."""
    out: dict[str, bytes | None] = {}
    for chunk in text.split(READ_MARK + " ")[1:]:
        head, _, body = chunk.partition("\n")
        path = shlex.split(head)[0] if head.strip() else ""
        body = body.rstrip("\n")
        if path == RESERVED:
            out[path] = body.encode()
        elif body.startswith("!notregular"):
            out[path] = None
        else:
            out[path] = base64.b64decode(body) if body else b""
    return out


# ---------------------------------------------------------------- deciding

def training_nic(facts: env_comm.Facts, backend: str) -> tuple[str | None, str | None]:
    """(interface, address) the job should use: where HCCL_IF_IP is, else where MASTER_ADDR routes,
    else the check's own choice."""
    ip = facts.env.get("HCCL_IF_IP", "").strip()
    owner = iproute.owner(facts.interfaces, ip) if ip else None
    if owner is not None and owner.up and not owner.loopback:
        return owner.name, ip
    if facts.master_route is not None and facts.master_route.dev:
        iface = facts.iface(facts.master_route.dev)
        if iface is not None and iface.addresses(facts.family) and not iface.loopback:
            return iface.name, iface.addresses(facts.family)[0].ip
    comm = facts.comm(backend)
    return comm.iface, comm.ip


RULES = {"HCCL_IF_IP": env_comm.rule_if_ip, "HCCL_SOCKET_IFNAME": env_comm.rule_prefix_ifname("HCCL_SOCKET_IFNAME"),
         "GLOO_SOCKET_IFNAME": env_comm.rule_gloo}


def wrong_vars(facts: env_comm.Facts, params: Mapping[str, Any], node) -> dict[str, str]:
    """Variable -> env.comm's message, for the variables whose own rule fails."""
    out = {}
    for var, rule in RULES.items():
        bad = [p for p in rule(facts, params, node) if p.status.value == "fail"]
        if bad:
            out[var] = bad[0].message
    return out


def assignment(var: str) -> re.Pattern[str]:
    """One plain assignment on its own line: `[export ]VAR=value [# comment]`."""
    return re.compile(rf"^(?P<lead>\s*(?:export\s+)?){var}=(?:'[^']*'|\"[^\"]*\"|[^\s;&|#]*)(?P<tail>\s*(?:#.*)?)$", re.M)


def edit(content: bytes, var: str, value: str) -> bytes | None:
    """The file with every plain assignment of var set to value; None when it has none."""
    text = content.decode("utf-8", errors="surrogateescape")
    rx = assignment(var)
    if not rx.search(text):
        return None
    new = rx.sub(lambda m: f"{m['lead']}{var}={shlex.quote(value)}{m['tail']}", text)
    return new.encode("utf-8", errors="surrogateescape")


def _replace_file(path: str, old: bytes, new: bytes) -> str:
    """Shell that swaps path's bytes old -> new atomically, refusing a link, a non-file or a changed file."""
    p = shlex.quote(path)
    return "\n".join([
        f"f={p}",
        'if [ -L "$f" ] || [ ! -f "$f" ]; then echo "preflight: $f is not a regular file; not touched" >&2; exit 1; fi',
        f'if [ "$(sha256sum < "$f" | cut -d" " -f1)" != {hashlib.sha256(old).hexdigest()} ]; then '
        'echo "preflight: $f changed since it was read; not touched" >&2; exit 1; fi',
        't=$(mktemp "$f.preflight.XXXXXX")',
        f"printf '%s' {shlex.quote(base64.b64encode(new).decode())} | base64 -d > \"$t\"",
        'chmod --reference="$f" "$t"; chown --reference="$f" "$t" 2>/dev/null || true',
        'mv -f "$t" "$f"',
    ])


def _sysctl(value: str) -> str:
    return f"sysctl -q -w net.ipv4.ip_local_reserved_ports={shlex.quote(value)}"


def plan_node(node, comm: env_comm.Facts, ports: net_ports.Facts | None, files: Mapping[str, bytes | None]) -> NodeFix:
    """What to change on one node, from its facts and the bytes of its env files."""
    fix = NodeFix(node.name)
    backend = "nvidia" if node.backend == "nvidia" else "ascend"
    params = node.check_params(env_comm.ID, env_comm.DEFAULTS)
    iface, ip = training_nic(comm, backend)
    want = {"HCCL_IF_IP": ip, "HCCL_SOCKET_IFNAME": f"={iface}" if iface else None, "GLOO_SOCKET_IFNAME": iface}
    contents = {p: files.get(p) for p in node.env_files}
    for var, why in wrong_vars(comm, params, node).items():
        why = why.split("; interfaces:")[0]  # the interface list is in env.comm's own result
        value = want[var]
        if var in node.env:
            fix.manual.append(f"{var} comes from the inventory's env for {node.name} ({why}): set it to {value} there")
            continue
        holder = next((p for p in reversed(node.env_files) if contents.get(p) and assignment(var).search(
            contents[p].decode("utf-8", "surrogateescape"))), None)  # the last file that assigns it wins
        if value is None or holder is None:
            fix.manual.append(f"{var}: {why}; no env file of {node.name} assigns it" + (f" (set {var}={value})" if value else ""))
            continue
        old = contents[holder]
        new = edit(old, var, value)
        contents[holder] = new
        fix.steps.append(Step(f"{holder}: {var}={value} ({why})", _replace_file(holder, old, new),
                              _replace_file(holder, new, old)))
    if ports is not None and ports.sysctl is not None and RESERVED in files:
        nparams = node.check_params(net_ports.ID, net_ports.DEFAULTS)
        planned, _ = net_ports.plan(ports, nparams, node)
        exposed = [p for p in planned if p.label.startswith("HCCL")
                   and any(ports.sysctl.is_ephemeral(x) and not ports.sysctl.is_reserved(x) for x in range(p.lo, p.hi + 1))]
        old_text = (files[RESERVED] or b"").decode().strip()
        if exposed:
            ranges = ",".join(f"{p.lo}-{p.hi}" for p in exposed)
            new_text = f"{old_text},{ranges}" if old_text else ranges
            fix.steps.append(Step(f"reserve HCCL's host ports {ranges} (inside the ephemeral range "
                                  f"{ports.sysctl.ephemeral[0]}-{ports.sysctl.ephemeral[1]})",
                                  _sysctl(new_text), _sysctl(old_text), root=True))
        for p in planned:
            for ls in (x for x in ports.listeners if p.lo <= x.port <= p.hi):
                fix.manual.append(f"port {ls.port} ({p}) is in use ({ls.owner()}): stop it or move {p.label}; "
                                  "preflight never kills a process")
    return fix


def wrapped(script: str, node, root: bool) -> str:
    """Run a script on the node, through `sudo -n` (become) when it needs root and the login is not root."""
    import getpass

    cmd = f"sh -c {shlex.quote(script)}"
    return f"sudo -n {cmd}" if root and (node.user or getpass.getuser()) != "root" else cmd
