"""hccn.health: every NPU's network health detection reports `Success`.

What it checks: `hccn_tool -i N -net_health -g` prints `net health status: Success` for every
logical device N. `Init` (detection initialising, usually because no detect IP is configured)
warns; every other status fails: `Socket fail`/`Socket failed`, `Receive timeout`, `Unreachable`,
`Time exceeded`, `Fault`, `Thread error`, `Detect ip set`, `Unknown` (docs/FORMATS.md §3.2).

Why it matters: the device probes its detect IP over the RoCE port; a failing probe means the
device cannot reach its network peer, and HCCL will time out building links (EI0006/EI0009).

How to fix: configure the detect IP (normally the switch gateway of the device's subnet) with
`hccn_tool -i N -netdetect -s address <gateway-ip>`, then check link, IP and optical module
(`hccn_tool -i N -link -g`, `-ip -g`, `-optical -g`). Do not use a board-internal vNIC address
as the detect IP (that gives `Receive timeout`). Skipped on inference cards (310/310P).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from preflight.ascend import hccn_common as common
from preflight.checkapi import Policy, CommandOutput, Finding, Status, passed
from preflight.checkhelpers import graded, q, worst
from preflight.ascend import hccn

ID = "hccn.health"
SCOPE = "node"
POLICY = Policy(
    backend="ascend",
    privilege="root",  # hccn_tool
)
NPU = "npu.idle"  # its facts are the parsed npu-smi table (ascend.probes.npu_table), read once a node
USES = (NPU,)
# What to do with a fail/warn (preflight/actions.py). States: docs/FORMATS.md §3.2 (DRV g_net_health_status).
ACTIONS = {
    "init": ("fix_config", "Init: detection initialising, usually no detect IP configured (§3.2 code 6)"),
    "detect_ip_set": ("monitor", "Detect ip set: the detect address is being set (§3.2 code 8)"),
    "stack_failed": ("reset_device", "Socket fail / Thread error: the device's own network stack failed (§3.2 codes 1, 7)"),
    "no_answer": ("fix_config",
                  "the detect address does not answer: wrong detect IP or route (§3.2 codes 2-5, docs/FAILURES.md row 12)"),
    "tool_missing": ("fix_config", "driver tools not installed or mounted (docs/FAILURES.md row 22)"),
    "": ("reset_device", "hccn_tool failing on a device, or an Unknown state: reset the chip (docs/FORMATS.md §3.10)"),
}
# Status prefix -> problem (ACTIONS), as DRV g_net_health_status names the states (docs/FORMATS.md §3.2).
STATE_PROBLEMS: tuple[tuple[str, str], ...] = (
    ("Init", "init"), ("Detect ip set", "detect_ip_set"), ("Socket fail", "stack_failed"),
    ("Thread error", "stack_failed"), ("Receive timeout", "no_answer"), ("Unreachable", "no_answer"),
    ("Time exceeded", "no_answer"), ("Fault", "no_answer"),
)
DEFAULTS: dict = {}
QUERIES = {"net_health": "-net_health -g"}
# Status prefix -> verdict (DRV g_net_health_status; MC counts Success and Init as normal).
# Prefixes because the DRV source prints "Socket fail" and the MC fixture shows "Socket failed".
VERDICTS: tuple[tuple[str, Status], ...] = (
    ("Success", Status.PASS),
    ("Init", Status.WARN),
)


@dataclass(frozen=True)
class DeviceHealth:
    status: str | None  # as printed: "Success", "Socket failed", ...
    error: str | None = None  # hccn_tool's error line when the query failed
    unsupported: bool = False


@dataclass(frozen=True)
class Facts:
    skip: str | None
    missing_tool: str | None
    devices: dict[int, DeviceHealth] = field(default_factory=dict)
    chips: dict[int, tuple[int, int]] = field(default_factory=dict)


probes = common.probes  # round 1: the shared npu-smi table


def followup(outputs, node, params, used):
    return common.hccn_followup(outputs, node, QUERIES, used.get(NPU))


def _device(out: CommandOutput) -> DeviceHealth:
    err = common.device_error(out)
    if err:
        return DeviceHealth(None, err[0], common.is_unsupported(err[1]))
    return DeviceHealth(hccn.parse_net_health(out.stdout))


def parse(outputs: Mapping[str, CommandOutput], used: Mapping[str, Any]) -> Facts:
    run, devices = common.read_devices(outputs, used.get(NPU), QUERIES, "net_health", "-net_health -g", _device)
    return Facts(run.skip, run.missing_tool, devices, run.chips)


def verdict(status: str) -> Status:
    return next((v for prefix, v in VERDICTS if status.startswith(prefix)), Status.FAIL)


def _problem(dev: DeviceHealth) -> tuple[Status, str, str | None] | None:
    """(status, message, problem in ACTIONS or None for the fallback) of one device, or None."""
    if dev.error:
        return None if dev.unsupported else (Status.FAIL, f"hccn_tool failed: {dev.error}", None)
    v = verdict(dev.status or "")
    code = next((p for prefix, p in STATE_PROBLEMS if (dev.status or "").startswith(prefix)), None)
    return None if v is Status.PASS else (v, f"net health {dev.status}, expected Success", code)


def evaluate(facts: Facts, params, node) -> list[Finding]:
    frame = common.frame_findings(facts, node, graded(ACTIONS, "tool_missing"))
    if frame:
        return frame
    bad = {i: p for i, d in facts.devices.items() if (p := _problem(d))}
    if not bad:
        return [passed(f"{len(facts.devices)} devices: net health Success")]
    status = worst(s for s, _, _ in bad.values())
    ids = " ".join(str(i) for i in bad)
    only_init = status is Status.WARN
    fix = (f"Configure a detect IP for device(s) {ids}: `{q(node.hccn_tool)} -i N -netdetect -s address "
           f"<gateway of the device subnet>`" if only_init else
           f"Check link, IP and detect IP of device(s) {ids}: `for i in {ids}; do {q(node.hccn_tool)} -i $i "
           f"-link -g; {q(node.hccn_tool)} -i $i -ip -g; {q(node.hccn_tool)} -i $i -netdetect -g; done`, "
           f"then fix the cable/switch port or set the detect IP with -netdetect -s address <ip>")
    return [common.device_finding(status, {i: m for i, (_, m, _) in bad.items()}, facts.chips, fix,
                                  graded(ACTIONS, *(c for _, _, c in bad.values())))]
