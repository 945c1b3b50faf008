"""The kernel log as an operator reads it on a GPU node: Xid lines and the other driver messages
that say a GPU is gone, never came up, or is held by the wrong driver; each tied to the GPU (PCI
address) it names.

Real lines (tests/fixtures/nvidia/dmesg__*, each file's header names its source):

* `NVRM: Xid (PCI:0000:9b:00): 119, ...`: an Xid (preflight/nvidia/xid.py grades it).
* `NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.` (beside Xid 79, gpud's HGX sample), and
  drivers that log it with no Xid at all, over three lines, the address only on the first
  (NVIDIA/NVSentinel#155, driver 570)::

      NVRM: The NVIDIA GPU 0000:b3:00.0
                     NVRM: (PCI ID: 10de:26b5) installed in this system has
                     NVRM: fallen off the bus and is not responding to commands.

* `NVRM: GPU 0000:04:01.0: RmInitAdapter failed! (0x11:0x45:2525)`: the driver could not
  initialise that GPU (NVIDIA/gpu-operator#649: two GPUs of one node); older drivers leave the
  address out (`NVRM: RmInitAdapter failed! (0x26:0xffff:1375)`).
* `nouveau 0000:01:00.0: NVIDIA GP104 (134000a1)`: the open-source nouveau driver bound the GPU;
  the NVIDIA driver then says `NVRM: ... nouveau, rivafb, nvidiafb or rivatv ... was loaded and
  obtained ownership of the NVIDIA device(s).` (mattshma/bigdata#133).
* `nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up`: an NVSwitch
  error (SXid), Fatal or Non-fatal, naming the NVSwitch's own PCI address (gpud's HGX sample).

RULES is the table: what each line means, preflight's verdict, the action and the source. The
kernel-log probe (probes.KERNEL_LOG) keeps only lines that one of RULE_FILTER's words matches.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..model import Status
from . import xid

REBOOT = xid.REBOOT
NOUVEAU_FIX = ("blacklist nouveau (`echo 'blacklist nouveau' > /etc/modprobe.d/blacklist-nouveau.conf`, "
               "`update-initramfs -u` or `dracut -f`) and reboot, so the NVIDIA driver binds the GPU")
INIT_FIX = ("reboot the node; if the GPU still fails to initialise, check `dmesg | grep NVRM` for the reason "
            "(GSP firmware, BAR/Above-4G settings, power) and open a hardware ticket")
SXID_FATAL_FIX = ("reset the NVSwitch fabric: stop the GPU jobs, restart nvidia-fabricmanager or reboot the node; "
                  "if the SXid comes back, open a hardware ticket for that NVSwitch/link")
SXID_NONFATAL_FIX = "watch the NVSwitch (`nvidia-smi nvlink -e`); a non-fatal SXid that repeats needs a hardware ticket"
MISSING_FIX = ("a GPU the kernel log names is missing from nvidia-smi: reboot the node; if it stays missing "
               "(`lspci -d 10de:`), open a hardware ticket")

XID_CATALOGUE = xid.CATALOGUE
FABRIC_GUIDE = "NVIDIA Fabric Manager user guide, SXid errors (docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide)"


@dataclass(frozen=True)
class Rule:
    kind: str
    pattern: re.Pattern[str]   # group `pci`: the address it names, when it names one
    name: str                  # the line's meaning, in the finding
    status: Status
    action: str                # preflight/actions.py word
    fix: str
    source: str


_BDF = r"(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?"
RULES: tuple[Rule, ...] = (
    Rule("fallen_off_bus", re.compile(rf"NVRM: GPU {_BDF}: GPU has fallen off the bus"),
         "GPU has fallen off the bus", Status.FAIL, "reboot_node", REBOOT,
         f"Xid 79 in the {XID_CATALOGUE}; the line gpud's HGX sample logs beside it"),
    # the multi-line form: its address comes from the `The NVIDIA GPU <bdf>` line before it (parse())
    Rule("fallen_off_bus", re.compile(r"NVRM: (?:.*\s)?fallen off the bus and is not responding to commands"),
         "GPU has fallen off the bus (no Xid logged)", Status.FAIL, "reboot_node", REBOOT,
         "NVIDIA/NVSentinel#155 (driver 570, no Xid line); Xid 79 in the " + XID_CATALOGUE),
    Rule("init_failed", re.compile(rf"NVRM: (?:GPU {_BDF}: )?RmInitAdapter failed!(?P<code> \([^)]*\))?"),
         "RmInitAdapter failed: the driver could not initialise the GPU", Status.FAIL, "reboot_node", INIT_FIX,
         "NVIDIA/gpu-operator#649, NVIDIA/cuda-samples#104, NVIDIA/open-gpu-kernel-modules#789"),
    Rule("nouveau", re.compile(rf"nouveau {_BDF}: NVIDIA "),
         "the nouveau driver is bound to this NVIDIA GPU", Status.FAIL, "fix_config", NOUVEAU_FIX,
         "nouveau's probe line (`nouveau <bdf>: NVIDIA <chip>`); NVIDIA driver README, 'nouveau' conflicts"),
    Rule("nouveau", re.compile(r"NVRM: .*(?:nouveau, rivafb|obtained ownership of the NVIDIA device)"),
         "another driver (nouveau) holds the NVIDIA GPUs: the NVIDIA probe routine was not called", Status.FAIL,
         "fix_config", NOUVEAU_FIX, "mattshma/bigdata#133 (the NVIDIA driver's own message)"),
    Rule("sxid_fatal", re.compile(rf"nvidia-nvswitch\d+: SXid \(PCI:{_BDF}\): (?P<code>\d+), Fatal"),
         "NVSwitch fatal SXid", Status.FAIL, "reboot_node", SXID_FATAL_FIX, FABRIC_GUIDE),
    Rule("sxid_nonfatal", re.compile(rf"nvidia-nvswitch\d+: SXid \(PCI:{_BDF}\): (?P<code>\d+), Non-fatal"),
         "NVSwitch non-fatal SXid", Status.WARN, "monitor", SXID_NONFATAL_FIX, FABRIC_GUIDE),
)
# The words the probe's grep keeps (fixed strings): the Xid line, and a word of each rule above.
RULE_FILTER = ("NVRM: Xid", "fallen off the bus", "The NVIDIA GPU ", "RmInitAdapter failed", "nouveau", "SXid (PCI:")
_NVIDIA_GPU = re.compile(rf"NVRM: The NVIDIA GPU {_BDF}")


@dataclass(frozen=True)
class LogEvent:
    kind: str          # "xid" or a Rule's kind
    pci: str | None    # `0000:9b:00` (xid.bus_key form); None when the line names no device
    code: int | None   # the Xid or SXid number
    text: str          # the line's own words, for the report (200 characters at most)
    rule: Rule | None = None

    @property
    def nvswitch(self) -> bool:
        return self.kind.startswith("sxid")


def parse(text: str) -> list[LogEvent]:
    """Every Xid line and every RULES line of a dmesg / journalctl -k text, in order. A rule line
    without an address of its own (the multi-line fallen-off-the-bus form) takes the address of
    the `NVRM: The NVIDIA GPU <bdf>` line just before it."""
    out: list[LogEvent] = []
    last_gpu: str | None = None
    for line in text.splitlines():
        xids = xid.parse_kernel_log(line)
        if xids:
            out += [LogEvent("xid", ev.pci, ev.xid, ev.text) for ev in xids]
            continue
        m = _NVIDIA_GPU.search(line)
        if m:
            last_gpu = xid.bus_key(m.group("pci"))
        for rule in RULES:
            r = rule.pattern.search(line)
            if not r:
                continue
            pci = r.groupdict().get("pci")
            pci = xid.bus_key(pci) if pci else (last_gpu if rule.kind == "fallen_off_bus" else None)
            code = r.groupdict().get("code")
            out.append(LogEvent(rule.kind, pci, int(code) if code and code.isdigit() else None,
                                line[r.start():].strip()[:200], rule))
            break
    return out
