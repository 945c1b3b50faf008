"""ib.link: every InfiniBand HCA port the job will use is Active / LinkUp at the expected rate.

What it checks: the port table from `ibstat`, else `ibstatus`, else /sys/class/infiniband
(whichever the node has, in that order). Every port with link layer InfiniBand, and every port
named in `ports` (`mlx5_0` or `mlx5_0:1`; RoCE ports, whose State follows their netdev, are judged
only when named there), must be State Active and Physical state LinkUp (Down / Polling / Disabled
fail, naming the port) and run at `rate` Gb/s (default: the rate most of the node's judged ports
have, so one port trained down to 200 on a 400G node fails).

Why it matters: NCCL uses every HCA it is given; one port Down or Polling (cable, switch port,
subnet manager) makes the ranks on that rail fail at connect or fall back to a slower path, and a
port at half rate slows every all-reduce of the job.

How to fix: check the cable and the switch port (`ibstat <ca>`; Polling means no link partner),
that the subnet manager runs (`sminfo`), and reseat or replace the transceiver; for a low rate
check the cable type and the switch port speed.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping

from preflight.checkapi import Probe, cmd, CommandOutput, Finding, Metric, Status, passed, require_ok, skipped
from preflight.nvidia import ibstat, probes as nv

ID = "ib.link"
SCOPE = "node"
BACKEND = "nvidia"
GATE = True
# What to do with a fail/warn (preflight/actions.py), as hccn.link grades a RoCE port.
ACTIONS = (
    (r"expected Active/LinkUp", "replace_hardware", "an IB port not Active/LinkUp: cable, transceiver or switch port"),
    (r"rate .* expected", "monitor", "a port below the expected rate: watch it, check the cable's rating"),
    (r"not found", "fix_config", "a port named in the inventory's `ports` that the node does not have"),
    ("", "fix_config", "ibstat / ibstatus / sysfs not readable"),
)
DEFAULTS: dict = {"rate": None, "ports": []}


@dataclass(frozen=True)
class Facts:
    source: str                       # ibstat | ibstatus | sysfs | none
    ports: tuple[ibstat.Port, ...] = ()


def probes(node, params) -> dict[str, Probe]:
    return {nv.IB_PROBE: cmd(nv.IB_PORTS)}


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    out = require_ok(outputs.get(nv.IB_PROBE), "ibstat / ibstatus / /sys/class/infiniband")
    source, ports = ibstat.read_probe(out.stdout)
    return Facts(source, tuple(ports))


def _named(port: ibstat.Port, wanted: list[str]) -> bool:
    return port.ca in wanted or port.name in wanted


def evaluate(facts: Facts, params, node) -> list[Finding]:
    if facts.source == "none":
        return [skipped("no InfiniBand HCA on this node (no ibstat, ibstatus or /sys/class/infiniband)")]
    wanted = [str(p) for p in params.get("ports") or []]
    judged = [p for p in facts.ports if p.link_layer == "InfiniBand" or _named(p, wanted)]
    missing = [w for w in wanted if not any(_named(p, [w]) for p in facts.ports)]
    rates = Counter(p.rate for p in judged if p.up and p.rate)
    expected = params.get("rate") or (rates.most_common(1)[0][0] if rates else None)
    metrics = [Metric("ib_rate", p.rate or 0, "Gb/s", {"port": p.name}).to_dict() for p in judged]
    problems = [f"port {w} not found ({facts.source})" for w in missing]
    bad: list[dict] = []
    for p in judged:
        if not p.up:
            text = f"{p.name} State {p.state}, Physical state {p.phys_state}, expected Active/LinkUp"
        elif expected and p.rate and p.rate < float(expected):
            text = f"{p.name} rate {p.rate:g} Gb/s, expected {float(expected):g}"
        else:
            continue
        problems.append(text)
        bad.append({"port": p.name, "state": p.state, "phys_state": p.phys_state, "rate": p.rate, "problem": text})
    if not judged and not problems:
        return [skipped(f"no InfiniBand port among {len(facts.ports)} RDMA port(s) ({facts.source}); name RoCE ports in `ports` to judge them")]
    if not problems:
        return [passed(f"{len(judged)} IB ports Active/LinkUp at {float(expected or 0):g} Gb/s ({facts.source})",
                       metrics=metrics)]
    return [Finding(Status.FAIL, "; ".join(problems), {
        "failed_ports": [b["port"] for b in bad] + missing, "ports": bad, "failed_devices": [],
        "expected_rate": expected, "source": facts.source, "metrics": metrics,
    }, remediation="Check the cable and switch port of each port named (`ibstat <ca>`; Polling means no link "
                   "partner), that the subnet manager runs (`sminfo`), and reseat or replace the transceiver")]
