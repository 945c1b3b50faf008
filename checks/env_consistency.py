"""env.consistency: what must agree across the nodes of one job does agree.

What it checks, over every reachable node:
- launch variables that must be equal on all ranks are: MASTER_ADDR, MASTER_PORT, HCCL_CONNECT_TIMEOUT,
  HCCL_EXEC_TIMEOUT, HCCL_BUFFSIZE, HCCL_IF_BASE_PORT, HCCL_DETERMINISTIC, HCCL_INTRA_ROCE_ENABLE,
  HCCL_ALGO, ... and HCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME when every node has
  the same interface names. The majority value is reported and the outliers are named; without a
  majority (two nodes, two values) no node is blamed and the values are listed.
- MASTER_ADDR resolves to the same address everywhere and exactly one node owns it (the master).
- communication addresses (HCCL_IF_IP or the IFNAME's address, from env.comm) are unique and in one subnet.
- device IPs (from hccn.ip) are unique cluster-wide and each rail (device index) is in one subnet.
- the HCCL TLS switch (`hccn_tool -i N -tls -g`) is identical on every device of every node; the FEC
  mode (`-fec -g`) too, and `no FEC mode` warns.
- node clocks against the control host: more than `clock_warn_s` (1 s) off warns, more than
  `clock_fail_s` (30 s) fails.

Why it matters: ranks that disagree on MASTER_ADDR/PORT never meet; different HCCL timeouts or
buffer sizes make one rank give up or allocate differently (EI0006 after 120 s on the rank with the
default); duplicate or cross-subnet addresses make HCCL connect to the wrong host; a device TLS or
FEC mismatch breaks the RoCE link between two NPUs; skewed clocks break EI0006 diagnosis, which
compares timestamps across nodes, and log correlation.

How to fix: set the variable once in the inventory's `defaults.env` instead of per node; give each
node its own HCCL_IF_IP on the training subnet; re-address the device with `hccn_tool -i N -ip -s
address <ip> netmask <mask>`; align TLS (`hccn_tool -i N -tls -s enable 0|1`) and FEC
(`hccn_tool -i N -fec -s mode rs`, matching the switch); sync clocks (`chronyc makestep`).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Mapping

from preflight.ascend import hccn_common as common
from preflight.ascend import probes as ascend
from preflight.checkapi import Policy, ClusterContext, CommandOutput, Finding, Metric, ParseError, Probe, Status, cmd
from preflight.checkhelpers import worst
from preflight import backend as backends
from preflight.net import iproute
from preflight.net.blame import consensus
from preflight.ascend import hccn

ID = "env.consistency"
SCOPE = "cluster"
POLICY = Policy(
    privilege="root",  # hccn_tool -tls / -fec
)
USES = ("env.comm", "hccn.ip")
# What to do with a fail/warn (preflight/actions.py).
# Every problem it finds is configuration: addresses and settings that must agree across nodes
# (docs/FAILURES.md rows 6, 10), the FEC mode the switch expects (row 15), the clock (chrony/NTP).
ACTIONS = {"": ("fix_config", "addresses, TLS/FEC settings and clocks that must agree (docs/FAILURES.md rows 6, 10, 15)")}
DEFAULTS: dict = {"clock_warn_s": 1.0, "clock_fail_s": 30.0}
CLOCK_PROBE = "clock"
QUERIES = {"tls": "-tls -g", "fec": "-fec -g"}
UNSET = "<unset>"
# Must be equal on every rank (docs/ENV.md §D.2/§D.3); the IFNAME ones only where interface names are uniform.
AGREE = ("MASTER_ADDR", "MASTER_PORT", "HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT", "HCCL_BUFFSIZE",
         "HCCL_IF_BASE_PORT", "HCCL_HOST_SOCKET_PORT_RANGE", "HCCL_DETERMINISTIC", "HCCL_INTRA_ROCE_ENABLE",
         "HCCL_INTRA_PCIE_ENABLE", "HCCL_ALGO", "HCCL_SOCKET_FAMILY", "HCCL_WHITELIST_DISABLE")
AGREE_IFNAME = ("HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
VAR_FIX = "set {var} once for all nodes (inventory `defaults.env`), not per node"


@dataclass(frozen=True)
class Facts:
    clock_offset_s: float | None  # node clock minus control clock (positive: node ahead)
    tls: dict[int, int | str] = field(default_factory=dict)  # device -> switch (0/1) or error text
    fec: dict[int, str] = field(default_factory=dict)  # device -> "rs FEC mode" | ... | error text
    chips: dict[int, tuple[int, int]] = field(default_factory=dict)
    hccn_note: str | None = None  # why there are no device facts (inference card, tool missing, NVIDIA)


def probes(node, params) -> dict[str, Probe]:
    p = {CLOCK_PROBE: cmd("date +%s.%N")}
    if getattr(node, "backend", "auto") != "nvidia":
        p[ascend.NPU_SMI_PROBE] = cmd(ascend.NPU_SMI_INFO)
    return p


def followup(outputs, node, params):
    if getattr(node, "backend", "auto") == "nvidia":
        return {}
    return common.hccn_followup(outputs, node, QUERIES)


def clock_offset(out: CommandOutput | None) -> float | None:
    """Node clock minus control clock. The node's clock at the probe's end (node_started_at +
    duration_s, both from the node) against the control host's clock when the output arrived
    (received_at): the difference is the offset minus the transit time, a bound within milliseconds.
    Falls back to the printed `date +%s.%N` when the transport gives no node time."""
    if out is None or out.received_at is None:
        return None
    if out.node_started_at is not None:
        return out.node_started_at + out.duration_s - out.received_at
    try:
        return float(out.stdout.strip()) - out.received_at
    except ValueError:
        raise ParseError("date +%s.%N: not a number", out.stdout) from None


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    offset = clock_offset(outputs.get(CLOCK_PROBE))
    if ascend.NPU_SMI_PROBE not in outputs:
        return Facts(offset, hccn_note="not an Ascend node")
    run = common.read_hccn(outputs, QUERIES)
    if run.skip or run.missing_tool:
        return Facts(offset, chips=run.chips, hccn_note=run.skip or f"hccn_tool not found at {run.missing_tool}")
    tls = {d: _read(o, hccn.parse_tls_switch) for d, o in run.outputs["tls"].items()}
    fec = {d: _read(o, hccn.parse_fec) for d, o in run.outputs["fec"].items()}
    return Facts(offset, tls, fec, run.chips)


def _read(out: CommandOutput, parser) -> Any:
    err = common.device_error(out)
    return f"error: {err[1]}" if err else parser(out.stdout)


# ---- evaluation --------------------------------------------------------------------------------

@dataclass
class Problem:
    status: Status
    message: str
    remediation: str
    node: str | None = None  # None: cluster-wide, nobody blamed
    devices: list[int] = field(default_factory=list)


def _fact(ctx: ClusterContext, node: str, check: str):
    return ctx.facts.get(node, {}).get(check)


def _envs(ctx: ClusterContext) -> dict[str, Mapping[str, str]]:
    return {n: f.env for n in ctx.nodes if (f := _fact(ctx, n, "env.comm")) is not None}


def _uniform_ifnames(ctx: ClusterContext) -> bool:
    names = {n: frozenset(i.name for i in f.interfaces if not i.loopback)
             for n in ctx.nodes if (f := _fact(ctx, n, "env.comm")) is not None}
    return len(set(names.values())) <= 1


def _agree(values: dict[str, Any], what: str, fix: str, status: Status = Status.FAIL) -> list[Problem]:
    """Majority rule: outliers blamed, no majority -> one cluster-wide problem listing the values."""
    c = consensus(values)
    if c.agreed:
        return []
    if c.majority is None:
        return [Problem(status, f"{what} differs with no majority: {c.describe()}", fix)]
    n_major = len(c.groups[c.majority])
    return [Problem(status, f"{what} is {v} on {n}, expected {c.majority} (as on {n_major} of {len(values)} nodes)",
                    fix, node=n) for n, v in c.outliers.items()]


def rule_variables(ctx: ClusterContext) -> list[Problem]:
    """Within each backend: an Ascend job and an NVIDIA job are separate launches (docs/NVIDIA.md)."""
    envs = _envs(ctx)
    names = AGREE + (AGREE_IFNAME if _uniform_ifnames(ctx) else ())
    out = []
    for group in backends.groups(ctx.nodes).values():
        members = set(group)  # membership per node and variable: a list would make this quadratic
        for var in names:
            values = {n: env.get(var, "").strip() or UNSET for n, env in envs.items() if n in members}
            out += _agree(values, var, VAR_FIX.format(var=var))
    return out


def rule_master(ctx: ClusterContext) -> list[Problem]:
    facts = {n: f for n in ctx.nodes if (f := _fact(ctx, n, "env.comm")) is not None and f.master_addr}
    if not facts:
        return []
    resolved = {n: (f.master_ips[0] if f.master_ips else "<unresolved>") for n, f in facts.items()}
    out = _agree(resolved, "MASTER_ADDR resolves to", "make MASTER_ADDR resolve to the same address on every "
                 "node (/etc/hosts or DNS), or use the IP itself")
    masters = sorted(n for n, f in facts.items() if f.is_master)
    addr = next(iter(facts.values())).master_addr
    if not masters:
        where = f" (unreachable nodes: {', '.join(ctx.unreachable)})" if ctx.unreachable else ""
        out.append(Problem(Status.FAIL, f"MASTER_ADDR {addr} is not an UP address of any reachable node{where}",
                           "set MASTER_ADDR to the rank-0 node's address on the training network"))
    elif len(masters) > 1:
        out += [Problem(Status.FAIL, f"MASTER_ADDR {addr} is owned by {len(masters)} nodes ({', '.join(masters)}): "
                        "a duplicated address", "remove the duplicate address from all but the master node", node=n)
                for n in masters]
    return out


def _comm(ctx: ClusterContext) -> dict[str, tuple[str, str | None]]:
    """node -> (communication address, its network as text) where env.comm found one."""
    out = {}
    for n, node in ctx.nodes.items():
        f = _fact(ctx, n, "env.comm")
        c = f.comm(getattr(node, "backend", "ascend")) if f is not None else None
        if c is None or not c.ip:
            continue
        net = next((iproute.subnet(a.ip, str(a.prefixlen)) for i in f.interfaces for a in i.addrs if a.ip == c.ip),
                   None)
        out[n] = (c.ip, net)
    return out


def _duplicates(owners: dict[Any, list[Any]]) -> dict[Any, list[Any]]:
    return {k: v for k, v in owners.items() if len(v) > 1}


def rule_comm_addresses(ctx: ClusterContext) -> list[Problem]:
    comm = _comm(ctx)
    owners: dict[str, list[str]] = defaultdict(list)
    for n, (ip, _) in comm.items():
        owners[ip].append(n)
    out = [Problem(Status.FAIL, f"communication address {ip} is used by {', '.join(ns)}",
                   "give every node its own HCCL_IF_IP (inventory per-node env)", node=n)
           for ip, ns in _duplicates(owners).items() for n in ns]
    nets = {n: net for n, (_, net) in comm.items() if net is not None}
    return out + _agree(nets, "communication subnet", "put every node's HCCL_IF_IP / IFNAME on the training subnet")


def _device_ips(ctx: ClusterContext) -> dict[tuple[str, int], tuple[str, str | None]]:
    out = {}
    for n in ctx.nodes:
        f = _fact(ctx, n, "hccn.ip")
        for dev, d in (getattr(f, "devices", None) or {}).items():
            if d.ip:
                out[(n, dev)] = (d.ip, d.netmask)
    return out


def rule_device_ips(ctx: ClusterContext) -> list[Problem]:
    ips = _device_ips(ctx)
    owners: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for key, (ip, _) in ips.items():
        owners[ip].append(key)
    out = []
    for ip, keys in _duplicates(owners).items():
        where = ", ".join(f"{n} device {d}" for n, d in keys)
        out += [Problem(Status.FAIL, f"device IP {ip} is used by {where}",
                        f"re-address one of them: `hccn_tool -i {d} -ip -s address <ip> netmask <mask>` "
                        "and update /etc/hccn.conf", node=n, devices=[d]) for n, d in keys]
    rails: dict[int, dict[str, str]] = defaultdict(dict)
    for (n, dev), (ip, mask) in ips.items():
        try:
            rails[dev][n] = iproute.subnet(ip, mask)
        except ValueError:
            continue  # hccn.ip reports unreadable addresses
    for dev, nets in sorted(rails.items()):
        for p in _agree(nets, f"device {dev} subnet", f"re-address device {dev}: `hccn_tool -i {dev} -ip -s address "
                        "<ip in the rail's subnet> netmask <mask>`"):
            p.devices = [dev] if p.node else []
            out.append(p)
    return out


def _per_device(ctx: ClusterContext, attr: str) -> dict[tuple[str, int], Any]:
    return {(n, d): v for n in ctx.nodes if (f := _fact(ctx, n, ID)) is not None
            for d, v in getattr(f, attr).items()}


def _agree_devices(values: dict[tuple[str, int], Any], what: str, fix: str) -> list[Problem]:
    """Majority over all devices of all nodes; outlier devices blamed on their node."""
    c = consensus({f"{n}\x00{d}": v for (n, d), v in values.items()})
    if c.agreed:
        return []
    if c.majority is None:
        counts = "; ".join(f"{v} on {len(ks)} devices" for v, ks in c.groups.items())
        return [Problem(Status.FAIL, f"{what} differs with no majority: {counts}", fix)]
    by_node: dict[str, list[int]] = defaultdict(list)
    for key in c.outliers:
        n, d = key.split("\x00")
        by_node[n].append(int(d))
    return [Problem(Status.FAIL, f"{what} on {n} devices {', '.join(map(str, sorted(ds)))} is "
                    f"{', '.join(sorted({str(values[(n, d)]) for d in ds}))}, expected {c.majority}", fix, node=n,
                    devices=sorted(ds)) for n, ds in sorted(by_node.items())]


def rule_tls_fec(ctx: ClusterContext) -> list[Problem]:
    tls = {k: v for k, v in _per_device(ctx, "tls").items() if not str(v).startswith("error")}
    fec = {k: v for k, v in _per_device(ctx, "fec").items() if not str(v).startswith("error")}
    out = _agree_devices(tls, "TLS switch", "align the TLS switch on every device: `hccn_tool -i N -tls -s enable <0|1>`")
    out += _agree_devices(fec, "FEC mode", "set the FEC mode the switch expects: `hccn_tool -i N -fec -s mode rs`")
    off: dict[str, list[int]] = defaultdict(list)
    for (n, d), v in fec.items():
        if v == "no FEC mode":
            off[n].append(d)
    out += [Problem(Status.WARN, f"FEC disabled (`fec mode: no FEC mode`) on {n} devices {', '.join(map(str, sorted(ds)))}",
                    "enable FEC as the switch port expects: `hccn_tool -i N -fec -s mode rs`", node=n, devices=sorted(ds))
            for n, ds in sorted(off.items())]
    return out


def rule_clock(ctx: ClusterContext) -> list[Problem]:
    warn_s, fail_s = float(ctx.params["clock_warn_s"]), float(ctx.params["clock_fail_s"])
    out = []
    for n in sorted(ctx.nodes):
        f = _fact(ctx, n, ID)
        off = getattr(f, "clock_offset_s", None)
        if off is None or abs(off) <= warn_s:
            continue
        status = Status.FAIL if abs(off) > fail_s else Status.WARN
        out.append(Problem(status, f"clock of {n} is {abs(off):.1f} s {'ahead of' if off > 0 else 'behind'} the "
                           f"control host (limit {warn_s:g} s)", "sync the clock: `chronyc makestep` (or "
                           "`systemctl restart chronyd`/ntpd) and keep NTP running", node=n))
    return out


RULES = (rule_variables, rule_master, rule_comm_addresses, rule_device_ips, rule_tls_fec, rule_clock)


def _metrics(ctx: ClusterContext) -> list[dict]:
    out = []
    for n in sorted(ctx.nodes):
        off = getattr(_fact(ctx, n, ID), "clock_offset_s", None)
        if off is not None:
            out.append(Metric("clock_offset", round(off, 3), "s", {"node": n}).to_dict())
    return out


def _node_finding(node: str, problems: list[Problem], ctx: ClusterContext) -> Finding:
    status = worst(p.status for p in problems)
    devices = sorted({d for p in problems for d in p.devices})
    chips = getattr(_fact(ctx, node, ID), "chips", {}) or {}
    details: dict[str, Any] = {"problems": [p.message for p in problems]}
    if devices:
        details["failed_devices"] = devices
        details["devices"] = [common.device_ref(d, chips) for d in devices]
    fix = "; ".join(dict.fromkeys(p.remediation for p in problems if p.status is status))
    return Finding(status, "; ".join(p.message for p in problems), details, fix, node=node)


def evaluate(ctx: ClusterContext) -> list[Finding]:
    problems = [p for rule in RULES for p in rule(ctx)]
    envs = _envs(ctx)
    shown = {var: consensus({n: e.get(var, "").strip() or UNSET for n, e in envs.items()}).describe(4)
             for var in AGREE + AGREE_IFNAME if any(var in e for e in envs.values())}
    details: dict[str, Any] = {"values": shown, "metrics": _metrics(ctx),
                               "no_device_facts": {n: f.hccn_note for n in ctx.nodes
                                                   if (f := _fact(ctx, n, ID)) is not None and f.hccn_note}}
    if not problems:
        return [Finding(Status.PASS, f"launch variables, addresses, TLS/FEC and clocks agree on {len(ctx.nodes)} nodes",
                        details)]
    by_node: dict[str, list[Problem]] = defaultdict(list)
    for p in problems:
        if p.node:
            by_node[p.node].append(p)
    status = worst(p.status for p in problems)
    headline = list(dict.fromkeys(p.message if p.node is None else p.message.split(" on ")[0] for p in problems))
    details["problems"] = [p.message for p in problems]
    general = [p.remediation for p in problems if p.node is None]
    summary = Finding(status, "; ".join(headline[:6]) + (f" (+{len(headline) - 6} more)" if len(headline) > 6 else "")
                      + (f"; blamed: {', '.join(sorted(by_node))}" if by_node else ""), details,
                      "; ".join(dict.fromkeys(general)) or "see the per-node results")
    return [summary] + [_node_finding(n, ps, ctx) for n, ps in sorted(by_node.items())]
