"""ib.link: every InfiniBand HCA port the job will use is Active / LinkUp at the expected rate.

What it checks: the port table from `ibstat`, else `ibstatus`, else /sys/class/infiniband
(whichever the node has, in that order). Every port with link layer InfiniBand, and every port
named in `ports` (`mlx5_0` or `mlx5_0:1`), is judged. An InfiniBand port must be State Active and
Physical state LinkUp (Down / Polling / Disabled fail, naming the port) and run at `rate` Gb/s
(default: the rate most of the node's judged IB ports have, so one port trained down to 200 on a
400G node fails). A RoCE port (link layer Ethernet; judged only when named in `ports`) is judged
through its netdev, found in /sys/class/infiniband/<ca>/ports/<p>/gid_attrs/ndevs/0, else
/sys/class/infiniband/<ca>/device/net/, else `ibdev2netdev`: the netdev's operstate must be `up`
with carrier (`mlx5_2 port 1 (RoCE, netdev ens3f0): netdev down` fails even while ibstat still
says Active), at `roce_rate` Gb/s (default: the majority of the node's judged RoCE ports) from the
netdev's `speed`; a RoCE port whose netdev no source names is judged by its ibstat State.

Why it matters: NCCL uses every HCA it is given; one port Down or Polling (cable, switch port,
subnet manager) makes the ranks on that rail fail at connect or fall back to a slower path, and a
port at half rate slows every all-reduce of the job. A RoCE port's RDMA state can read Active while
its Ethernet link is down; NCCL then times out at connect on that rail.

How to fix: check the cable and the switch port (`ibstat <ca>`; Polling means no link partner),
that the subnet manager runs (`sminfo`), and reseat or replace the transceiver; for a low rate
check the cable type and the switch port speed. For a RoCE port: `ip link show <netdev>`,
`ethtool <netdev>` (link detected, speed), `ip link set <netdev> up` when it is administratively
down, else the cable and the switch port.
Parameters: `rate` (none: the majority), `roce_rate` (none: the majority), `ports` ([]).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping

from preflight.checkapi import Policy, Probe, cmd, CommandOutput, Finding, Metric, Status, passed, require_ok, skipped
from preflight.checkhelpers import graded
from preflight.nvidia import ibstat, probes as nv, roce

ID = "ib.link"
SCOPE = "node"
POLICY = Policy(backend="nvidia", gate=True)
# What to do with a fail/warn (preflight/actions.py), as hccn.link grades a RoCE port.
ACTIONS = {
    "netdev_down": ("replace_hardware", "a RoCE port's netdev down: cable, transceiver, switch port, or `ip link set up`"),
    "port_down": ("replace_hardware", "an IB port not Active/LinkUp: cable, transceiver or switch port"),
    "slow": ("monitor", "a port below the expected rate: watch it, check the cable's rating"),
    "not_found": ("fix_config", "a port named in the inventory's `ports` that the node does not have"),
    "": ("fix_config", "ibstat / ibstatus / sysfs not readable"),
}
DEFAULTS: dict = {"rate": None, "roce_rate": None, "ports": []}


@dataclass(frozen=True)
class Facts:
    source: str                       # ibstat | ibstatus | sysfs | none
    ports: tuple[ibstat.Port, ...] = ()
    roce: roce.RoceMap = field(default_factory=roce.RoceMap)  # RoCE ports' netdevs and their state


def probes(node, params) -> dict[str, Probe]:
    return {nv.IB_PROBE: cmd(nv.IB_PORTS), nv.ROCE_PROBE: cmd(nv.ROCE_NETDEVS)}


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    out = require_ok(outputs.get(nv.IB_PROBE), "ibstat / ibstatus / /sys/class/infiniband")
    source, ports = ibstat.read_probe(out.stdout)
    netdevs = outputs.get(nv.ROCE_PROBE)
    # the netdev map is an aid: without it (older node, probe cut) RoCE ports fall back to ibstat
    rmap = roce.read_probe(netdevs.stdout) if netdevs is not None and netdevs.ok else roce.RoceMap()
    return Facts(source, tuple(ports), rmap)


def _named(port: ibstat.Port, wanted: list[str]) -> bool:
    return port.ca in wanted or port.name in wanted


@dataclass(frozen=True)
class _Judged:
    """One judged port: its up state and rate as the check sees them (a RoCE port's from its netdev)."""
    port: ibstat.Port
    up: bool
    rate: float | None
    label: str                  # how messages name it: `mlx5_4:1`, `mlx5_8 port 1 (RoCE, netdev ens3f0)`
    down_text: str              # why it is not up
    netdev: str | None = None

    @property
    def roce(self) -> bool:
        return self.port.link_layer == "Ethernet"


def _judge(p: ibstat.Port, rmap: roce.RoceMap) -> _Judged:
    ib_down = f"State {p.state}, Physical state {p.phys_state}, expected Active/LinkUp"
    if p.link_layer != "Ethernet":
        return _Judged(p, p.up, p.rate, p.name, ib_down)
    nd, source = rmap.netdev_of(p.ca, p.port)
    if nd is None:  # no source names its netdev: what ibstat says is all there is
        return _Judged(p, p.up, p.rate, p.name, ib_down + " (RoCE: no netdev found)")
    return _Judged(p, nd.up, nd.speed_gbps or p.rate, f"{p.ca} port {p.port} (RoCE, netdev {nd.name})",
                   f"netdev {nd.state_text()} (ibstat State {p.state}; netdev from {source})", nd.name)


def _expected(judged: list[_Judged], given) -> float | None:
    rates = Counter(j.rate for j in judged if j.up and j.rate)
    return float(given) if given else (float(rates.most_common(1)[0][0]) if rates else None)


def evaluate(facts: Facts, params, node) -> list[Finding]:
    if facts.source == "none":
        return [skipped("no InfiniBand HCA on this node (no ibstat, ibstatus or /sys/class/infiniband)")]
    wanted = [str(p) for p in params.get("ports") or []]
    judged = [_judge(p, facts.roce) for p in facts.ports if p.link_layer == "InfiniBand" or _named(p, wanted)]
    missing = [w for w in wanted if not any(_named(p, [w]) for p in facts.ports)]
    expected = {False: _expected([j for j in judged if not j.roce], params.get("rate")),
                True: _expected([j for j in judged if j.roce], params.get("roce_rate"))}
    metrics = [Metric("ib_rate", j.rate or 0, "Gb/s", {"port": j.port.name}).to_dict() for j in judged]
    problems = [f"port {w} not found ({facts.source})" for w in missing]
    codes = ["not_found" for _ in missing]
    bad: list[dict] = []
    for j in judged:
        want = expected[j.roce]
        if not j.up:
            text = f"{j.label}{': ' if j.netdev else ' '}{j.down_text}"
            codes.append("netdev_down" if j.netdev else "port_down")
        elif want and j.rate and j.rate < want:
            text = f"{j.label} rate {j.rate:g} Gb/s, expected {want:g}"
            codes.append("slow")
        else:
            continue
        problems.append(text)
        bad.append({"port": j.port.name, "state": j.port.state, "phys_state": j.port.phys_state, "rate": j.rate,
                    "link_layer": j.port.link_layer, "netdev": j.netdev, "problem": text})
    if not judged and not problems:
        return [skipped(f"no InfiniBand port among {len(facts.ports)} RDMA port(s) ({facts.source}); name RoCE ports in `ports` to judge them")]
    if not problems:
        ib = [j for j in judged if not j.roce]
        text = f"{len(ib)} IB ports Active/LinkUp at {float(expected[False] or 0):g} Gb/s ({facts.source})"
        ro = [j for j in judged if j.roce]
        if ro:
            text += f"; {len(ro)} RoCE port(s) up at {float(expected[True] or 0):g} Gb/s (" + ", ".join(
                f"{j.port.name} {j.netdev or 'no netdev found'}" for j in ro) + ")"
        return [passed(text, metrics=metrics)]
    return [Finding(Status.FAIL, "; ".join(problems), {
        "failed_ports": [b["port"] for b in bad] + missing, "ports": bad, "failed_devices": [],
        "expected_rate": expected[False], "expected_roce_rate": expected[True], "source": facts.source, "metrics": metrics,
    }, remediation="Check the cable and switch port of each port named (`ibstat <ca>`; Polling means no link "
                   "partner), that the subnet manager runs (`sminfo`), and reseat or replace the transceiver; for a "
                   "RoCE netdev: `ip link show <netdev>` / `ethtool <netdev>`, `ip link set <netdev> up` if it is "
                   "administratively down, else its cable and switch port", action=graded(ACTIONS, *codes))]
