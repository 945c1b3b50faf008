"""Kernel-log `NVRM: Xid` lines and what each Xid number means and asks for.

Line shape (real samples: tests/fixtures/nvidia/dmesg__*): the NVIDIA driver logs
`NVRM: Xid (PCI:0000:9b:00): 119, pid=..., name=..., <text>` (older drivers: `(0000:03:00)` without
`PCI:`; with MIG: `(PCI:0000:01:00 GPU-I:05)`), after a `[seconds]` or `[ctime]` dmesg stamp or
a syslog prefix in /var/log/kern.log. The PCI address is domain:bus:device of the GPU; it is
matched to the GPU's `Bus Id` from `nvidia-smi -q` (00000000:9B:00.0) to name the GPU index.

XID_TABLE: the meaning and resolution of the Xids that matter before a training job, from
NVIDIA's Xid catalogue ("Xid Errors", https://docs.nvidia.com/deploy/xid-errors/ and its
"Analyzing Xid Errors with the Xid Catalog" page for Ampere and newer GPUs; 48/63/64 also from
NVIDIA's "Dynamic Page Retirement" guide and, for row remapping, "NVIDIA A100 GPU Memory Error
Management", https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/). `status` is preflight's verdict for a node that logged
the Xid since boot: `fail` where NVIDIA's resolution is a GPU reset, a node reboot or service
(the GPU is not fit for a new job until that is done); `warn` where the resolution is restarting
the application (usually the job's own bug, worth knowing before the next one). An Xid that is not
in the table warns, naming the number, so nothing logged is dropped silently.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..model import Status


@dataclass(frozen=True)
class XidInfo:
    name: str       # the catalogue's description
    status: Status  # preflight's verdict (see module docstring)
    action: str     # what to do, after the catalogue's resolution bucket


RESET = "reset the GPU (`nvidia-smi -r -i {gpu}` with no process on it) or reboot the node; drain it if the Xid comes back"
REBOOT = "reboot the node (the GPU is gone from the bus until then); if it recurs check the PCIe slot, riser, power and cooling and open a hardware ticket"
APP = "restart the job; if it recurs with unchanged code, run `dcgmi diag -r 3` on the node"

XID_TABLE: dict[int, XidInfo] = {
    13: XidInfo("Graphics Engine Exception", Status.WARN, APP),
    31: XidInfo("GPU memory page fault", Status.WARN, APP),
    43: XidInfo("GPU stopped processing (reset channel verification error)", Status.WARN, APP),
    45: XidInfo("Preemptive cleanup, due to previous errors", Status.WARN, APP),
    48: XidInfo("Double Bit ECC Error (DBE)", Status.FAIL, RESET),
    61: XidInfo("Internal micro-controller breakpoint/warning", Status.FAIL, RESET),
    62: XidInfo("Internal micro-controller halt", Status.FAIL, RESET),
    # pending until the GPU is reset (NVIDIA GPU memory error management, "Row Remapping"): fails like
    # `Remapped Rows: Pending: Yes`; gpu.health warns only where -q says the remap was applied since
    63: XidInfo("ECC page retirement or row remapping recording event", Status.FAIL,
                "reset the GPU to activate the new retirement/remap (`nvidia-smi -r -i {gpu}`)"),
    64: XidInfo("ECC page retirement or row remapper recording failure", Status.FAIL, RESET),
    68: XidInfo("NVDEC0 Exception (video processor exception)", Status.WARN, APP),
    69: XidInfo("Graphics Engine class error", Status.WARN, APP),
    74: XidInfo("NVLINK Error", Status.FAIL, "check the NVLink state (`nvidia-smi nvlink --status`), then " + RESET),
    79: XidInfo("GPU has fallen off the bus", Status.FAIL, REBOOT),
    92: XidInfo("High single-bit ECC error rate", Status.WARN, "watch the ECC counters; reset the GPU at the next chance"),
    94: XidInfo("Contained ECC error", Status.WARN, APP),
    95: XidInfo("Uncontained ECC error", Status.FAIL, RESET),
    119: XidInfo("GSP RPC Timeout", Status.FAIL, RESET),
    120: XidInfo("GSP Error", Status.FAIL, RESET),
    154: XidInfo("GPU Recovery Action Changed", Status.FAIL, "do the recovery action the Xid 154 line names (reset or reboot), then re-run"),
}
UNKNOWN = XidInfo("not in preflight's table", Status.WARN, "look the Xid up in NVIDIA's Xid catalogue "
                  "(https://docs.nvidia.com/deploy/xid-errors/)")

# The action (preflight/actions.py) of each resolution bucket above: the Xid table is the one place
# an Xid is graded; gpu.health's ACTIONS rows are derived from it (`xid:N`, action_of).
BUCKET_ACTION = {APP: "restart_process", RESET: "reset_device", REBOOT: "reboot_node"}
CATALOGUE = "NVIDIA Xid catalogue (docs.nvidia.com/deploy/xid-errors)"


def action_of(info: XidInfo) -> str:
    """A bucket's action; a remediation of its own is a reset when the Xid fails, else watched."""
    return BUCKET_ACTION.get(info.action, "reset_device" if info.status is Status.FAIL else "monitor")


_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})[^)]*\): (?P<xid>\d+),\s*(?P<text>.*)$")


@dataclass(frozen=True)
class XidEvent:
    pci: str   # 0000:9b:00 (lower case), as the line gives it
    xid: int
    text: str  # the rest of the line, for the report

    @property
    def info(self) -> XidInfo:
        return XID_TABLE.get(self.xid, UNKNOWN)


def parse_kernel_log(text: str) -> list[XidEvent]:
    """Every `NVRM: Xid` line of a dmesg / journalctl -k / kern.log text, in order."""
    out = []
    for line in text.splitlines():
        m = _XID.search(line)
        if m:
            out.append(XidEvent(m.group("pci").lower(), int(m.group("xid")), m.group("text").strip()[:200]))
    return out


def bus_key(bus_id: str) -> str:
    """`00000000:9B:00.0` (nvidia-smi) or `0000:9b:00` (kernel log) -> `0000:9b:00`."""
    m = re.search(r"([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})", bus_id)
    if not m:
        return bus_id.lower()
    return f"{m.group(1)[-4:]}:{m.group(2)}:{m.group(3)}".lower()
