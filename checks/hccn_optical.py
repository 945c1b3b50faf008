"""hccn.optical: every NPU's optical module is present, within its power limits, with no LOS/LOL.

What it checks, per logical device N, from `hccn_tool -i N -optical -g`:
* `present : present` (boards without optical modules, POD boards with Board ID 0x30/0x31/0x32/
  0x34 in `npu-smi info -t board`, are skipped with that reason);
* every `Tx Power<lane>` inside [`TxPower Low Thres`, `TxPower High Thres`] and every
  `Rx Power<lane>` inside the Rx thresholds, the module's own values (all in mW);
* `Tx/Rx Los Flag` and `Tx/Rx LoL Flag` are `0x0` (`NA` and `not supported` are tolerated);
* the module temperature inside its `Temp Low/High Thres` (outside warns).

Why it matters: a dirty fibre or dying module (`Rx Power1 : 0.0054 mW` against a low threshold of
0.1445 mW, `Rx Los Flag : 0xff`) keeps the link up or flapping while HCCL traffic stalls or
retransmits; the job hangs in its first all-reduce.

How to fix: clean the fibre connectors of the device's port and its switch port, reseat the
module, or replace the module/cable; confirm with `hccn_tool -i N -optical -g`. Skipped on
inference cards (310/310P). Metrics: optical_tx_power / optical_rx_power (mW, labels device and
lane), optical_temperature (C).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from preflight.ascend import hccn_common as common
from preflight.ascend import probes as ascend
from preflight.checkapi import Policy, CommandOutput, Finding, ParseError, Status, passed, skipped
from preflight.checkhelpers import first_line, graded, q
from preflight.ascend import hccn, npu_smi

ID = "hccn.optical"
SCOPE = "node"
POLICY = Policy(
    backend="ascend",
    trend_metric=("optical_rx_power", False),
    privilege="root",  # hccn_tool
)
NPU = "npu.idle"  # its facts are the parsed npu-smi table (ascend.probes.npu_table), read once a node
USES = (NPU,)
# What to do with a fail/warn (preflight/actions.py). Module fields: docs/FORMATS.md §3.4.
ACTIONS = {
    "temperature": ("monitor", "module temperature out of range: watch airflow before it fails"),
    "tool_failed": ("reset_device", "hccn_tool failing on a device (docs/FORMATS.md §3.10)"),
    "tool_missing": ("fix_config", "driver tools not installed or mounted (docs/FAILURES.md row 22)"),
    "": ("replace_hardware", "power below threshold, Los/LoL flags, module absent: fibre or module (docs/FAILURES.md rows 13, 14)"),
}
DEFAULTS = {"pod_board_ids": ["0x30", "0x31", "0x32", "0x34"]}
QUERIES = {"optical": "-optical -g"}
BOARD_PROBE = "board"
# (lane table, threshold prefix, metric name)
POWER_RULES = (("tx_power", "TxPower", "optical_tx_power"), ("rx_power", "RxPower", "optical_rx_power"))
FLAG_OK = ("0x0", "NA", "not supported")


@dataclass(frozen=True)
class DeviceOptical:
    optical: hccn.Optical | None
    error: str | None = None
    unsupported: bool = False
    not_present_error: bool = False  # "Optical module is not present." on stderr


@dataclass(frozen=True)
class Facts:
    skip: str | None
    missing_tool: str | None
    board_id: str | None = None  # of the first NPU, from npu-smi info -t board
    board_error: str | None = None  # why the board id could not be read (the POD exemption then not applied)
    devices: dict[int, DeviceOptical] = field(default_factory=dict)
    chips: dict[int, tuple[int, int]] = field(default_factory=dict)


probes = common.probes  # round 1: the shared npu-smi table


def followup(outputs, node, params, used):
    round2 = common.hccn_followup(outputs, node, QUERIES, used.get(NPU))
    table = ascend.npu_table(used.get(NPU))
    if round2 and table and table.chips:
        round2[BOARD_PROBE] = ascend.npu_smi_board(table.chips[0].npu)
    return round2


def _board_id(out: CommandOutput | None) -> tuple[str | None, str | None]:
    """(Board ID, why it could not be read). A refinement only: when npu-smi cannot say, the
    modules are judged as on any board, and the result says the POD exemption was not checked."""
    if out is None:
        return None, None
    if out.rc != 0:
        return None, f"npu-smi info -t board failed: {first_line(out.stdout or out.stderr) or f'exit code {out.rc}'}"
    try:
        return npu_smi.parse_board(out.stdout).get("Board ID"), None
    except ParseError as exc:
        return None, f"npu-smi info -t board: {exc.message}"


def _device(out: CommandOutput) -> DeviceOptical:
    err = common.device_error(out)
    if err:
        return DeviceOptical(None, err[0], common.is_unsupported(err[1]),
                             not_present_error="not present" in err[0])
    return DeviceOptical(hccn.parse_optical(out.stdout))


def parse(outputs: Mapping[str, CommandOutput], used: Mapping[str, Any]) -> Facts:
    run, devices = common.read_devices(outputs, used.get(NPU), QUERIES, "optical", "-optical -g", _device)
    if run.skip or run.missing_tool:
        return Facts(run.skip, run.missing_tool, chips=run.chips)
    board, board_error = _board_id(outputs.get(BOARD_PROBE))
    return Facts(None, None, board, board_error, devices, run.chips)


def _out_of_range(opt: hccn.Optical, table: str, prefix: str) -> list[str]:
    low, high = opt.thresholds.get(f"{prefix} Low Thres"), opt.thresholds.get(f"{prefix} High Thres")
    bad = [(lane, v) for lane, v in getattr(opt, table).items()
           if v is not None and ((low is not None and v < low) or (high is not None and v > high))]
    if not bad:  # the common case: no message to word
        return []
    name = prefix.replace("Power", " Power")
    return [f"{name}{lane} {v} mW outside [{low}, {high}]" for lane, v in sorted(bad)]


def _problems(dev: DeviceOptical) -> list[tuple[Status, str, str | None]]:
    """(status, message, problem in ACTIONS or None for the fallback) of each problem of one device."""
    if dev.error:
        if dev.not_present_error:
            return [(Status.FAIL, "optical module not present", None)]
        return [] if dev.unsupported else [(Status.FAIL, f"hccn_tool failed: {dev.error}", "tool_failed")]
    opt = dev.optical
    found = [] if opt.present == "present" else [(Status.FAIL, f"module {opt.present}, expected present", None)]
    for table, prefix, _ in POWER_RULES:
        found += [(Status.FAIL, msg, None) for msg in _out_of_range(opt, table, prefix)]
    found += [(Status.FAIL, f"{k} {v}, expected 0x0", None) for k, v in opt.flags.items() if v not in FLAG_OK]
    t_low, t_high = opt.thresholds.get("Temp Low Thres"), opt.thresholds.get("Temp High Thres")
    t = opt.temperature
    if t is not None and t_low is not None and t_high is not None and not t_low <= t <= t_high:
        found.append((Status.WARN, f"module temperature {t} C outside [{t_low}, {t_high}]", "temperature"))
    return found


def _metrics(facts: Facts) -> list[dict]:
    metrics = []
    for i, dev in facts.devices.items():
        if dev.optical is None:
            continue
        # Metric(...).to_dict()'s dicts built directly: ~100 a node, the Metric objects only cost
        device = str(i)
        for table, _, name in POWER_RULES:
            metrics += [{"name": name, "value": v, "unit": "mW", "labels": {"device": device, "lane": str(lane)}}
                        for lane, v in sorted(getattr(dev.optical, table).items()) if v is not None]
        if dev.optical.temperature is not None:
            metrics.append({"name": "optical_temperature", "value": dev.optical.temperature, "unit": "C",
                            "labels": {"device": device}})
    return metrics


def evaluate(facts: Facts, params, node) -> list[Finding]:
    frame = common.frame_findings(facts, node, graded(ACTIONS, "tool_missing"))
    if frame:
        return frame
    if facts.board_id and facts.board_id.lower() in [b.lower() for b in params["pod_board_ids"]]:
        return [skipped(f"POD board (Board ID {facts.board_id}): no optical modules on the NPU ports")]
    metrics = _metrics(facts)
    unread = {"board_id_unread": facts.board_error} if facts.board_error else {}
    bad = {i: p for i, d in facts.devices.items() if (p := _problems(d))}
    if not bad:
        return [passed(f"{len(facts.devices)} devices: optical module present, power within "
                       f"thresholds, LOS/LOL clear", metrics=metrics, **unread)]
    status = Status.FAIL if any(s is Status.FAIL for p in bad.values() for s, _, _ in p) else Status.WARN
    ids = " ".join(str(i) for i in bad)
    return [Finding(status, "; ".join(f"device {i} " + ", ".join(m for _, m, _ in p) for i, p in bad.items()), {
        "failed_devices": list(bad), "metrics": metrics, **unread,
        "devices": [common.device_ref(i, facts.chips, problems=[m for _, m, _ in p]) for i, p in bad.items()],
    }, action=graded(ACTIONS, *(c for p in bad.values() for _, _, c in p)), remediation=(f"Clean or replace the fibre and optical module of device(s) {ids} (and the switch "
                    f"port's), reseat the module, then confirm with `for i in {ids}; do "
                    f"{q(node.hccn_tool)} -i $i -optical -g; done`"))]
