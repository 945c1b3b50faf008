"""npu.health: npu-smi works, every expected NPU chip is there, and every chip is healthy.

What it checks: `npu-smi info` runs and prints its device table (every layout: 910B, A3 with
Phy-ID, 310/310P with Device, 910A/910ProB, the wide table of npu-smi 26.0); the number of chips
equals the inventory's `devices` (logical devices: 16 on an A3 node with 8 cards); every chip's
Health is `OK`. For a chip that is not OK it asks `npu-smi info -t health -i N -c M` and reports
Health Status, Error Code and Error Information. Warning warns; Alarm, Critical and UNKNOWN fail.

Why it matters: a chip in Alarm (e.g. `A4025021 8C03A000`, heartbeat lost) or missing from the
bus (a dropped card) makes the rank on it fail to start, and the whole job with it. npu-smi
failing with `dcmi model initialized failed, because the device is used. ret is -8020` means
another non-privileged container holds the NPUs; a wedged driver makes npu-smi hang (reported
as `error` at the probe timeout).

How to fix: look up the error codes in the product's black-box error code list, then reset the
chip (`npu-smi set -t reset -i N -c M`) or reboot the node; a missing chip needs `lspci | grep
d80` and a hardware ticket; for -8020 stop the container that has the NPUs mounted or mount
different cards (ASCEND_VISIBLE_DEVICES); a missing npu-smi means the driver is not installed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from preflight.ascend import probes as ascend
from preflight.checkapi import Policy, CommandOutput, Finding, ParseError, Probe, cmd, Status, passed, require_ok, tool_failure
from preflight.checkhelpers import graded, first_line, worst, q
from preflight.ascend import fault_codes, npu_smi

ID = "npu.health"
SCOPE = "node"
POLICY = Policy(
    backend="ascend",
    gate=True,
    privilege="root",  # npu-smi: root or the HwHiAiUser group
    privilege_group="HwHiAiUser",
)
NPU = "npu.idle"  # its facts are the parsed npu-smi table (ascend.probes.npu_table), read once a node
USES = (NPU,)
# What to do with a fail/warn (preflight/actions.py): the error codes by the vendor's own grading
# (preflight/data/npu_fault_codes.yaml), then the failures npu-smi itself reports.
ACTIONS = {
    **fault_codes.problems(),
    "tool_missing": ("fix_config", "driver not installed or not on PATH: docs/FAILURES.md row 22"),
    "device_used": ("restart_process", "another container holds the NPUs: docs/FAILURES.md rows 1, 23"),
    "card_lost": ("reboot_node", "a card off the PCIe bus: reboot, then a hardware ticket if it stays missing (docs/FAILURES.md row 2)"),
    "inventory": ("fix_config", "more chips than the inventory's devices: the inventory is wrong"),
    "no_code": ("reset_device", "unhealthy with no code: reset the chip as npu-smi's health page advises (docs/FAILURES.md row 3)"),
    "": ("reboot_node", "npu-smi failing otherwise: reload the driver or reboot (docs/FORMATS.md §1.5)"),
}
DEFAULTS: dict = {}
PROBE = ascend.NPU_SMI_PROBE
# Health column / Health Status value -> verdict (HIASCEND npusmi_027/028). Anything else fails.
VERDICTS = {"OK": Status.PASS, "Warning": Status.WARN, "Alarm": Status.FAIL,
            "Critical": Status.FAIL, "UNKNOWN": Status.FAIL}
# Known npu-smi failure text -> (problem in ACTIONS, the fix) (docs/FAILURES.md rows 1, 2, 23).
FIXES: tuple[tuple[str, str, str], ...] = (
    ("because the device is used", "device_used", "Stop the other container that has these NPUs mounted (`docker ps`, "
     "check its --device /dev/davinciN), or give this one different cards through ASCEND_VISIBLE_DEVICES"),
    ("Invalid card id", "card_lost", "A card dropped off the bus: compare `lspci | grep d80` with the expected card "
     "count, then reboot the node or open a hardware ticket"),
)


def _told(text: str) -> list[str]:
    """The problems (ACTIONS) npu-smi's own failure text names: its known errors and fault codes."""
    return [p for needle, p, _ in FIXES if needle in text] + fault_codes.codes_in(text)
DEFAULT_FIX = ("Check the driver: `cat {home}/driver/version.info`, `dmesg | grep -i davinci`; reload it "
               "or reboot the node")


@dataclass(frozen=True)
class Facts:
    missing: bool = False  # npu-smi not found (rc 127)
    tool_error: str | None = None  # npu-smi's own failure text, quoted
    table: npu_smi.InfoTable | None = None
    health: dict[tuple[int, int], npu_smi.Health] = field(default_factory=dict)  # (npu, chip) -> -t health
    health_errors: dict[tuple[int, int], str] = field(default_factory=dict)  # -t health's own failure line

    @property
    def chips(self) -> tuple[npu_smi.Chip, ...]:
        return self.table.chips if self.table else ()

    @property
    def driver_version(self) -> str | None:
        return self.table.driver_version if self.table else None


def probes(node, params) -> dict[str, Probe]:
    return {PROBE: cmd(ascend.NPU_SMI_INFO)}


def followup(outputs, node, params, used) -> dict[str, Probe]:
    """`-t health` only for chips that are not OK (an all-OK node costs nothing more)."""
    table = ascend.npu_table(used.get(NPU))
    if table is None:
        return {}
    return {f"health_{c.npu}_{c.chip}": ascend.npu_smi_health(c.npu, c.chip)
            for c in table.chips if c.health != "OK"}


def parse(outputs: Mapping[str, CommandOutput], used: Mapping[str, Any]) -> Facts:
    out = require_ok(outputs.get(PROBE), ascend.NPU_SMI_LABEL)  # a hang is an error, not a fail
    text = f"{out.stdout}\n{out.stderr}".strip()
    if out.rc == 127:
        return Facts(missing=True, tool_error=text)
    known = npu_smi.known_error(text)
    if known or out.rc != 0:
        return Facts(tool_error=known or text or f"exit code {out.rc}")
    table = _table(used)
    health, health_errors = {}, {}
    for name, o in outputs.items():
        m = re.fullmatch(r"health_(\d+)_(\d+)", name)
        if m and o.rc == 0:
            health[(int(m.group(1)), int(m.group(2)))] = npu_smi.parse_health(o.stdout)
        elif m:  # the follow-up failed: say so instead of "no error codes"
            line = npu_smi.known_error(f"{o.stdout}\n{o.stderr}") or first_line(o.stdout or o.stderr)
            health_errors[(int(m.group(1)), int(m.group(2)))] = line or f"exit code {o.rc}"
    return Facts(table=table, health=health, health_errors=health_errors)


def _table(used: Mapping[str, Any]) -> npu_smi.InfoTable:
    """npu.idle's reading of the same npu-smi output (rc 0, no known error): its table, or the
    error it met reading it (a text that is not the table), which is this check's too."""
    facts = used.get(NPU)
    if isinstance(facts, BaseException):
        raise facts
    if facts is None or facts.table is None:
        raise ParseError(f"npu-smi info: no table from {NPU} on this node")
    return facts.table


def _tool_failure(facts: Facts, node) -> Finding:
    if facts.missing:
        return replace(tool_failure(f"npu-smi not found: looked for {ascend.NPU_SMI_PATH_HINT}",
                                    output=facts.tool_error, remediation="Install the Ascend driver package (it ships "
                                    "/usr/local/bin/npu-smi), or add its directory to PATH for non-interactive SSH shells"),
                       action=graded(ACTIONS, "tool_missing"))
    fix = next((f for needle, _, f in FIXES if needle in facts.tool_error),
               DEFAULT_FIX.format(home=q(node.ascend_home)))
    return replace(tool_failure(f"npu-smi info failed: {facts.tool_error}", fix, output=facts.tool_error),
                   action=graded(ACTIONS, *_told(facts.tool_error)))


def _chip_problem(chip: npu_smi.Chip, health: npu_smi.Health | None,
                  health_error: str | None = None) -> tuple[Status, str, dict, list[str]] | None:
    # The table's Health and -t health's Health Status: the worse of the two counts.
    verdict = worst(VERDICTS.get(s, Status.FAIL) for s in (chip.health, health.status if health else "OK"))
    if verdict is Status.PASS:
        return None
    status = chip.health if chip.health != "OK" or not health else health.status
    codes = " ".join(health.error_codes) if health and health.error_codes else (
        f"unknown (npu-smi info -t health failed: {health_error})" if health_error else "none reported")
    msg = f"device {chip.logical_id} health {status}, expected OK; error codes {codes}"
    detail = {"device": chip.logical_id, "npu": chip.npu, "chip": chip.chip, "health": status,
              "error_codes": list(health.error_codes) if health else [],
              "error_information": health.information if health else ""}
    told = _told(codes) if codes != "none reported" else ["no_code"]  # the codes, or -t health's own failure
    return verdict, msg, detail, told


def evaluate(facts: Facts, params, node) -> list[Finding]:
    if facts.missing or facts.tool_error:
        return [_tool_failure(facts, node)]
    chips = facts.chips
    found = {c.logical_id for c in chips}
    problems = [p for c in chips if (p := _chip_problem(c, facts.health.get((c.npu, c.chip)),
                                                         facts.health_errors.get((c.npu, c.chip))))]
    findings_msgs = [m for _, m, _, _ in problems]
    failed = [d["device"] for _, _, d, _ in problems]
    told = [p for _, _, _, t in problems for p in t]
    status = Status.PASS
    if problems:
        status = Status.FAIL if any(s is Status.FAIL for s, _, _, _ in problems) else Status.WARN
    if len(chips) < node.devices:
        absent = [d for d in range(node.devices) if d not in found] if max(found, default=-1) < node.devices else []
        findings_msgs.insert(0, f"{len(chips)} chips listed by npu-smi, expected {node.devices} (inventory devices)"
                             + (f"; missing device(s) {' '.join(map(str, absent))}" if absent else ""))
        failed = absent + failed
        status = Status.FAIL
        told.append("card_lost")
    elif len(chips) > node.devices:
        findings_msgs.insert(0, f"{len(chips)} chips listed by npu-smi, inventory says devices: {node.devices}")
        status = Status.FAIL if status is Status.FAIL else Status.WARN
        told.append("inventory")
    if status is Status.PASS:
        return [passed(f"{len(chips)} chips, all Health OK (npu-smi {facts.table.tool_version}, "
                       f"driver {facts.table.driver_version})", layout=facts.table.layout)]
    return [Finding(status, "; ".join(findings_msgs), {
        "failed_devices": failed, "devices": [d for _, _, d, _ in problems], "chips_listed": len(chips),
        "devices_expected": node.devices,
    }, remediation=_remediation(problems, len(chips), node), action=graded(ACTIONS, *told))]


def _remediation(problems, listed: int, node) -> str:
    if problems:
        first = problems[0][2]
        return (f"Read the codes with `npu-smi info -t health -i {first['npu']} -c {first['chip']}` and look "
                f"them up in the product's black-box error code list; reset the chip with `npu-smi set -t "
                f"reset -i {first['npu']} -c {first['chip']}` or reboot the node, and drain it if it stays unhealthy")
    if listed < node.devices:
        return ("A chip is missing: compare `lspci | grep d80` with the expected count and `dmesg | grep -i "
                "davinci`; reboot the node or open a hardware ticket")
    return f"Set `devices: {listed}` for this node in the inventory (devices counts chips: 16 on an A3 node)"
