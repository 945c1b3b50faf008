"""hccn.link: every NPU's RoCE port is UP, and has not been flapping.

What it checks: `hccn_tool -i N -link -g` prints `link status: UP` for every logical device N of
the node (the Phy-ID on A3, the NPU id on A2), and `hccn_tool -i N -link_stat -g` shows at most
one link-up event and no `LINK DOWN` record within the last 24 hours of the node's own clock.

Why it matters: HCCL builds its rings over these ports. A DOWN port makes communicator setup
fail (`EI0009 ... Create Dest error`, or `'device_ip' is not set correctly` with
HCCL_INTRA_ROCE_ENABLE=1); a flapping port passes a quick test and then stalls the job mid-step.

How to fix: check the cable and the switch port of the device (`hccn_tool -i N -link -g`,
`hccn_tool -i N -link_stat -g`); reseat or replace the optical module or cable
(`hccn_tool -i N -optical -g` shows its power levels); on the switch, look at the port's error
counters. Inference cards (310/310P) have no RoCE ports: the check is skipped there.
Parameters: `max_link_up_count` (1), `flap_window_hours` (24).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Mapping

from preflight.ascend import hccn_common as common
from preflight.checkapi import Policy, CommandOutput, Finding, Metric, Status, passed
from preflight.checkhelpers import graded, q, worst
from preflight.ascend import hccn

ID = "hccn.link"
SCOPE = "node"
POLICY = Policy(
    backend="ascend",
    gate=True,
    trend_metric=("link_up_count", True),
    privilege="root",  # hccn_tool
)
NPU = "npu.idle"  # its facts are the parsed npu-smi table (ascend.probes.npu_table), read once a node
USES = (NPU,)
# What to do with a fail/warn (preflight/actions.py). Link states: docs/FORMATS.md §3.1, §3.6.
ACTIONS = {
    "link_down": ("replace_hardware", "a DOWN RoCE port: cable, optical module or switch port (docs/FAILURES.md rows 9, 11)"),
    "flapping": ("monitor", "a port that went down and came back: watch it (docs/FAILURES.md row 16)"),
    "tool_missing": ("fix_config", "driver tools not installed or mounted (docs/FAILURES.md row 22)"),
    "": ("reset_device", "hccn_tool failing on a device: reset the chip (docs/FORMATS.md §3.10)"),
}
DEFAULTS = {"max_link_up_count": 1, "flap_window_hours": 24}
QUERIES = {"link": "-link -g", "link_stat": "-link_stat -g"}


@dataclass(frozen=True)
class DeviceLink:
    status: str | None  # "UP" | "DOWN"; None when hccn_tool failed (see error)
    error: str | None = None  # hccn_tool's error line
    unsupported: bool = False
    up_count: int | None = None  # from -link_stat; None when that query gave nothing
    down_records: tuple[str, ...] = ()  # "Tue Aug  1 14:44:40 2022" of LINK DOWN records
    recent_down_hours: float | None = None  # age of the newest LINK DOWN record, node clock
    stat_error: str | None = None  # -link_stat's own error line (not a "not supported" answer)


@dataclass(frozen=True)
class Facts:
    skip: str | None
    missing_tool: str | None
    devices: dict[int, DeviceLink] = field(default_factory=dict)
    chips: dict[int, tuple[int, int]] = field(default_factory=dict)  # device -> (npu, chip)


probes = common.probes  # round 1: the shared npu-smi table


def followup(outputs, node, params, used):
    return common.hccn_followup(outputs, node, QUERIES, used.get(NPU))


def _stat(out: CommandOutput | None) -> tuple[int | None, tuple[str, ...], float | None, str | None]:
    """(link-up count, LINK DOWN records newest first, age of the newest in hours, error line)."""
    err = common.device_error(out) if out is not None else None
    if out is None or err:
        # -link_stat is "not supported" on old drivers: no flap data, not a failure; any other
        # error line is the tool failing on that device (docs/writing-a-check.md §4)
        return None, (), None, (err[0] if err and not common.is_unsupported(err[1]) else None)
    stat = hccn.parse_link_stat(out.stdout)
    downs = [(when, raw) for when, what, raw in stat.records if what == "DOWN"]
    newest = max(downs, default=None)
    age = (stat.current_time - newest[0]) / timedelta(hours=1) if newest else None
    return stat.up_count, tuple(raw for _, raw in sorted(downs, reverse=True)), age, None


def _device(link: CommandOutput, stat: CommandOutput | None) -> DeviceLink:
    err = common.device_error(link)
    if err:
        return DeviceLink(None, error=err[0], unsupported=common.is_unsupported(err[1]))
    up_count, downs, age, stat_error = _stat(stat)
    return DeviceLink(hccn.parse_link(link.stdout), up_count=up_count, down_records=downs,
                      recent_down_hours=age, stat_error=stat_error)


def parse(outputs: Mapping[str, CommandOutput], used: Mapping[str, Any]) -> Facts:
    run, devices = common.read_devices(outputs, used.get(NPU), QUERIES, "link", "-link -g", _device, "link_stat")
    return Facts(run.skip, run.missing_tool, devices, run.chips)


def _problems(dev: DeviceLink, params) -> tuple[Status, str, str | None] | None:
    """The worst problem of one device, as (status, message, problem in ACTIONS or None), or None."""
    if dev.error and not dev.unsupported:
        return Status.FAIL, f"hccn_tool failed: {dev.error}", None
    if dev.status == "DOWN":
        return Status.FAIL, "link DOWN, expected UP", "link_down"
    if dev.stat_error:
        return Status.FAIL, f"hccn_tool -link_stat failed: {dev.stat_error}", None
    if dev.up_count is not None and dev.up_count > params["max_link_up_count"]:
        return Status.WARN, (f"link flapping: {dev.up_count} link-up events, expected at most "
                             f"{params['max_link_up_count']}"), "flapping"
    if dev.recent_down_hours is not None and dev.recent_down_hours <= params["flap_window_hours"]:
        return Status.WARN, (f"link flapping: LINK DOWN {dev.recent_down_hours:.1f} h ago "
                             f"({dev.down_records[0]}), within {params['flap_window_hours']} h"), "flapping"
    return None


def evaluate(facts: Facts, params, node) -> list[Finding]:
    frame = common.frame_findings(facts, node, graded(ACTIONS, "tool_missing"))
    if frame:
        return frame
    metrics = [Metric("link_up_count", d.up_count, "", {"device": str(i)}).to_dict()
               for i, d in facts.devices.items() if d.up_count is not None]
    bad = {i: p for i, d in facts.devices.items() if (p := _problems(d, params))}
    unsupported = [i for i, d in facts.devices.items() if d.unsupported]
    if not bad:
        judged = len(facts.devices) - len(unsupported)
        extra = {"unsupported_devices": unsupported} if unsupported else {}
        note = f" ({len(unsupported)} answered 'not supported': {' '.join(map(str, unsupported))})" if unsupported else ""
        return [passed(f"{judged} devices: RoCE link UP, no flapping{note}", metrics=metrics, **extra)]
    ids = " ".join(str(i) for i in bad)
    return [common.device_finding(worst(s for s, _, _ in bad.values()), {i: m for i, (_, m, _) in bad.items()},
                                  facts.chips, action=graded(ACTIONS, *(c for _, _, c in bad.values())),
                                  metrics=metrics, remediation=(
        f"Check the cable, optical module and switch port of device(s) {ids}: run "
        f"`for i in {ids}; do {q(node.hccn_tool)} -i $i -link -g; {q(node.hccn_tool)} -i $i "
        f"-link_stat -g; done` and reseat or replace the module/cable of the DOWN or flapping port"))]
