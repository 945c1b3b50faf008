"""hccn.ping_mesh: every NPU reaches the same-index NPU of every other node over the device network.

What it checks: with the device IPs hccn.ip read, device i of every node pings device i of every
other node (`hccn_tool -i i -ping -g address <ip> pkt 3`); `cross_rail: true` pings every device of
every other node instead. On a node, devices run in parallel and each device's pings run one after
another, because hccn_tool answers `hccn_tool is busy, please try again.` to a second concurrent call
on one device (that answer is retried once). A pair fails when no packet comes back or the body
shows `Destination Host Unreachable`, `recv time out seq` or `Message too long`. Blame follows
docs/SPEC.md §3.1 per device: a device that fails with most of its peers is named alone, an isolated bad
pair names both ends; the blamed devices go in `failed_devices` of their node's result.
`max_pairs` (0 = all) samples pairs evenly on big clusters.

Why it matters: HCCL's inter-node collectives run over these RoCE links. One unreachable device
pair stalls the ring (EI0009 `Transport init error`, `HcclCommPrepare fail, ret: 0x9` with a stale
device IP); the host network can be perfect while the device network is cut.

How to fix: on the blamed device check link, IP and gateway (`hccn_tool -i N -link -g`,
`-ip -g`, `-gateway -g`), the optical module (`-optical -g`) and the switch port / ACLs between the
two devices; re-run `hccn_tool -i N -ping -g address <peer ip>` by hand.
The -ping body is inferred (docs/FORMATS.md §3.5): a `N packets transmitted, N received, X% packet loss`
line, or one of the failure markers above.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from preflight.ascend import hccn_common as common
from preflight.ascend import probes as ascend
from preflight.checkapi import Policy, ClusterContext, Finding, Metric, Probe, Status, cmd, passed, sh
from preflight.checkhelpers import graded, Shell, seq, worst, q
from preflight.net import ping
from preflight.net.blame import blame_pairs, spread_pairs
from preflight.ascend import hccn


ID = "hccn.ping_mesh"
SCOPE = "cluster"
POLICY = Policy(
    disruptive=True,
    trend_metric=("ping_loss", True),  # the device mesh reports loss per pair, not RTT
    privilege="root",  # hccn_tool
    cost="network",
)
USES = ("hccn.ip", "hccn.link")  # hccn.link: devices already known DOWN are left out (one cause, one red line)
# What to do with a fail/warn (preflight/actions.py).
ACTIONS = {
    "unreadable": ("fix_config", "the mesh could not run on a node (docs/FAILURES.md row 22)"),
    "alone": ("replace_hardware", "one device that no peer reaches: its port, cable or module (docs/FAILURES.md row 9)"),
    "loss": ("monitor", "loss on some device pairs, none unreachable: a degrading link, watch it (docs/FAILURES.md row 9)"),
    "": ("fix_config", "isolated bad pairs: routes, gateways or switch ACLs (docs/FORMATS.md §3.5)"),
}
DEFAULTS: dict = {
    "pkt": 3,
    "cross_rail": False,  # every device pair instead of same-index devices only
    "max_pairs": 0,  # 0: all; else about this many, spread evenly over rails and nodes
    "per_ping_s": 6,  # upper bound of one hccn_tool -ping, for the probe timeout
}
PROBE = "hccn_mesh"
MARK = "@@preflight-hping"
FAILURE_MARKERS = ("Destination Host Unreachable", "recv time out seq", "Message too long")
BUSY = "hccn_tool is busy"

Endpoint = tuple[str, int]  # (node, device)


@dataclass(frozen=True)
class PairResult:
    src: Endpoint
    dst: Endpoint
    loss_pct: float | None  # None: no statistics line
    note: str = ""  # failure marker or hccn_tool error


def link_down(ctx: ClusterContext) -> list[Endpoint]:
    """Devices hccn.link saw DOWN: pinging them only repeats that finding under another name."""
    out = []
    for n in sorted(ctx.nodes):
        f = ctx.facts.get(n, {}).get("hccn.link")
        out += [(n, dev) for dev, d in sorted((getattr(f, "devices", None) or {}).items())
                if getattr(d, "status", None) == "DOWN"]
    return out


def device_ips(ctx: ClusterContext) -> dict[Endpoint, str]:
    down = set(link_down(ctx))
    out = {}
    for n in sorted(ctx.nodes):
        f = ctx.facts.get(n, {}).get("hccn.ip")
        for dev, d in sorted((getattr(f, "devices", None) or {}).items()):
            if d.ip and (n, dev) not in down:
                out[(n, dev)] = d.ip
    return out


def ping_pairs(ips: dict[Endpoint, str], cross_rail: bool, max_pairs: int) -> list[tuple[Endpoint, Endpoint]]:
    """Ordered endpoint pairs across nodes: per rail (ring-spread sampling as net.ping_mesh), or all
    device pairs between different nodes with `cross_rail`."""
    if cross_rail:
        eps = sorted(ips)
        every = [(a, b) for a in eps for b in eps if a[0] != b[0]]
        if max_pairs and len(every) > max_pairs:
            step = len(every) / max_pairs
            every = [every[math.floor(i * step)] for i in range(max_pairs)]
        return every
    rails = sorted({d for _, d in ips})
    budget = max(1, max_pairs // max(1, len(rails))) if max_pairs else 0
    out = []
    for dev in rails:
        nodes = [n for n, d in sorted(ips) if d == dev]
        out += [((s, dev), (t, dev)) for s, t in spread_pairs(nodes, budget)]
    return out


def script(tool: str, jobs: dict[int, list[tuple[str, int, str]]], pkt: int) -> Shell:
    """sh running each local device's pings in sequence, devices in parallel; `hccn_tool is busy`
    retried once after 1 s. Prints `@@preflight-hping <dev> <peer node> <peer dev> <ip> rc=<rc>`
    then that call's output, for every call."""
    lines = [sh("H={tool}; [ -x \"$H\" ] || {{ echo {missing}; exit 127; }}",
                tool=tool, missing=ascend.MISSING_MARK + " " + tool),
             sh("d=$(mktemp -d) || exit 70; trap 'rm -rf \"$d\"' EXIT"),
             sh("p() {{ LC_ALL=C \"$H\" -i $2 -ping -g address \"$3\" pkt {pkt} >\"$d/$1\" 2>&1; r=$?; "
                "if grep -q {busy} \"$d/$1\"; then sleep 1; LC_ALL=C \"$H\" -i $2 -ping -g address \"$3\" pkt {pkt} "
                ">\"$d/$1\" 2>&1; r=$?; fi; echo $r >\"$d/$1.rc\"; }}", pkt=int(pkt), busy=BUSY)]
    report, k = [], 0
    for dev, targets in sorted(jobs.items()):
        calls = []
        for peer, peer_dev, ip in targets:
            k += 1
            calls.append(sh("p {k} {dev} {ip}", k=k, dev=int(dev), ip=ip))
            report.append(sh("r=; read r <\"$d/\"{k}.rc; echo {line} rc=$r; cat \"$d/\"{k}",
                             k=k, line=f"{MARK} {dev} {peer} {peer_dev} {ip}"))
        lines.append(sh("( {calls:raw} ) &", calls=seq(calls)))
    return seq(lines + [sh("wait")] + report + [sh("")], "\n")


def plan(ctx: ClusterContext) -> dict[str, dict[str, Probe]]:
    p = ctx.params
    ips = device_ips(ctx)
    jobs: dict[str, dict[int, list[tuple[str, int, str]]]] = {}
    for (sn, sd), (tn, td) in ping_pairs(ips, bool(p.get("cross_rail")), int(p.get("max_pairs") or 0)):
        jobs.setdefault(sn, {}).setdefault(sd, []).append((tn, td, ips[(tn, td)]))
    out = {}
    for node, per_dev in jobs.items():
        longest = max(len(t) for t in per_dev.values())
        timeout = longest * (int(p["per_ping_s"]) * 2 + 1) + 30  # x2: the busy retry
        out[node] = {PROBE: cmd(script(ctx.nodes[node].hccn_tool, per_dev, int(p["pkt"])), timeout=timeout)}
    return out


def parse_call(body: str, rc: int | None) -> tuple[float | None, str]:
    """One -ping call -> (loss %, note). hccn_tool errors and failure markers count as total loss."""
    err = hccn.error_line(body)
    if err:
        return None, f"hccn_tool: {err[0]}"
    stats = ping.parse_stats(body)
    marker = next((m for m in FAILURE_MARKERS if m in body), "")
    if stats is not None:
        return (100.0 if marker and stats.received == 0 else stats.loss_pct), marker
    if marker:
        return 100.0, marker
    return None, f"no packet statistics (rc {rc}): {body.strip().splitlines()[-1][:150] if body.strip() else 'empty output'}"


def results(ctx: ClusterContext) -> tuple[list[PairResult], list[str]]:
    out, broken = [], []
    for src, outs in sorted(ctx.planned.items()):
        o = outs.get(PROBE)
        if o is None or o.timed_out or o.error or MARK not in o.stdout:
            missing = ascend.hccn_missing(o)
            broken.append(f"{src}: " + (f"hccn_tool not found at {missing}" if missing else
                                        (o.error or o.stderr.strip()[:200] or "no output") if o else "no output"))
            continue
        for head, body in _split(o.stdout):
            dev, peer, peer_dev, _ip, rc = head
            loss, note = parse_call(body, rc)
            out.append(PairResult((src, dev), (peer, peer_dev), loss, note))
    return out, broken


def _split(text: str):
    head, body = None, []
    for line in text.splitlines():
        if line.startswith(MARK + " "):
            if head:
                yield head, "\n".join(body)
            w = line.split()
            rc = w[5].removeprefix("rc=")
            head, body = (int(w[1]), w[2], int(w[3]), w[4], int(rc) if rc.isdigit() else None), []
        elif head:
            body.append(line)
    if head:
        yield head, "\n".join(body)


def _bad(r: PairResult) -> bool:
    return r.loss_pct is None or r.loss_pct >= 100.0


def _fmt(e: Endpoint) -> str:
    return f"{e[0]} device {e[1]}"


def _describe(r: PairResult, ips: dict[Endpoint, str]) -> str:
    what = f"{r.loss_pct:g}% loss" if r.loss_pct is not None else "no answer"
    return f"{_fmt(r.src)} -> {_fmt(r.dst)} ({ips.get(r.dst, '?')}) {what}" + (f" ({r.note})" if r.note else "")


def _findings(status: Status, bad: list[PairResult], tested: list[PairResult], ips, ctx) -> list[Finding]:
    blame = blame_pairs([(r.src, r.dst) for r in tested], [(r.src, r.dst) for r in bad])
    by_node: dict[str, set[int]] = {}
    for ep in blame.blamed:
        by_node.setdefault(ep[0], set()).add(ep[1])
    out = []
    for node, devs in sorted(by_node.items()):
        mine = [r for r in bad if (r.src[0] == node and r.src[1] in devs) or (r.dst[0] == node and r.dst[1] in devs)]
        alone = sorted(d for d in devs if (node, d) in blame.endpoints)
        paired = sorted(devs - set(alone))
        parts = ([f"device(s) {', '.join(map(str, alone))} fail with most peers"] if alone else []) + \
                ([f"device(s) {', '.join(map(str, paired))} in isolated bad pairs"] if paired else [])
        chips = getattr(ctx.facts.get(node, {}).get("hccn.ip"), "chips", {}) or {}
        tool = q(ctx.nodes[node].hccn_tool)
        d0 = sorted(devs)[0]
        fix = (f"on {node} check device {d0}: `{tool} -i {d0} -link -g`, `-ip -g`, `-gateway -g`, `-optical -g`, "
               f"and the switch port/ACL toward its peers; retry `{tool} -i {d0} -ping -g address <peer ip>`")
        out.append(Finding(status, f"{node}: {'; '.join(parts)}: " + "; ".join(_describe(r, ips) for r in mine[:4])
                           + (f" (+{len(mine) - 4} more)" if len(mine) > 4 else ""),
                           {"failed_devices": sorted(devs), "devices": [common.device_ref(d, chips) for d in sorted(devs)],
                            "pairs": [_describe(r, ips) for r in mine]}, fix, node=node,
                           action=graded(ACTIONS, "alone" if alone else None, "loss" if status is Status.WARN else None)))
    return out


def _metrics(res: list[PairResult]) -> list[dict[str, Any]]:
    return [Metric("ping_loss", r.loss_pct, "%", {"node": r.src[0], "device": str(r.src[1]), "peer": r.dst[0],
                                                   "peer_device": str(r.dst[1])}).to_dict()
            for r in res if r.loss_pct is not None]


def evaluate(ctx: ClusterContext) -> list[Finding]:
    ips = device_ips(ctx)
    if len({n for n, _ in ips}) < 2:
        return [Finding(Status.SKIP, f"fewer than two nodes with device IPs ({len({n for n, _ in ips})}); see hccn.ip")]
    res, broken = results(ctx)
    bad = [r for r in res if _bad(r)]
    weak = [r for r in res if not _bad(r) and r.loss_pct > 0]
    findings = _findings(Status.FAIL, bad, res, ips, ctx)
    failed = {f.node for f in findings}
    findings += [f for f in _findings(Status.WARN, weak, res, ips, ctx) if f.node not in failed]
    details: dict[str, Any] = {"pairs": len(res), "failed_pairs": len(bad), "lossy_pairs": len(weak),
                               "cross_rail": bool(ctx.params.get("cross_rail")), "metrics": _metrics(res)}
    if broken:
        details["unreadable"] = broken
    left_out = [f"{n} device {d}" for n, d in link_down(ctx)]
    if left_out:
        details["left_out_link_down"] = left_out  # hccn.link reports them
    status = worst([f.status for f in findings] + ([Status.ERROR] if broken else []))
    if status is Status.PASS:
        note = f" ({len(left_out)} device(s) with link DOWN left out: see hccn.link)" if left_out else ""
        return [passed(f"{len(res)} device pairs between {len({n for n, _ in ips})} nodes answer{note}", **details)]
    blamed = ", ".join(f"{f.node} {f.details['failed_devices']}" for f in findings)
    summary = (f"{len(bad)} of {len(res)} device pairs unreachable, {len(weak)} lossy"
               + (f"; blamed: {blamed}" if blamed else "") + (f"; unreadable from: {'; '.join(broken)}" if broken else ""))
    return [Finding(status, summary, details, "see the per-node results" if findings else
                    "check hccn_tool on the listed nodes and rerun",
                    action=graded(ACTIONS, "unreadable" if broken else None, None if bad else "loss"))] + findings
