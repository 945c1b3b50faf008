"""net.ping_mesh: every node reaches every other node's communication address.

What it checks: from each node, ICMP echo (`ping -c N`, iputils) to the communication address of
every other node: HCCL_IF_IP, else the address of the interface HCCL_SOCKET_IFNAME (NCCL_SOCKET_IFNAME
on NVIDIA) selects, else HCCL's default choice, as env.comm computed it. Each node pings all its
targets in one command: one python3 multi-target pinger (ICMP datagram or raw socket), or where
that cannot run, `ping` processes at most `parallel` at a time. A node where neither can run (no
python3 ICMP socket and no `ping`, or ping refused its socket) leaves its pairs untested, not down:
the summary names that node, its pairs and why (`details.untested`); the pairs towards it are still
tested from the other side. A pair with no reply fails; partial loss or an
average RTT above `warn_rtt_ms` warns. Blame follows docs/SPEC.md §3.1: a node that fails with most of its
peers is named alone (it reaches nobody, or nobody reaches it); an isolated bad pair names both
ends. `max_pairs` (0 = all) samples pairs deterministically on big clusters: every node still pings,
and is pinged by, the same number of peers. The loss/RTT matrix is in the summary's details.

Why it matters: HCCL and Gloo build a full mesh of TCP connections at init; one unreachable pair
stalls every rank until HCCL_CONNECT_TIMEOUT (EI0006 `Getting socket times out`) or Gloo's
`connectFullMesh failed`. A firewall rule or a wrong route between two nodes is invisible from
either node alone.

How to fix: on the blamed node check the interface and its routes (`ip -br addr`, `ip route get
<peer ip>`) and firewall rules (`iptables -S | grep -iE 'drop|reject'`, `nft list ruleset`); make
sure HCCL_IF_IP/HCCL_SOCKET_IFNAME name the training network on every node.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from preflight.checkapi import Policy, Choice, ClusterContext, Finding, Metric, Probe, Status, cmd, passed
from preflight.checkhelpers import graded, worst
from preflight.net import ping, pinger
from preflight.net.blame import blame_pairs, spread_pairs as pairs

ID = "net.ping_mesh"
SCOPE = "cluster"
POLICY = Policy(trend_metric=("ping_rtt", True), cost="network")
USES = ("env.comm",)
# What to do with a fail/warn (preflight/actions.py).
ACTIONS = {
    "weak": ("monitor", "loss or slow answers, nothing unreachable: a degrading path, watch it"),
    "": ("fix_config", "an unreachable pair: interface, route or firewall (docs/FAILURES.md rows 19-21)"),
}
DEFAULTS: dict = {
    "count": 3,  # echo requests per pair
    "interval": 0.2,  # seconds between them (0.2 is the smallest iputils allows without root)
    "parallel": 32,  # pings running at once on one node
    "max_pairs": 0,  # 0: all ordered pairs; else about this many, spread evenly
    "warn_rtt_ms": 10.0,
    "matrix_limit": 64,  # nodes up to which details carry the full loss matrix
    "reply_wait_s": 2.0,  # pinger: how long to wait for replies after the last request (ARP on a cold cache)
    "pinger": Choice("auto", "ping"),  # auto: one python3 multi-target pinger per node, `ping` loop if it cannot run; ping: loop only
}
PROBE = "mesh"


@dataclass(frozen=True)
class PairResult:
    src: str
    dst: str
    loss_pct: float | None  # None: no statistics (ping could not run)
    rtt_avg_ms: float | None
    note: str = ""
    untested: str = ""  # why this pair could not be tested from src (neither the pinger nor ping could run)


# What a node that cannot ping at all prints, and what that means (the pair is untested, not down).
# Real outputs: the mesh loop without ping on PATH (`sh: 1: ping: not found`, rc 127); iputils ping
# without cap_net_raw and outside ping_group_range (`ping: socket: Operation not permitted`, rc 2).
UNTESTABLE = (
    ("ping: not found", "neither python3's ICMP socket nor `ping` could run on the node (no `ping` installed)"),
    ("command not found", "neither python3's ICMP socket nor `ping` could run on the node (no `ping` installed)"),
    ("socket: Operation not permitted", "ping may not open an ICMP socket there (no cap_net_raw, user outside "
                                        "net.ipv4.ping_group_range)"),
)


def addresses(ctx: ClusterContext) -> dict[str, str]:
    """node -> communication address, from env.comm's facts (nodes without one are left out)."""
    found = {}
    for name, node in ctx.nodes.items():
        facts = ctx.facts.get(name, {}).get("env.comm")
        comm = facts.comm(getattr(node, "backend", "ascend")) if facts is not None else None
        if comm is not None and comm.ip:
            found[name] = comm.ip
    return found


def plan(ctx: ClusterContext) -> dict[str, dict[str, Probe]]:
    p = ctx.params
    addr = addresses(ctx)
    by_src: dict[str, list[tuple[str, str]]] = {}
    for src, dst in pairs(sorted(addr), int(p.get("max_pairs") or 0)):
        by_src.setdefault(src, []).append((dst, addr[dst]))
    count, par, interval = int(p["count"]), int(p["parallel"]), float(p["interval"])
    per_ping = math.ceil(count * interval + 1) + 1
    loop_only = p.get("pinger") == "ping"
    return {src: {PROBE: cmd(ping.mesh_script(t, count, par, interval) if loop_only else
                               pinger.mesh_command(t, count, par, interval, getattr(ctx.nodes[src], "python", "python3"),
                                                   float(p.get("reply_wait_s", 2.0))),
                               timeout=math.ceil(len(t) / max(1, par)) * per_ping + 15)}
            for src, t in by_src.items()}


def results(ctx: ClusterContext) -> tuple[list[PairResult], list[str]]:
    """Directed pair results from the planned outputs, and sources whose output could not be read."""
    out, broken = [], []
    for src, outs in sorted(ctx.planned.items()):
        o = outs.get(PROBE)
        if o is None or o.timed_out or o.error or (o.rc not in (0, None) and ping.MARK not in o.stdout):
            broken.append(f"{src}: {(o.error or o.stderr.strip()[:200]) if o else 'no output'}")
            continue
        for dst, (_ip, rc, body) in ping.split_mesh(o.stdout).items():
            st = ping.parse_stats(body)
            note = "" if st else (body.strip().splitlines() or [f"ping rc {rc}"])[-1][:200]
            why = "" if st else next((w for needle, w in UNTESTABLE if needle in body), "")
            out.append(PairResult(src, dst, st.loss_pct if st else None, st.rtt_avg_ms if st else None, note, why))
    return out, broken


def _untested(res: list[PairResult]) -> dict[str, dict]:
    """{source node: {"reason": why, "pairs": [peers]}} for the pairs no tool could test."""
    out: dict[str, dict] = {}
    for r in res:
        if r.untested:
            out.setdefault(r.src, {"reason": r.untested, "pairs": []})["pairs"].append(r.dst)
    return out


def _bad(r: PairResult) -> bool:
    return r.loss_pct is None or r.loss_pct >= 100.0


def _weak(r: PairResult, warn_rtt: float) -> bool:
    return not _bad(r) and (r.loss_pct > 0 or (r.rtt_avg_ms or 0) > warn_rtt)


def _describe(r: PairResult, addr: dict[str, str]) -> str:
    what = (f"{r.loss_pct:g}% loss" if r.loss_pct is not None else f"ping failed ({r.note})")
    rtt = f", rtt {r.rtt_avg_ms:g} ms" if r.rtt_avg_ms is not None else ""
    return f"{r.src}->{r.dst} ({addr.get(r.dst, '?')}) {what}{rtt}"


def _node_findings(status: Status, bad: list[PairResult], tested: list[PairResult], addr, ctx) -> list[Finding]:
    blame = blame_pairs([(r.src, r.dst) for r in tested], [(r.src, r.dst) for r in bad])
    findings = []
    for name in sorted(blame.blamed, key=str):
        mine = [r for r in bad if name in (r.src, r.dst)]
        out_bad = {r.dst for r in mine if r.src == name}
        in_bad = {r.src for r in mine if r.dst == name}
        n_out = len({r.dst for r in tested if r.src == name})
        n_in = len({r.src for r in tested if r.dst == name})
        if name in blame.endpoints:
            head = f"{name} ({addr.get(name)}): reaches {n_out - len(out_bad)} of {n_out} peers, reached by {n_in - len(in_bad)} of {n_in}"
        else:
            peers = sorted({p for pr in blame.pairs if name in pr for p in pr if p != name})
            head = f"bad pair {name} ({addr.get(name)}) <-> {', '.join(f'{p} ({addr.get(p)})' for p in peers)}"
        iface = _iface(ctx, name)
        fix = (f"on {name} check {iface or 'the training interface'} and firewall rules between the nodes "
               f"(`ip route get <peer ip>`, `iptables -S | grep -iE 'drop|reject'`)")
        findings.append(Finding(status, f"{head}: {'; '.join(_describe(r, addr) for r in mine[:4])}"
                                + (f" (+{len(mine) - 4} more)" if len(mine) > 4 else ""),
                                {"pairs": [_describe(r, addr) for r in mine]}, fix, node=name,
                                action=graded(ACTIONS, "weak" if status is Status.WARN else None)))
    return findings


def _iface(ctx: ClusterContext, name: str) -> str | None:
    facts = ctx.facts.get(name, {}).get("env.comm")
    return facts.comm(getattr(ctx.nodes[name], "backend", "ascend")).iface if facts is not None else None


def _metrics(res: list[PairResult]) -> list[dict]:
    out = []
    for r in res:
        labels = {"node": r.src, "peer": r.dst}
        if r.loss_pct is not None:
            out.append(Metric("ping_loss", r.loss_pct, "%", labels).to_dict())
        if r.rtt_avg_ms is not None:
            out.append(Metric("ping_rtt", r.rtt_avg_ms, "ms", labels).to_dict())
    return out


def evaluate(ctx: ClusterContext) -> list[Finding]:
    addr = addresses(ctx)
    missing = sorted(set(ctx.nodes) - set(addr))
    if len(addr) < 2:
        return [Finding(Status.SKIP, f"fewer than two nodes with a communication address ({len(addr)}); "
                        f"no address on: {', '.join(missing) or 'none'} (see env.comm)")]
    every, broken = results(ctx)
    res = [r for r in every if not r.untested]
    untested = _untested(every)
    note = "".join(f"; {len(u['pairs'])} pairs from {src} not tested: {u['reason']}" for src, u in sorted(untested.items()))
    if untested and not res and not broken:
        return [Finding(Status.SKIP, f"no pair could be tested{note}", {"untested": untested, "addresses": addr})]
    warn_rtt = float(ctx.params.get("warn_rtt_ms", 10.0))
    bad = [r for r in res if _bad(r)]
    weak = [r for r in res if _weak(r, warn_rtt)]
    findings = _node_findings(Status.FAIL, bad, res, addr, ctx)
    failed_nodes = {f.node for f in findings}
    findings += [f for f in _node_findings(Status.WARN, weak, res, addr, ctx) if f.node not in failed_nodes]
    details = {"pairs": len(res), "failed_pairs": len(bad), "weak_pairs": len(weak), "addresses": addr,
               "metrics": _metrics(res)}
    if len(addr) <= int(ctx.params.get("matrix_limit", 64)):
        details["matrix"] = {s: {r.dst: r.loss_pct for r in res if r.src == s} for s in sorted(addr)}
    if missing:
        details["no_address"] = missing
    if untested:
        details["untested"] = untested
    statuses = [f.status for f in findings] + ([Status.ERROR] if broken else [])
    status = worst(statuses)
    if broken:
        details["unreadable"] = broken
    if status is Status.PASS:
        rtts = [r.rtt_avg_ms for r in res if r.rtt_avg_ms is not None]
        return [passed(f"{len(res)} pairs between {len(addr)} nodes answer; max rtt {max(rtts, default=0):g} ms"
                       f"{note}", **details)]
    blamed = ", ".join(f.node for f in findings)
    summary = (f"{len(bad)} of {len(res)} pairs unreachable, {len(weak)} lossy or slow"
               + (f"; blamed: {blamed}" if blamed else "") + (f"; unreadable from {len(broken)} node(s)" if broken else "")
               + note)
    fix = "see the per-node results" if findings else "rerun; the mesh output of the listed nodes could not be read"
    return [Finding(status, summary, details, fix, action=graded(ACTIONS, None if bad else "weak"))] + findings
