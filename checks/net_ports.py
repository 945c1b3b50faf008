"""net.ports: the ports the job will bind are free: MASTER_PORT on the master, HCCL's host ports everywhere.

What it checks: listening TCP sockets (`ss -ltnp`, or /proc/net/tcp and tcp6 where ss is missing)
against the job's port plan, taken from the launch environment:
- MASTER_PORT on the master node (the node that owns MASTER_ADDR on an UP interface);
- HCCL's host port range on every node: HCCL_HOST_SOCKET_PORT_RANGE when set (it wins), else
  HCCL_IF_BASE_PORT and the 15 ports after it (default 60000-60015);
- the `extra_ports` this check's parameters list (`checks: {net.ports: {extra_ports: [8080, "9000-9010"]}}`).
A port in use fails, naming the port, the PID and the process. MASTER_PORT inside HCCL's range
fails. A planned port inside the kernel's ephemeral range (net.ipv4.ip_local_port_range) that is not
in net.ipv4.ip_local_reserved_ports warns: any outgoing connection may take it first. HCCL's
default 60000-60015 sits inside Linux's default ephemeral range 32768-60999.

Why it matters: a second job (or a leftover rank) on the same port makes HCCL fail with
`EJ0003 ... Failed to bind the IP port` / `host nic listen start failed, port[60000], return[11]`
(`HcclGetRootInfo ... error code is 11`), and torchrun's store with `Address already in use`.

How to fix: stop the process holding the port (`kill <pid>`, after checking what it is), or move
the job (`export HCCL_IF_BASE_PORT=50000`, another MASTER_PORT); reserve HCCL's range with
`sysctl -w net.ipv4.ip_local_reserved_ports=60000-60015` (persist it in /etc/sysctl.d/).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from preflight.checkapi import Policy, CommandOutput, Finding, ParseError, Probe, Status, cmd
from preflight.checkhelpers import graded, worst
from preflight.net import sockets
from preflight.net.sockets import Listener, PortSysctl

ID = "net.ports"
SCOPE = "node"
USES = ("env.comm",)  # the launch environment (MASTER_ADDR/PORT, HCCL's ports) and whether this node is the master
POLICY = Policy(gate=True, on_busy="skip", busy_reason="its ports are in use by the job")
# What to do with a fail/warn (preflight/actions.py).
ACTIONS = {
    "in_use": ("restart_process", "a leftover process holds a port the job needs (docs/FAILURES.md row 7)"),
    "": ("fix_config", "port ranges in the inventory or sysctl (docs/FAILURES.md row 7)"),
}
DEFAULTS: dict = {
    "extra_ports": [],  # ints or "lo-hi" strings, checked on every node
    "hccl_ports": 16,  # HCCL_IF_BASE_PORT occupies 16 ports (docs/ENV.md §A.3)
    "warn_ephemeral": True,
}
LISTEN_PROBE, SYSCTL_PROBE = "listen", "port_sysctl"
HCCL_DEFAULT_BASE = 60000


@dataclass(frozen=True)
class Facts:
    comm: Any  # env.comm's facts on this node: `env` (the launch environment) and `is_master`
    listeners: tuple[Listener, ...]
    source: str  # "ss" | "/proc/net/tcp"
    sysctl: PortSysctl | None


def probes(node, params) -> dict[str, Probe]:
    return {LISTEN_PROBE: cmd(sockets.LISTEN_CMD), SYSCTL_PROBE: cmd(sockets.SYSCTL_CMD)}


def parse(outputs: Mapping[str, CommandOutput], used: Mapping[str, Any]) -> Facts:
    comm = used.get("env.comm")
    if comm is None:
        raise ParseError("the launch environment: env.comm was not gathered on this node")
    if isinstance(comm, BaseException):
        raise comm  # env.comm could not read the launch environment: nor can this check
    out = outputs.get(LISTEN_PROBE)
    if out is None:
        raise ParseError("listening sockets: probe not run")
    listeners, source = sockets.parse_listeners(out)
    sc = outputs.get(SYSCTL_PROBE)
    sysctl = sockets.parse_sysctl(sc.stdout) if sc is not None and sc.rc == 0 else None
    return Facts(comm, listeners, source, sysctl)


@dataclass(frozen=True)
class Planned:
    label: str
    lo: int
    hi: int

    def __str__(self) -> str:
        return f"{self.label} {self.lo}" + (f"-{self.hi}" if self.hi != self.lo else "")


def ports_to_bind(facts: Facts, params, node) -> tuple[list[Planned], list[str]]:
    """The ports this node will bind -> (plan, problems reading it). Values were validated by env.comm;
    unreadable ones are left out here and reported there."""
    env, out, bad = facts.comm.env, [], []
    port = env.get("MASTER_PORT", "").strip()
    if port.isdigit() and facts.comm.is_master:
        out.append(Planned("MASTER_PORT", int(port), int(port)))
    if getattr(node, "backend", "ascend") != "nvidia":
        out += _hccl_ranges(env, int(params.get("hccl_ports", 16)))
    for item in params.get("extra_ports") or []:
        try:
            out += [Planned("extra port", lo, hi) for lo, hi in sockets.parse_port_list(str(item))]
        except ValueError as exc:
            bad.append(f"net.ports extra_ports: {exc}")
    return out, bad


def _hccl_ranges(env: Mapping[str, str], count: int) -> list[Planned]:
    ranges = env.get("HCCL_HOST_SOCKET_PORT_RANGE", "").strip().strip('"[]')
    if ranges and ranges != "auto":
        try:
            return [Planned("HCCL_HOST_SOCKET_PORT_RANGE", lo, hi) for lo, hi in sockets.parse_port_list(ranges)]
        except ValueError:
            return []
    if ranges == "auto":
        return []  # the OS assigns the ports: nothing to reserve
    base = env.get("HCCL_IF_BASE_PORT", "").strip()
    start = int(base) if base.isdigit() else HCCL_DEFAULT_BASE
    label = "HCCL_IF_BASE_PORT" if base.isdigit() else "HCCL host ports (default base)"
    return [Planned(label, start, min(start + count - 1, 65535))]


def _collisions(planned: list[Planned], facts: Facts) -> list[tuple[Status, str, str]]:
    found = []
    for p in planned:
        for ls in (x for x in facts.listeners if p.lo <= x.port <= p.hi):
            owner = ls.owner() if facts.source == "ss" else "owner unknown: ss not installed, read from /proc/net/tcp"
            pid = next((pid for _, pid in ls.processes), None)
            found.append((Status.FAIL, f"port {ls.port} ({p}) is in use: {owner} listening on {ls.address}",
                          f"stop the process holding port {ls.port} (`kill {pid}` after checking it)" if pid else
                          f"find and stop the holder: `sudo ss -ltnp 'sport = :{ls.port}'`, or move {p.label}"))
    return found


def _overlap(planned: list[Planned]) -> list[tuple[Status, str, str]]:
    master = [p for p in planned if p.label == "MASTER_PORT"]
    hccl = [p for p in planned if p.label.startswith("HCCL")]
    return [(Status.FAIL, f"MASTER_PORT {m.lo} lies inside {h}", "choose a MASTER_PORT outside HCCL's host port range")
            for m in master for h in hccl if h.lo <= m.lo <= h.hi]


def _ephemeral(planned: list[Planned], facts: Facts, params) -> list[tuple[Status, str, str]]:
    sc = facts.sysctl
    if sc is None or not params.get("warn_ephemeral", True):
        return []
    found = []
    for p in planned:
        exposed = [port for port in range(p.lo, p.hi + 1) if sc.is_ephemeral(port) and not sc.is_reserved(port)]
        if exposed:
            span = f"{exposed[0]}-{exposed[-1]}" if len(exposed) > 1 else str(exposed[0])
            found.append((Status.WARN, f"{p} is inside the ephemeral port range {sc.ephemeral[0]}-{sc.ephemeral[1]} "
                          f"and not reserved ({span})",
                          f"reserve it: `sysctl -w net.ipv4.ip_local_reserved_ports={p.lo}-{p.hi}` "
                          "(and persist it in /etc/sysctl.d/)"))
    return found


def evaluate(facts: Facts, params, node) -> list[Finding]:
    planned, bad = ports_to_bind(facts, params, node)
    collisions = _collisions(planned, facts)
    problems = collisions + _overlap(planned) + _ephemeral(planned, facts, params)
    problems += [(Status.FAIL, b, "fix the net.ports parameters in the inventory") for b in bad]
    details = {"planned": [str(p) for p in planned], "master": facts.comm.is_master, "source": facts.source,
               "ephemeral_range": list(facts.sysctl.ephemeral) if facts.sysctl else None}
    if not problems:
        return [Finding(Status.PASS, f"ports free: {', '.join(map(str, planned)) or 'none planned'}", details)]
    status = worst(s for s, _, _ in problems)
    top = [(m, r) for s, m, r in problems if s is status]
    details["problems"] = [{"status": s.value, "message": m, "remediation": r} for s, m, r in problems]
    in_use = status is Status.FAIL and bool(collisions)  # a collision is always a fail
    return [Finding(status, "; ".join(m for m, _ in top), details, "; ".join(dict.fromkeys(r for _, r in top)),
                    action=graded(ACTIONS, "in_use" if in_use else None))]
