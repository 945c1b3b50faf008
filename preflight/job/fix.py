"""`preflight fix`: per-node scripts that correct what the launch-environment and port checks found
wrong, and the scripts that put every previous value back.

What it may touch, and nothing else:
  * a variable env.comm failed (HCCL_IF_IP, HCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME) where one of
    the node's own `env_files` assigns it: that line gets the training NIC's value (the NIC that
    HCCL_IF_IP is on, else the one MASTER_ADDR routes through); the file is replaced atomically
    (temp file + rename, mode and owner kept) and only if it still holds the bytes that were read;
  * HCCL's host port range that net.ports found inside the ephemeral range and not reserved:
    `net.ipv4.ip_local_reserved_ports` gains the range (a step that declares root: the driver's
    own privilege rule, docs/SPEC.md §2.9).
A variable set by the inventory's own `env:` or nowhere preflight can see, a value preflight would
only set to what it already is, a per-node address in a file other nodes list too, and a port held
by a process are reported as manual steps: the fix never edits the inventory and never kills anything.
The rollback script restores the files byte for byte (base64 of what was read) and the sysctl's
previous text.

Every line of both scripts is built by the probe API (`sh()`): a value read from a node or the
inventory is a quoted word, never shell text, and no free text (a step's description) is in a
script at all: descriptions live in the plan record beside it (preflight/job/fixplan.py).
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..checkapi import Shell, sh
from ..checkhelpers import seq
from ..net import iproute
from . import ENV_COMM, NET_PORTS, check

env_comm, net_ports = check(ENV_COMM), check(NET_PORTS)  # their rules and port plan, by id

FIXED_VARS = ("HCCL_IF_IP", "HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
PER_NODE_VARS = ("HCCL_IF_IP",)  # an address of one node: never written into a file other nodes list
RESERVED = "/proc/sys/net/ipv4/ip_local_reserved_ports"
READ_MARK = "@@preflight-file"
PORT_LIST = re.compile(r"[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*|")  # the sysctl's own format
STEP_MARK = "@@preflight-step"  # printed after each step that completed: the plan records which applied


@dataclass(frozen=True)
class Step:
    what: str  # for the operator and the plan record; never written into a script
    apply: Shell
    rollback: Shell
    root: bool = False  # the step's declared need; the only thing privilege is chosen from


@dataclass
class NodeFix:
    node: str
    steps: list[Step] = field(default_factory=list)
    manual: list[str] = field(default_factory=list)

    def script(self, rollback: bool = False) -> Shell:
        """The fix (every step in order) or the rollback (in reverse order, each step only when its
        index is among the script's arguments: `set -- 0 2` before it, the steps that applied)."""
        parts = [sh("set -eu")]
        order = list(reversed(list(enumerate(self.steps)))) if rollback else list(enumerate(self.steps))
        for i, s in order:
            done = sh("echo {m} {i}", m=STEP_MARK, i=i)
            if rollback:
                parts.append(seq([sh("case {sp}\"$*\"{sp} in *{tag}*)", sp=" ", tag=f" {i} "),
                                  s.rollback, done, sh(";; esac")], "\n"))
            else:
                parts += [s.apply, done]
        parts.append(sh("echo {m}", m="preflight: rollback done" if rollback else "preflight: fix done"))
        return seq(parts, "\n")

    @property
    def needs_root(self) -> bool:
        return any(s.root for s in self.steps)


def applied_steps(stdout: str) -> list[int]:
    """The indices of the steps a script's output says completed (its STEP_MARK lines)."""
    out = []
    for line in stdout.splitlines():
        head, _, idx = line.partition(" ")
        if head == STEP_MARK and idx.strip().isdigit():
            out.append(int(idx))
    return sorted(set(out))


# ---------------------------------------------------------------- reading the env files

def read_command(paths: list[str]) -> Shell:
    """Each file's bytes as base64, framed by its index in `paths` (a path is never echoed back: one
    with a newline would split its own frame), so the rollback can restore them exactly."""
    parts = [sh("echo {m} {i}; if [ -f {p} ] && [ ! -L {p} ]; then base64 -w0 < {p}; else echo '!notregular'; fi; echo",
                m=READ_MARK, i=i, p=p) for i, p in enumerate(paths)]
    parts.append(sh("echo {m} sysctl; cat {p}", m=READ_MARK, p=RESERVED))
    return seq(parts)


def parse_read(text: str, paths: list[str]) -> dict[str, bytes | None]:
    """path -> bytes (None when not a regular file). The sysctl comes back as its text, under RESERVED."""
    out: dict[str, bytes | None] = {}
    for chunk in text.split(READ_MARK + " ")[1:]:
        head, _, body = chunk.partition("\n")
        body = body.rstrip("\n")
        if head == "sysctl":
            out[RESERVED] = body.encode()
        elif head.isdigit() and int(head) < len(paths):
            try:
                out[paths[int(head)]] = None if body.startswith("!notregular") else base64.b64decode(body, validate=True)
            except ValueError:
                out[paths[int(head)]] = None
    return out


# ---------------------------------------------------------------- deciding

def training_nic(facts: env_comm.Facts, backend: str) -> tuple[str | None, str | None]:
    """(interface, address) the job should use: where HCCL_IF_IP is, else where MASTER_ADDR routes,
    else the library's own default order with none of the variables being fixed set (asked with
    them, it answers with the very value that failed)."""
    ip = facts.env.get("HCCL_IF_IP", "").strip()
    owner = iproute.owner(facts.interfaces, ip) if ip else None
    if owner is not None and owner.up and not owner.loopback:
        return owner.name, ip
    if facts.master_route is not None and facts.master_route.dev:
        iface = facts.iface(facts.master_route.dev)
        if iface is not None and iface.addresses(facts.family) and not iface.loopback:
            return iface.name, iface.addresses(facts.family)[0].ip
    unset = dataclasses.replace(facts, env={k: v for k, v in facts.env.items() if k not in FIXED_VARS})
    comm = unset.comm(backend)
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


def _replace_file(path: str, old: bytes, new: bytes) -> Shell:
    """Shell that swaps path's bytes old -> new atomically, refusing a link, a non-file or a changed file."""
    return seq([
        sh("f={p}", p=path),
        sh('if [ -L "$f" ] || [ ! -f "$f" ]; then echo "preflight: $f is not a regular file; not touched" >&2; exit 1; fi'),
        sh('if [ "$(sha256sum < "$f" | cut -d" " -f1)" != {h} ]; then '
           'echo "preflight: $f changed since it was read; not touched" >&2; exit 1; fi', h=hashlib.sha256(old).hexdigest()),
        sh('t=$(mktemp "$f.preflight.XXXXXX")'),
        sh("printf '%s' {b} | base64 -d > \"$t\"", b=base64.b64encode(new).decode()),
        sh('chmod --reference="$f" "$t"; chown --reference="$f" "$t" 2>/dev/null || true'),
        sh('mv -f "$t" "$f"'),
    ], "\n")


def _sysctl(value: str) -> Shell:
    return sh("sysctl -q -w {kv}", kv=f"net.ipv4.ip_local_reserved_ports={value}")


def plan_node(node, comm: env_comm.Facts, ports: net_ports.Facts | None, files: Mapping[str, bytes | None],
              shared: Mapping[str, tuple[str, ...]] | None = None) -> NodeFix:
    """What to change on one node, from its facts and the bytes of its env files. `shared`: env
    file path -> the other inventory nodes that list it too (it may be one file on shared storage)."""
    fix = NodeFix(node.name)
    backend = "nvidia" if node.backend == "nvidia" else "ascend"
    params = node.check_params(env_comm.ID, env_comm.DEFAULTS)
    iface, ip = training_nic(comm, backend)
    want = {"HCCL_IF_IP": ip, "HCCL_SOCKET_IFNAME": f"={iface}" if iface else None, "GLOO_SOCKET_IFNAME": iface}
    contents = {p: files.get(p) for p in node.env_files}
    for var, why in wrong_vars(comm, params, node).items():
        why = why.split("; interfaces:")[0]  # the interface list is in env.comm's own result
        value = want[var]
        if value is not None and value == comm.env.get(var, "").strip():
            fix.manual.append(f"{var}: {why}; preflight would choose {shlex.quote(value)}, the value it already has: "
                              "correct the interface or the address by hand")
            continue
        if var in node.env:
            fix.manual.append(f"{var} comes from the inventory's env for {node.name} ({why}): set it to "
                              f"{shlex.quote(value or '')} there")
            continue
        holder = next((p for p in reversed(node.env_files) if contents.get(p) and assignment(var).search(
            contents[p].decode("utf-8", "surrogateescape"))), None)  # the last file that assigns it wins
        if value is None:
            fix.manual.append(f"{var}: {why}; {node.name} has no usable interface preflight could set it to")
            continue
        if holder is None:
            fix.manual.append(f"{var}: {why}; no env file of {node.name} assigns it (set: export {var}={shlex.quote(value)})")
            continue
        others = (shared or {}).get(holder, ())
        if var in PER_NODE_VARS and others:
            fix.manual.append(f"{var}: {why}; {holder} is also an env file of {', '.join(others[:5])}"
                              f"{' ...' if len(others) > 5 else ''}: one node's address is not written into a file "
                              f"other nodes may share; set {var}={shlex.quote(value)} per node (the inventory's env)")
            continue
        old = contents[holder]
        new = edit(old, var, value)
        contents[holder] = new
        fix.steps.append(Step(f"{holder}: {var}={shlex.quote(value)} ({why})", _replace_file(holder, old, new),
                              _replace_file(holder, new, old)))
    if ports is not None and ports.sysctl is not None and RESERVED in files:
        nparams = node.check_params(net_ports.ID, net_ports.DEFAULTS)
        planned, _ = net_ports.ports_to_bind(ports, nparams, node)
        exposed = [p for p in planned if p.label.startswith("HCCL")
                   and any(ports.sysctl.is_ephemeral(x) and not ports.sysctl.is_reserved(x) for x in range(p.lo, p.hi + 1))]
        old_text = (files[RESERVED] or b"").decode(errors="replace").strip()
        if exposed and not PORT_LIST.fullmatch(old_text):
            fix.manual.append(f"{RESERVED} reads {old_text[:80]!r}, not a port list: reserve HCCL's ports by hand")
        elif exposed:
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
