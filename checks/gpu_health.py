"""gpu.health: nvidia-smi works, every expected GPU is there, and every GPU is fit to train.

What it checks, from `nvidia-smi -q` and the kernel log of the current boot:
* the number of GPUs equals the inventory's `devices`;
* ECC: uncorrectable errors since the driver loaded (`ECC Errors > Volatile`) fail; lifetime ones
  (`Aggregate`) warn;
* memory repair: `Remapped Rows > Pending: Yes` (a reset is needed to apply it) and `Remapping
  Failure Occurred: Yes` fail; on GPUs before Ampere `Retired Pages > Pending Page Blacklist: Yes`;
* `GPU Reset Status`: `Reset Required` or `Drain and Reset Recommended` is Yes;
* clock event reasons (called `Clocks Throttle Reasons` by older drivers): HW Slowdown, HW Thermal,
  HW Power Brake or SW Thermal Slowdown Active;
* PCIe: link width below the GPU's maximum (x8 on an x16 GPU) fails; generation below the
  maximum warns only on a busy GPU (an idle GPU drops to Gen 1 to save power: a real A10 sample
  shows `Current: 1` of `Max: 4` at P8);
* persistence mode Disabled warns (the first CUDA call then pays the driver load);
* on NVSwitch systems `Fabric > State: Completed, Status: Success`;
* `NVRM: Xid` lines: each Xid number is looked up in a table from NVIDIA's Xid catalogue
  (preflight/nvidia/xid.py): a reset/reboot/service Xid fails, an application-level one warns;
  Xid 63 fails unless the GPU's remap state says it was applied since;
* the other kernel-log lines an operator reads (preflight/nvidia/kernlog.py): a GPU fallen off
  the bus (with or without an Xid), `RmInitAdapter failed`, nouveau bound, NVSwitch SXid; each on
  the GPU whose PCI address it names, and a GPU the log names that nvidia-smi does not list fails.
  The kernel log is read without root where the system allows (dmesg, else journalctl -k -b);
  when it is not readable the result says so and the Xid part is left out.

Device ids: GPUs are named by their nvidia-smi index (PCI bus order), the number
`CUDA_VISIBLE_DEVICES` takes with `CUDA_DEVICE_ORDER=PCI_BUS_ID`.

Why it matters: one GPU with a pending row remap, an uncontained ECC error or a GSP timeout makes
its rank crash or hang inside NCCL, and the whole job with it; a GPU at x8 or in HW slowdown runs
the whole data-parallel group at its pace.

How to fix: the remediation names the GPU and the command: reset it (`nvidia-smi -r -i N`),
reboot for Xid 79, drain the node for a remapping failure, reseat for a degraded PCIe link,
check power and cooling for HW slowdown.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from preflight.checkapi import Policy, Probe, cmd, CommandOutput, Finding, Metric, ParseError, Status, passed
from preflight.checkhelpers import graded, worst
from preflight.nvidia import kernlog, nvidia_smi, probes as nv, smi_xml, xid

ID = "gpu.health"
SCOPE = "node"
POLICY = Policy(backend="nvidia", gate=True)
# What to do with a fail/warn (preflight/actions.py); the worst of a finding's problems wins. An Xid
# is graded by the Xid table itself (preflight/nvidia/xid.py, after NVIDIA's Xid catalogue), the
# other kernel-log lines by kernlog.RULES.
ACTIONS = {
    "ecc_volatile": ("reset_device", "volatile uncorrectable ECC: reset the GPU (NVIDIA memory error management)"),
    "ecc_aggregate": ("monitor", "aggregate ECC history: watch the count"),
    "remap_failed": ("replace_hardware", "a row that could not be remapped: the GPU needs replacing (nvidia-smi -q documentation)"),
    "reset_pending": ("reset_device",
                      "a pending row remap, page retirement or reset request takes effect at a GPU reset (nvidia-smi -q documentation)"),
    "slowdown": ("replace_hardware", "HW slowdown / power brake / thermal: the cooling or power hardware (nvidia-smi clocks event reasons)"),
    "pcie_width": ("reboot_node", "a PCIe link below its width retrains at reboot; reseat the GPU if it stays degraded"),
    "pcie_gen": ("monitor", "PCIe generation below the maximum while busy: watch it"),
    "fabric": ("restart_process", "fabric not ready: restart nvidia-fabricmanager (NVIDIA Fabric Manager guide)"),
    "persistence": ("fix_config", "persistence mode: nvidia-smi -pm 1 or nvidia-persistenced"),
    "gpu_count": ("reboot_node", "a GPU missing from nvidia-smi: reboot, then a hardware ticket"),
    "missing_gpu": ("reboot_node", "a GPU the kernel log names but nvidia-smi does not list"),
    **{f"xid:{n}": (xid.action_of(info), f"Xid {n} {info.name}: {xid.CATALOGUE}") for n, info in sorted(xid.XID_TABLE.items())},
    "xid": ("monitor", f"an Xid not in the table: {xid.CATALOGUE}"),
    **{f"log:{r.kind}": (r.action, r.source) for r in kernlog.RULES},  # a kind's rows grade alike
    "gpu_lost": ("reboot_node", "nvidia-smi: 'GPU is lost. Reboot the system to recover this GPU'"),
    "": ("reboot_node", "nvidia-smi failing otherwise: reload the driver or reboot"),
}
DEFAULTS = {"require_persistence": True}

FIXES = {
    "ecc": "reset GPU {gpu} (`nvidia-smi -r -i {gpu}` with no process on it); if uncorrectable errors come back, drain the node and open a hardware ticket",
    "remap_pending": "reset GPU {gpu} (`nvidia-smi -r -i {gpu}`) or reboot the node to apply the pending row remap",
    "remap_failed": "drain the node: GPU {gpu} could not remap a failed row and needs replacing (hardware ticket)",
    "reset": "reset GPU {gpu} (`nvidia-smi -r -i {gpu}`) or reboot the node",
    "slowdown": "check power and cooling of GPU {gpu} (`nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE`); a power brake is asserted by the board/BMC",
    "pcie": "reseat GPU {gpu} or its riser and check `lspci -vv -s <bus>` LnkSta; compare with the other GPUs of the node",
    "fabric": "start or restart nvidia-fabricmanager (`systemctl status nvidia-fabricmanager`) and check the NVSwitches",
    "persistence": "enable persistence mode: `nvidia-smi -pm 1` (or the nvidia-persistenced service)",
}


# nvidia-smi -q Yes/No fields (nvidia_smi.FLAGS) that fail a GPU: (flag, problem, fix key, ACTIONS problem)
FLAG_PROBLEMS = (
    ("remap_failed", "row remapping failure occurred (Remapped Rows: Remapping Failure Occurred: Yes)", "remap_failed",
     "remap_failed"),
    ("remap_pending", "row remap pending (Remapped Rows: Pending: Yes): needs a GPU reset", "remap_pending", "reset_pending"),
    ("retired_pending", "retired page pending (Pending Page Blacklist: Yes): needs a GPU reset", "remap_pending",
     "reset_pending"),
    ("reset_required", "GPU Reset Status: Reset Required: Yes", "reset", "reset_pending"),
    ("drain_and_reset", "GPU Reset Status: Drain and Reset Recommended: Yes", "reset", "reset_pending"),
)


@dataclass(frozen=True)
class Facts:
    tool_error: Finding | None = None
    report: nvidia_smi.QueryReport | None = None
    log_source: str = ""           # dmesg | journalctl -k -b | unreadable
    log_error: str = ""
    events: tuple[kernlog.LogEvent, ...] = field(default_factory=tuple)  # Xid and the other driver lines


def probes(node, params) -> dict[str, Probe]:
    return {nv.QUERY_PROBE: cmd(nv.NVIDIA_SMI_Q), nv.KERNEL_PROBE: cmd(nv.KERNEL_LOG)}


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    out = nv.read_smi(outputs, nv.QUERY_PROBE, nv.QUERY_LABEL)
    if isinstance(out, Finding):
        return Facts(tool_error=out)
    report = smi_xml.read_query(out.stdout)
    if report.attached is not None and report.attached != len(report.gpus):
        raise ParseError(f"nvidia-smi -q: 'Attached GPUs : {report.attached}' but {len(report.gpus)} GPU "
                         f"block(s) printed (output cut short)", out.stdout[-2000:])
    log = outputs.get(nv.KERNEL_PROBE)
    source, text, error = "unreadable", "", "the kernel-log probe did not run"
    if log is not None and log.ok:
        source, text = nv.split_source(log)
        error = text.strip().splitlines()[0] if source == "unreadable" and text.strip() else ""
    return Facts(report=report, log_source=source, log_error=error,
                 events=tuple(kernlog.parse(text)) if source != "unreadable" else ())


def _gpu_problems(g: nvidia_smi.QueryGpu, params) -> list[tuple[Status, str, str, str]]:
    """(status, problem, fix key, ACTIONS problem) for one GPU."""
    out: list[tuple[Status, str, str, str]] = []
    vol, agg = g.uncorrectable("Volatile"), g.uncorrectable("Aggregate")
    if vol:
        out.append((Status.FAIL, f"{vol} uncorrectable ECC error(s) since the driver loaded (volatile), expected 0", "ecc",
                    "ecc_volatile"))
    elif agg:
        out.append((Status.WARN, f"{agg} uncorrectable ECC error(s) over its lifetime (aggregate), expected 0", "ecc",
                    "ecc_aggregate"))
    out += [(Status.FAIL, text, fix, problem) for name, text, fix, problem in FLAG_PROBLEMS if g.flag(name)]
    active = [r for r in nvidia_smi.HW_SLOWDOWN_REASONS if g.clock_reasons.get(r)]
    if active:
        out.append((Status.FAIL, f"clocks slowed down: {', '.join(active)} Active, expected Not Active", "slowdown",
                    "slowdown"))
    p = g.pcie()
    if p["width_current"] and p["width_max"] and p["width_current"] < p["width_max"]:
        out.append((Status.FAIL, f"PCIe link x{p['width_current']}, expected x{p['width_max']}", "pcie", "pcie_width"))
    if p["gen_current"] and p["gen_max"] and p["gen_current"] < p["gen_max"] and not g.idle:
        out.append((Status.WARN, f"PCIe Gen{p['gen_current']} while busy, expected Gen{p['gen_max']}", "pcie", "pcie_gen"))
    state, status = g.fabric
    if state and state != "N/A" and (state != "Completed" or (status or "") != "Success"):
        out.append((Status.FAIL, f"NVSwitch fabric State {state}, Status {status}, expected Completed/Success", "fabric",
                    "fabric"))
    if params.get("require_persistence", True) and g.persistence == "Disabled":
        out.append((Status.WARN, "persistence mode Disabled, expected Enabled", "persistence", "persistence"))
    return out


def _xid63(g: nvidia_smi.QueryGpu | None) -> tuple[Status, str]:
    """Xid 63 (a row remap / page retirement recorded) and the GPU's memory-repair state agree: a
    pending repair fails wherever it is seen; applied since (`Pending: No` under Remapped Rows, or
    Retired Pages on GPUs before Ampere) it only warns. NVIDIA GPU memory error management."""
    if g is None:
        return Status.FAIL, ""
    for flag, path in (("remap_pending", nvidia_smi.FLAGS["remap_pending"]), ("retired_pending", nvidia_smi.FLAGS["retired_pending"])):
        if g.flag(flag):
            return Status.FAIL, f" ({path[0]}: {path[1]}: Yes)"
        if g.get(*path) == "No":
            return Status.WARN, f" (applied since: {path[0]}: {path[1]}: No)"
    return Status.FAIL, ""


def _log_problems(facts: Facts, gpus: tuple[nvidia_smi.QueryGpu, ...]) -> dict[int | None, list[tuple[Status, str, str, tuple[str, ...]]]]:
    """(status, problem, fix, ACTIONS problems) per GPU index (None: the node) from the kernel log's
    events. A GPU the log names by PCI address that nvidia-smi does not list fails the node,
    whatever the line."""
    by_bus = {xid.bus_key(g.bus_id): g for g in gpus}
    out: dict[int | None, list[tuple[Status, str, str, tuple[str, ...]]]] = {}
    seen: set[tuple[str | None, str, int | None]] = set()
    for ev in facts.events:
        if (ev.pci, ev.kind, ev.code) in seen:
            continue  # one line per (device, kind, code): Xid 119 repeats every few seconds
        seen.add((ev.pci, ev.kind, ev.code))
        g = by_bus.get(ev.pci) if ev.pci else None
        if ev.kind == "xid":
            info = xid.XID_TABLE.get(ev.code or 0, xid.UNKNOWN)
            status, note = _xid63(g) if ev.code == 63 else (info.status, "")
            problem, fix = f"Xid {ev.code} {info.name}{note} in the kernel log", info.action
            codes = (f"xid:{ev.code}" if ev.code in xid.XID_TABLE else "xid",)
        else:
            assert ev.rule is not None
            status, problem, fix = ev.rule.status, f"{ev.rule.name} in the kernel log", ev.rule.fix
            codes = (f"log:{ev.rule.kind}",)
        if ev.nvswitch:
            problem += f" (NVSwitch at PCI {ev.pci})"
        elif ev.pci and g is None:
            status, fix = Status.FAIL, kernlog.MISSING_FIX
            problem += f" (PCI {ev.pci}, missing from nvidia-smi)"
            codes += ("missing_gpu",)
        out.setdefault(g.index if g else None, []).append((status, f"{problem}: {ev.text}", fix, codes))
    return out


def evaluate(facts: Facts, params, node) -> list[Finding]:
    if facts.tool_error is not None:
        lost = facts.tool_error.details.get("lost_gpus")
        return [replace(facts.tool_error, action=graded(ACTIONS, "gpu_lost")) if lost else facts.tool_error]
    report = facts.report
    assert report is not None
    gpus = report.gpus
    problems: dict[int | None, list[tuple[Status, str, str, tuple[str, ...]]]] = {}
    for g in gpus:
        if p := _gpu_problems(g, params):
            problems[g.index] = [(st, text, FIXES[key], (code,)) for st, text, key, code in p]
    for gpu, items in _log_problems(facts, gpus).items():
        problems.setdefault(gpu, []).extend(items)
    metrics = [Metric("ecc_uncorrectable", g.uncorrectable("Volatile") or 0, "", {"device": str(g.index)}).to_dict()
               for g in gpus]
    lines, fixes, devices, named = [], [], [], []
    if len(gpus) != node.devices:
        named.append("gpu_count")
        lines.append(f"{len(gpus)} GPUs listed by nvidia-smi, expected {node.devices} (inventory devices)")
        fixes.append("A GPU is missing: compare `lspci -d 10de:` with the expected count and `dmesg | grep -i nvrm`; "
                     "reboot the node or open a hardware ticket" if len(gpus) < node.devices
                     else f"Set `devices: {len(gpus)}` for this node in the inventory")
    for gpu, items in problems.items():
        for status, text, fix, codes in items:
            named += codes
            lines.append(f"GPU {gpu} {text}" if gpu is not None else text)
            fixes.append(fix.format(gpu=gpu if gpu is not None else "<index>"))
            if gpu is not None:
                g = gpus[gpu]
                devices.append({"device": gpu, "bus_id": g.bus_id, "uuid": g.uuid, "problem": text})
    statuses = [s for items in problems.values() for s, _, _, _ in items]
    if len(gpus) < node.devices:
        statuses.append(Status.FAIL)
    elif len(gpus) > node.devices:
        statuses.append(Status.WARN)
    status = worst(statuses)
    log_note = (f"kernel log not readable ({facts.log_error or 'dmesg and journalctl refused'}): Xid history not checked"
                if facts.log_source == "unreadable" else f"no Xid or GPU error in the kernel log ({facts.log_source})")
    if status is Status.PASS:
        return [passed(f"{len(gpus)} GPUs healthy: no uncorrectable ECC, no pending remap, no slowdown, "
                       f"PCIe at full width; {log_note} (driver {report.driver_version}, CUDA {report.cuda_version})",
                       metrics=metrics, kernel_log=facts.log_source)]
    failed = sorted({d["device"] for d in devices})
    return [Finding(status, "; ".join(lines), {
        "failed_devices": failed, "devices": devices, "gpus_listed": len(gpus), "devices_expected": node.devices,
        "kernel_log": facts.log_source, "metrics": metrics,
    }, remediation="; ".join(dict.fromkeys(f[0].upper() + f[1:] for f in fixes)), action=graded(ACTIONS, *named))]
