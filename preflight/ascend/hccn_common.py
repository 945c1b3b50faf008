"""The common frame of the four hccn.* node checks (link, optical, ip, health).

Each of them reads the node's `npu-smi info` table from npu.idle's facts (USES = (NPU,), the table
parsed once a node: the logical device ids and whether the node has RoCE ports at all), asks
one `hccn_tool` loop per query in round 2 over those devices, and
reads the answers the same way: an inference card skips, a missing hccn_tool fails naming the
path, a device whose hccn_tool call printed an error line fails that device (unless the answer
means "not supported here"), a loop cut short is unreadable output (error). A check module takes
`probes` from here, calls `hccn_followup` with its QUERIES, `read_devices` in parse, and
`frame_findings` first in evaluate; what is left is only its own per-device judgement.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, TypeVar

from ..checkapi import CommandOutput, Finding, ParseError, Probe, Status, cmd, require_ok, skipped, tool_failure
from ..checkhelpers import first_line
from ..node import Node
from .hccn import error_line
from .probes import (NPU_SMI_INFO, NPU_SMI_PROBE, hccn_loop, hccn_missing, is_inference, logical_devices,
                     npu_table, split_alike, split_loop, stdout_if_ok, table_or_none)

T = TypeVar("T")


def probes(node: Node, params) -> dict[str, Probe]:
    """Round 1 of every hccn.* check: the npu-smi table (shared, so it runs once per node). Its
    parsed table comes from npu.idle's facts (a check USES npu.idle); the probe is asked here too so
    that npu-smi refused (root) is this check's refusal as well."""
    return {NPU_SMI_PROBE: cmd(NPU_SMI_INFO)}


OWN_TEXT = object()  # a cluster check's node probes: no facts handed over, the table is read from its own output


def table_of(outputs, npu: Any):
    """The npu-smi table: from npu.idle's facts (`npu`, what a node check that USES npu.idle is
    handed), or, for a cluster check's node probes (OWN_TEXT), read from its own npu-smi output."""
    return table_or_none(stdout_if_ok(outputs.get(NPU_SMI_PROBE))) if npu is OWN_TEXT else npu_table(npu)


INFERENCE_SKIP = "inference card ({name}): no RoCE ports, hccn_tool does not apply"
# hccn_tool errors that mean "this query does not exist here" rather than "this device is bad".
UNSUPPORTED = ("not supported on this product", "not supported inside a VM",
               "not supported by this optical module")


def hccn_followup(outputs, node: Node, queries: dict[str, str], npu: Any = OWN_TEXT) -> dict[str, Probe]:
    """Round 2 of an hccn.* check: one `hccn_loop` probe per query, over the devices npu-smi
    listed (none on inference cards)."""
    table = table_of(outputs, npu)
    if is_inference(table):
        return {}
    devices = logical_devices(table, node)
    timeout = 30 + 5 * len(devices)  # hccn_tool answers in well under a second per device
    return {name: cmd(hccn_loop(node, devices, args), timeout=timeout) for name, args in queries.items()}



@dataclass(frozen=True)
class HccnRun:
    """What the hccn_tool loops of one check returned, before the check reads the per-device texts."""

    skip: str | None  # why the check does not apply on this node
    missing_tool: str | None  # the hccn_tool path looked at, when it is not there
    chips: dict[int, tuple[int, int]]  # logical device -> (npu, chip), from npu-smi
    outputs: dict[str, dict[int, CommandOutput]]  # query name -> device -> its output


# The hccn_tool queries whose answer holds no address, counter, reading or time: every healthy
# device of every node prints the same text (`link status: UP`, `fec mode: rs FEC mode`, `net
# health status: Success`, the TLS settings), so their loops are split once a cluster
# (probes.split_alike). The others (-ip, -optical, -link_stat, -stat) differ from node to node.
ALIKE_ON_HEALTHY_NODES = frozenset({"-link -g", "-fec -g", "-tls -g", "-net_health -g"})


def read_hccn(outputs, queries: Mapping[str, str], npu: Any = OWN_TEXT) -> HccnRun:
    """Split the loops of `queries` (name -> hccn_tool arguments, a check's QUERIES); ParseError
    if one of them did not run cleanly."""
    table = table_of(outputs, npu)
    chips = {c.logical_id: (c.npu, c.chip) for c in table.chips} if table else {}
    if table is not None and table.inference:
        name = table.chips[0].name if table.chips else table.layout
        return HccnRun(INFERENCE_SKIP.format(name=name), None, chips, {})
    per_name: dict[str, dict[int, CommandOutput]] = {}
    for name, args in queries.items():
        out = outputs.get(name)
        missing = hccn_missing(out)
        if missing:
            return HccnRun(None, missing, chips, {})
        if out is None or out.timed_out or out.error:
            require_ok(out, f"hccn_tool loop {name}")
        per_name[name] = split_alike(out) if args in ALIKE_ON_HEALTHY_NODES else split_loop(out)
    return HccnRun(None, None, chips, per_name)


def device_error(out: CommandOutput) -> tuple[str, str] | None:
    """(line, reason) when hccn_tool failed on one device: a known error line, else a non-zero rc."""
    found = error_line(out.stdout)
    if found:
        return found
    if out.rc != 0:
        return (first_line(out.stdout) or f"exit code {out.rc}", f"hccn_tool exited with {out.rc}")
    return None


def is_unsupported(reason: str) -> bool:
    return any(u in reason for u in UNSUPPORTED)


def device_ref(dev: int, chips: dict[int, tuple[int, int]], **extra) -> dict:
    """One entry of details["devices"]: the logical id with the npu and chip it sits on."""
    npu, chip = chips.get(dev, (None, None))
    return {"device": dev, "npu": npu, "chip": chip, **extra}


def loop_devices(run: HccnRun, outputs, name: str, what: str) -> dict[int, CommandOutput]:
    """The per-device outputs of one query; an empty loop is unreadable output, not a pass."""
    per_dev = run.outputs[name]
    if not per_dev:
        raise ParseError(f"hccn_tool {what}: the device loop printed nothing", outputs[name].stdout)
    return per_dev


def device_finding(status: Status, problems: dict[int, str], chips: dict[int, tuple[int, int]],
                   remediation: str, action: str | None = None, **details) -> Finding:
    """The SPEC shape of a device-level fail/warn: `device N <problem>; ...` with failed_devices and
    the npu and chip of each device in details; `action` as the check graded the problems."""
    return Finding(status, "; ".join(f"device {i} {m}" for i, m in problems.items()), {
        "failed_devices": list(problems),
        "devices": [device_ref(i, chips, problem=m) for i, m in problems.items()],
        **details,
    }, remediation=remediation, action=action)


def frame_findings(run: HccnRun, node: Node, missing_action: str | None = None) -> list[Finding] | None:
    """The results every hccn.* check gives before looking at devices (skip, tool missing, graded
    `missing_action` as the check's ACTIONS say)."""
    if run.skip:
        return [skipped(run.skip)]
    if run.missing_tool:
        return [replace(tool_failure(
            f"hccn_tool not found at {run.missing_tool} (looked there: ascend_home "
            f"{node.ascend_home})", path=run.missing_tool,
            remediation=f"Install the Ascend driver package on this node (it ships "
            f"{run.missing_tool}), or set ascend_home in the inventory to where driver/ lives; in a "
            f"container mount -v {node.ascend_home}/driver:{node.ascend_home}/driver"), action=missing_action)]
    return None


def read_devices(outputs, npu: Any, queries: Mapping[str, str], name: str, what: str,
                 per_device: Callable[..., T], *extra: str) -> tuple[HccnRun, dict[int, T]]:
    """Parse step shared by the hccn.* checks: the run's frame, and `per_device(out, *extra_outs)`
    for every device of query `name` (`extra` names further queries whose per-device output, or
    None, is passed along). No devices when the frame already decides (skip, tool missing)."""
    run = read_hccn(outputs, queries, npu)
    if run.skip or run.missing_tool:
        return run, {}
    per_dev = loop_devices(run, outputs, name, what)
    return run, {d: per_device(o, *(run.outputs[e].get(d) for e in extra)) for d, o in per_dev.items()}
