"""Probe commands on Ascend nodes that several checks share, built in one place so that they are
byte-identical (the runner runs an identical command once per node) and the device ids they use
mean the same thing everywhere.

Device ids: `hccn_tool -i` takes the logical device id docs/SPEC.md §4.2 defines: the Phy-ID column of
`npu-smi info` on A3, the Device column on 310P, the Chip Logic ID of `npu-smi info -m` elsewhere
(on A2/A1 hosts that equals the NPU id of the table, which is what `logical_devices` uses unless
it is handed the `-m` output). When npu-smi gave nothing readable: range(node.devices).

Per-device loops: `hccn_loop(node, devices, args)` is ONE probe that runs `hccn_tool -i N <args>`
for every device, so 8 devices x 6 queries are 6 probes in one batch, not 48 round trips. Its
output shape, parsed back by `split_loop`::

    @@dev 0                 <- before each device
    <stdout and stderr of hccn_tool -i 0 ..., merged (2>&1), as printed>
    @@rc 0                  <- that device's exit code
    @@dev 1
    ...

When the hccn_tool binary is not executable, the probe prints `@@missing <path>` and exits 127
before running anything (a missing tool is a clear fail naming the path, not a parse error).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from ..checkapi import (CommandOutput, Finding, ParseError, Probe, Status, first_line, q, require_ok,
                       skipped)
from ..node import Node
from . import npu_smi

NPU_SMI_INFO = "npu-smi info"
NPU_SMI_MAP = "npu-smi info -m"
NPU_SMI_PATH_HINT = "npu-smi on the login PATH (normally /usr/local/bin/npu-smi, from the driver package)"
HCCN_CONF = "/etc/hccn.conf"
# `cat` of hccn.conf that tells "absent" (a normal case) from "unreadable" (a finding).
HCCN_CONF_CAT = (f"if [ -e {HCCN_CONF} ]; then cat {HCCN_CONF}; "
                 f"else echo '@@absent {HCCN_CONF}'; fi")
DEV_MARK, RC_MARK, MISSING_MARK = "@@dev", "@@rc", "@@missing"


def npu_smi_health(npu: int, chip: int) -> str:
    """`npu-smi info -t health -i N -c M` for one chip (ids from the table, so ints)."""
    return f"npu-smi info -t health -i {int(npu)} -c {int(chip)}"


def npu_smi_board(npu: int, chip: int | None = None) -> str:
    chip_arg = f" -c {int(chip)}" if chip is not None else ""
    return f"npu-smi info -t board -i {int(npu)}{chip_arg}"


def hccn(node: Node, dev: int, args: str) -> str:
    """One `hccn_tool -i <dev> <args>` call; `args` is literal text chosen by the check."""
    return f"{q(node.hccn_tool)} -i {int(dev)} {args}"


def hccn_loop(node: Node, devices: Iterable[int], args: str) -> str:
    """One probe running `hccn_tool -i N <args>` for every device (shape in the module docstring)."""
    tool = q(node.hccn_tool)
    ids = " ".join(str(int(d)) for d in devices)
    return (f"[ -x {tool} ] || {{ echo {q(MISSING_MARK + ' ' + node.hccn_tool)}; exit 127; }}; "
            f"for i in {ids}; do echo '{DEV_MARK} '$i; LC_ALL=C {tool} -i $i {args} 2>&1; "
            f"echo '{RC_MARK} '$?; done")


def split_loop(out: CommandOutput) -> dict[int, CommandOutput]:
    """`hccn_loop` output -> {device: CommandOutput(stdout=its text, rc=its exit code)}.

    Raises ParseError when the framing is broken (a device without its `@@rc` line: the loop was
    cut short)."""
    per_dev: dict[int, CommandOutput] = {}
    dev: int | None = None
    body: list[str] = []
    for line in out.stdout.splitlines():
        if line.startswith(DEV_MARK + " "):
            dev, body = int(line.split()[1]), []
        elif line.startswith(RC_MARK + " ") and dev is not None:
            per_dev[dev] = CommandOutput(stdout="\n".join(body) + ("\n" if body else ""),
                                         rc=int(line.split()[1]))
            dev = None
        elif dev is not None:
            body.append(line)
    if dev is not None:
        raise ParseError(f"hccn_tool loop: device {dev} has no exit code (output cut short)",
                         "\n".join(body))
    return per_dev


def hccn_missing(out: CommandOutput | None) -> str | None:
    """The hccn_tool path looked at, when the loop found no executable there."""
    if out is None:
        return None
    m = re.search(re.escape(MISSING_MARK) + r" (.+)", out.stdout)
    return m.group(1).strip() if m else None


def table_or_none(npu_smi_text: str | None) -> npu_smi.InfoTable | None:
    """The `npu-smi info` table, or None when the text is not a readable table."""
    if not npu_smi_text:
        return None
    try:
        return npu_smi.parse_info(npu_smi_text)
    except ParseError:
        return None


def logical_devices(npu_smi_text: str | None, node: Node, mapping_text: str | None = None) -> list[int]:
    """The hccn_tool device ids of a node, in table order (see module docstring)."""
    table = table_or_none(npu_smi_text)
    if table is not None and table.chips:
        if table.layout == "chip" and mapping_text:
            try:
                logic = {(r.npu, r.chip): r.logic_id for r in npu_smi.parse_mapping(mapping_text)}
                return [logic.get((c.npu, c.chip), c.npu) for c in table.chips]
            except ParseError:
                pass
        return [c.logical_id for c in table.chips]
    return list(range(node.devices))


def is_inference(npu_smi_text: str | None) -> bool:
    """310/310P inference cards: no RoCE ports, so hccn.* do not apply."""
    table = table_or_none(npu_smi_text)
    return bool(table and table.inference)


# ---- the common frame of the hccn.* checks ---------------------------------------------------------

NPU_SMI_PROBE = "npu_smi"  # probe name the hccn.* checks give NPU_SMI_INFO
INFERENCE_SKIP = "inference card ({name}): no RoCE ports, hccn_tool does not apply"
# hccn_tool errors that mean "this query does not exist here" rather than "this device is bad".
UNSUPPORTED = ("not supported on this product", "not supported inside a VM",
               "not supported by this optical module")


def hccn_followup(outputs, node: Node, queries: dict[str, str]) -> dict[str, Probe]:
    """Round 2 of an hccn.* check: one `hccn_loop` probe per query, over the devices npu-smi
    listed (none on inference cards)."""
    text = _stdout(outputs.get(NPU_SMI_PROBE))
    if is_inference(text):
        return {}
    devices = logical_devices(text, node)
    timeout = 30 + 5 * len(devices)  # hccn_tool answers in well under a second per device
    return {name: Probe(hccn_loop(node, devices, args), timeout=timeout) for name, args in queries.items()}


def _stdout(out: CommandOutput | None) -> str | None:
    return out.stdout if out is not None and out.rc == 0 else None


@dataclass(frozen=True)
class HccnRun:
    """What the hccn_tool loops of one check returned, before the check reads the per-device texts."""

    skip: str | None  # why the check does not apply on this node
    missing_tool: str | None  # the hccn_tool path looked at, when it is not there
    chips: dict[int, tuple[int, int]]  # logical device -> (npu, chip), from npu-smi
    outputs: dict[str, dict[int, CommandOutput]]  # query name -> device -> its output


def read_hccn(outputs, names: Iterable[str]) -> HccnRun:
    """Split the loops of `names`; ParseError if one of them did not run cleanly."""
    table = table_or_none(_stdout(outputs.get(NPU_SMI_PROBE)))
    chips = {c.logical_id: (c.npu, c.chip) for c in table.chips} if table else {}
    if table is not None and table.inference:
        name = table.chips[0].name if table.chips else table.layout
        return HccnRun(INFERENCE_SKIP.format(name=name), None, chips, {})
    per_name: dict[str, dict[int, CommandOutput]] = {}
    for name in names:
        out = outputs.get(name)
        missing = hccn_missing(out)
        if missing:
            return HccnRun(None, missing, chips, {})
        if out is None or out.timed_out or out.error:
            require_ok(out, f"hccn_tool loop {name}")
        per_name[name] = split_loop(out)
    return HccnRun(None, None, chips, per_name)


def device_error(out: CommandOutput) -> tuple[str, str] | None:
    """(line, reason) when hccn_tool failed on one device: a known error line, else a non-zero rc."""
    from . import hccn as hccn_parser

    found = hccn_parser.error_line(out.stdout)
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
                   remediation: str, **details) -> Finding:
    """The SPEC shape of a device-level fail/warn: `device N <problem>; ...` with failed_devices and
    the npu and chip of each device in details."""
    return Finding(status, "; ".join(f"device {i} {m}" for i, m in problems.items()), {
        "failed_devices": list(problems),
        "devices": [device_ref(i, chips, problem=m) for i, m in problems.items()],
        **details,
    }, remediation=remediation)


def frame_findings(run: HccnRun, node: Node) -> list[Finding] | None:
    """The results every hccn.* check gives before looking at devices (skip, tool missing)."""
    if run.skip:
        return [skipped(run.skip)]
    if run.missing_tool:
        return [Finding(
            Status.FAIL, f"hccn_tool not found at {run.missing_tool} (looked there: ascend_home "
            f"{node.ascend_home})", {"path": run.missing_tool, "failed_devices": []},
            remediation=f"Install the Ascend driver package on this node (it ships "
            f"{run.missing_tool}), or set ascend_home in the inventory to where driver/ lives; in a "
            f"container mount -v {node.ascend_home}/driver:{node.ascend_home}/driver")]
    return None
