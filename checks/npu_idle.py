"""npu.idle: no process holds an NPU, and no HBM is held by a job that is not listed.

What it checks: the process table of `npu-smi info` lists no process (names may be blank when
the process lives in another container; one NPU can have several rows): any row fails, listing
NPU, chip, PID, name and memory. A chip whose HBM in use is above `max_hbm_used_pct` (10%) of its
total while no process is listed on it warns: memory held from another container or a zombie.
Chips without an HBM column (the 310 family: 310, 310P) show their DDR instead, and an idle chip's
DDR already holds the device's own firmware and OS, by an amount that depends on the product and its
mode (an idle Atlas 300I Duo holds 1462-1475 MB of 44 GB, an Atlas 300 with a 310 577 of 7759 MB, a
310 in RC mode runs the host's whole OS in it). With no known baseline the DDR is reported
(`hbm_used` metric, `details.ddr_not_judged`) but not judged, unless `max_ddr_used_pct` is set to
the baseline of the cluster's own cards.

Why it matters: a leftover job's process keeps its HBM and its HCCL ports; the new job's ranks
on that NPU run out of memory or fail to bind (`EJ0003 ... The IP address and port have been
bound already`).

How to fix: stop the process (`kill <pid>`, or `docker ps` / `kubectl get pods` to find the
container that owns it when the name is blank); when no process is listed but HBM is in use,
find the container holding /dev/davinciN (`lsof /dev/davinci<N>`) or reset the chip with
`npu-smi set -t reset -i N -c M`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from preflight.ascend import probes as ascend
from preflight.checkapi import Policy, CommandOutput, Finding, Probe, cmd, Metric, Status, passed, require_ok, tool_failure
from preflight.checkhelpers import first_line, graded
from preflight.ascend import npu_smi

ID = "npu.idle"
SCOPE = "node"
POLICY = Policy(
    backend="ascend",
    gate=True,
    on_busy="report",  # its process table decides whether a node is busy (busy() below)
    privilege="root",  # npu-smi: root or the HwHiAiUser group
    privilege_group="HwHiAiUser",
)
REQUIRES = ("npu.health",)  # npu-smi missing or failing is npu.health's red line, not a second one
# What to do with a fail/warn (preflight/actions.py).
ACTIONS = {
    "processes": ("restart_process", "a leftover job on the NPUs: stop it (docs/FAILURES.md row 1)"),
    "hbm_held": ("reset_device", "HBM in use with no process: memory held by a dead context, reset the chip"),
    "": ("monitor", "npu-smi gave no table, or DDR in use on a 310-family chip: see npu.health"),
}
DEFAULTS = {"max_hbm_used_pct": 10.0,
            "max_ddr_used_pct": None}  # 310/310P DDR: not judged unless set (the device OS's share is unknown)
PROBE = ascend.NPU_SMI_PROBE


@dataclass(frozen=True)
class Facts:
    unavailable: str | None  # npu-smi's own failure line, when it gave no table
    chips: tuple[npu_smi.Chip, ...] = ()
    processes: tuple[npu_smi.Process, ...] = ()
    table: npu_smi.InfoTable | None = None  # the whole table: the fact the other Ascend checks USE (ascend.probes.npu_table)


def probes(node, params) -> dict[str, Probe]:
    return {PROBE: cmd(ascend.NPU_SMI_INFO)}


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    out = require_ok(outputs.get(PROBE), ascend.NPU_SMI_LABEL)  # a hang is an error, not a fail
    if out.rc != 0:
        said = npu_smi.known_error(f"{out.stdout}\n{out.stderr}") or first_line(out.stdout or out.stderr)
        return Facts(f"npu-smi info failed: {said or f'exit code {out.rc}'}")
    table = npu_smi.parse_info(out.stdout)
    return Facts(None, table.chips, table.processes, table)


def busy(facts: Facts) -> int:
    """How many processes of a job run here (0: idle): the process table was read and lists them
    (`run --sweep` then reports the node busy instead of failing it)."""
    return len(facts.processes) if isinstance(facts, Facts) and not facts.unavailable else 0


def _has_hbm(chip: npu_smi.Chip) -> bool:
    return chip.hbm_total_mb is not None


def _used_pct(chip: npu_smi.Chip) -> float | None:
    """Device memory used in % of total: HBM, or on 310/310P (no HBM column) the DDR pair."""
    used, total = ((chip.hbm_used_mb, chip.hbm_total_mb) if _has_hbm(chip) else (chip.mem_used_mb, chip.mem_total_mb))
    return 100.0 * used / total if used is not None and total else None


def _limit(chip: npu_smi.Chip, params) -> float | None:
    """The judging threshold for this chip's memory: HBM's, or DDR's (None: DDR not judged)."""
    raw = params.get("max_hbm_used_pct") if _has_hbm(chip) else params.get("max_ddr_used_pct")
    return None if raw is None else float(raw)


def _ref(chip: npu_smi.Chip, **extra) -> dict:
    return {"device": chip.logical_id, "npu": chip.npu, "chip": chip.chip, **extra}


def evaluate(facts: Facts, params, node) -> list[Finding]:
    if facts.unavailable:  # reached only when npu.health is not selected: otherwise REQUIRES blocks
        return [tool_failure(facts.unavailable, "Fix npu-smi first: see `preflight explain npu.health`",
                             output=facts.unavailable)]
    by_pos = {(c.npu, c.chip): c for c in facts.chips}
    metrics = [Metric("hbm_used", c.hbm_used_mb if c.hbm_used_mb is not None else c.mem_used_mb or 0, "MB",
                      {"device": str(c.logical_id)}).to_dict() for c in facts.chips]
    if facts.processes:
        return [_busy(facts, by_pos, metrics)]
    held = [(c, pct, lim) for c in facts.chips
            if (pct := _used_pct(c)) is not None and (lim := _limit(c, params)) is not None and pct > lim]
    unjudged = [c.logical_id for c in facts.chips if not _has_hbm(c) and _limit(c, params) is None]
    extra = {"ddr_not_judged": unjudged} if unjudged else {}
    if held:
        return [Finding(Status.WARN, "; ".join(
            f"device {c.logical_id} {'HBM' if _has_hbm(c) else 'DDR'} {pct:.0f}% in use with no process listed, "
            f"expected at most {lim:g}%" for c, pct, lim in held), {
            "failed_devices": [c.logical_id for c, _, _ in held], "metrics": metrics, **extra,
            "devices": [_ref(c, hbm_used_mb=c.hbm_used_mb, hbm_total_mb=c.hbm_total_mb, mem_used_mb=c.mem_used_mb,
                             mem_total_mb=c.mem_total_mb) for c, _, _ in held],
        }, remediation=("Find the container or process holding the NPU (`lsof /dev/davinci<N>`, `docker ps`) "
                        "and stop it, or reset the chip with `npu-smi set -t reset -i <npu> -c <chip>`"),
            action=graded(ACTIONS, "hbm_held" if any(_has_hbm(c) for c, _, _ in held) else None))]
    hbm = [c for c in facts.chips if _has_hbm(c)]
    how = [f"HBM use at most {float(params['max_hbm_used_pct']):g}%"] if hbm else []
    if len(unjudged) < len(facts.chips) - len(hbm):
        how.append(f"DDR use at most {float(params['max_ddr_used_pct']):g}%")
    if unjudged:
        how.append("DDR use not judged (no HBM column: the 310 family's DDR holds the device's own OS; "
                   "set max_ddr_used_pct to judge it)")
    return [passed(f"{len(facts.chips)} chips idle: no process" + "".join(f", {h}" for h in how),
                   metrics=metrics, **extra)]


def _busy(facts: Facts, by_pos, metrics) -> Finding:
    rows = []
    for p in facts.processes:
        chip = by_pos.get((p.npu, p.chip))
        rows.append({"device": chip.logical_id if chip else None, "npu": p.npu, "chip": p.chip, "pid": p.pid,
                     "name": p.name, "memory_mb": p.memory_mb, "pid_in_container": p.pid_in_container})
    text = "; ".join(f"NPU {r['npu']} chip {r['chip']}: pid {r['pid']} {r['name'] or '(no name: other container)'} "
                     f"{r['memory_mb']} MB" for r in rows)
    failed = sorted({r["device"] for r in rows if r["device"] is not None})
    pids = " ".join(sorted({str(r["pid"]) for r in rows}))
    return Finding(Status.FAIL, f"{len(rows)} process(es) on NPUs, expected none: {text}", {
        "failed_devices": failed, "processes": rows, "devices": rows, "metrics": metrics,
    }, remediation=(f"Stop the leftover job: `kill {pids}` (for a blank name find the owning container with "
                    f"`docker ps` / `kubectl get pods -o wide` and stop it), then re-run preflight"),
        action=graded(ACTIONS, "processes"))
