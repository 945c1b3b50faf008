"""Probe commands on NVIDIA nodes that several checks share (byte-identical, so the runner runs
each once per node), and the tool-failure finding they share.

Kernel log (`KERNEL_LOG`): `dmesg` where the system lets this user read it (kernel.dmesg_restrict=0,
or root), else `journalctl -k -b` (members of adm / systemd-journal), filtered to the lines
preflight/nvidia/kernlog.py reads (a kernel log can be megabytes). The first output line says which source answered:
`@@source dmesg`, `@@source journalctl -k -b`, or `@@unreadable` followed by dmesg's own error line.
Kept: the lines kernlog.RULE_FILTER names (Xid, fallen off the bus, RmInitAdapter failed, nouveau, SXid).
Both sources cover the current boot only (the ring buffer may have wrapped on a long-running node).

IB ports (`IB_PORTS`): `ibstat`, else `ibstatus` (gpud falls back the same way when ibstat fails),
else /sys/class/infiniband; first line `@@source ibstat|ibstatus|sysfs`, or `@@none` when the node
has none of them.

RoCE netdevs (`ROCE_NETDEVS`, preflight/nvidia/roce.py): `@@map sysfs` with one `<ca> <port>
<netdev|->` line per Ethernet-link-layer port (its gid_attrs/ndevs/0, else the device/net entry
whose dev_port is port - 1) when /sys/class/infiniband exists, `@@map ibdev2netdev` with that
tool's lines when it is installed, then `@@net <if>` and the netdev's operstate, carrier and speed
for every netdev named (`@@net <if> missing` when /sys/class/net has no such entry).
"""
from __future__ import annotations

import re

from ..checkapi import CommandOutput, Finding, require_ok, sh, tool_failure
from ..checkhelpers import first_line
from .kernlog import RULE_FILTER

# Vendor tools run under the C locale (preflight/ascend/probes.py says why)
NVIDIA_SMI = sh("LC_ALL=C nvidia-smi")
# NVIDIA's machine interface first (preflight/nvidia/smi_xml.py), the text form where -x fails
NVIDIA_SMI_Q = sh("LC_ALL=C nvidia-smi -q -x 2>/dev/null || LC_ALL=C nvidia-smi -q")
QUERY_LABEL = "nvidia-smi -q"  # what a finding calls that probe
SMI_PROBE, QUERY_PROBE, KERNEL_PROBE, IB_PROBE = "nvidia_smi", "nvidia_smi_q", "kernel_log", "ib_ports"
ROCE_PROBE = "roce_netdevs"
# the lines preflight/nvidia/kernlog.py reads (its RULE_FILTER words), the last 500 of them
XID_FILTER = sh(" ".join(["grep -a -F"] + [f"-e {{w{i}}}" for i in range(len(RULE_FILTER))]) + " | tail -n 500",
                **{f"w{i}": w for i, w in enumerate(RULE_FILTER)})
KERNEL_LOG = sh(  # LC_ALL=C and grep -a: one non-UTF-8 byte must not turn an Xid line into "binary file matches"
    "LC_ALL=C; export LC_ALL; if dmesg >/dev/null 2>&1; then echo '@@source dmesg'; dmesg 2>/dev/null | " + XID_FILTER + "; "
    "elif journalctl -k -b -q --no-pager >/dev/null 2>&1; then echo '@@source journalctl -k -b'; "
    "journalctl -k -b -q --no-pager 2>/dev/null | " + XID_FILTER + "; "
    "else echo '@@unreadable'; dmesg 2>&1 | head -n 1; fi; true"
)
IB_PORTS = sh(  # braces doubled: sh() fills {fields}; this template has none
    "if command -v ibstat >/dev/null 2>&1 && ibstat >/dev/null 2>&1; then echo '@@source ibstat'; ibstat 2>&1; "
    "elif command -v ibstatus >/dev/null 2>&1 && ibstatus >/dev/null 2>&1; then echo '@@source ibstatus'; ibstatus 2>&1; "
    "elif [ -d /sys/class/infiniband ]; then echo '@@source sysfs'; "
    "for p in /sys/class/infiniband/*/ports/*; do [ -d \"$p\" ] || continue; "
    "ca=${{p%/ports/*}}; echo \"@@port ${{ca##*/}} ${{p##*/}}\"; "
    "for f in state phys_state rate link_layer; do printf '%s: ' $f; cat \"$p/$f\" 2>/dev/null || echo; done; done; "
    "else echo '@@none'; fi"
)
ROCE_NETDEVS = sh(  # braces doubled: sh() fills {fields}; this template has none
    "nds=''; "
    "if [ -d /sys/class/infiniband ]; then echo '@@map sysfs'; "
    "for p in /sys/class/infiniband/*/ports/*; do [ -d \"$p\" ] || continue; "
    "[ \"$(cat \"$p/link_layer\" 2>/dev/null)\" = Ethernet ] || continue; "
    "ca=${{p%/ports/*}}; ca=${{ca##*/}}; port=${{p##*/}}; nd=$(cat \"$p/gid_attrs/ndevs/0\" 2>/dev/null); "
    "if [ -z \"$nd\" ]; then for d in \"/sys/class/infiniband/$ca/device/net/\"*; do [ -d \"$d\" ] || continue; "
    "[ \"$(cat \"$d/dev_port\" 2>/dev/null || echo 0)\" = \"$((port - 1))\" ] && nd=${{d##*/}}; done; fi; "
    "echo \"$ca $port ${{nd:--}}\"; nds=\"$nds $nd\"; done; fi; "
    "if command -v ibdev2netdev >/dev/null 2>&1; then echo '@@map ibdev2netdev'; "
    "map=$(ibdev2netdev 2>/dev/null | head -n 256); [ -n \"$map\" ] && echo \"$map\"; "
    "nds=\"$nds $(echo \"$map\" | awk '$4 == \"==>\" {{print $5}}')\"; fi; "
    "for n in $nds; do if [ -e \"/sys/class/net/$n/operstate\" ]; then echo \"@@net $n\"; "
    "for f in operstate carrier speed; do printf '%s: ' $f; cat \"/sys/class/net/$n/$f\" 2>/dev/null || echo; done; "
    "else echo \"@@net $n missing\"; fi; done; true"
)
SMI_PATH_HINT = "nvidia-smi on the login PATH (normally /usr/bin/nvidia-smi, from the NVIDIA driver package)"


def split_source(out: CommandOutput) -> tuple[str, str]:
    """(source word after @@, the rest of the text) of a KERNEL_LOG or IB_PORTS probe."""
    head, _, rest = out.stdout.partition("\n")
    head = head.strip()
    if head.startswith("@@source "):
        return head[len("@@source "):], rest
    if head.startswith("@@"):
        return head[2:], rest
    return "", out.stdout


# nvidia-smi's line for a GPU that NVML cannot open, one line a GPU (tests/fixtures/nvidia/
# nvidia-smi__gpu_is_lost*, *_unknown_error*): `Unable to determine the device handle for GPU
# 0000:02:00.0: GPU is lost. Reboot the system to recover this GPU`, or `...: Unknown Error` for one
# off the bus; some builds print no space before the address (`for GPU0000:07:00.0`).
_NO_HANDLE = re.compile(r"Unable to determine the device handle for GPU\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
                        r"[0-9A-Fa-f]{2}\.[0-7]):\s*(.+)")


def smi_failure(out: CommandOutput, command: str) -> Finding | None:
    """The node-level fail for an nvidia-smi that is missing or answers with an error (docs/writing-a-check.md §4):
    rc 127 -> not found; another non-zero exit -> its own first line (`NVIDIA-SMI has failed because it
    couldn't communicate with the NVIDIA driver...`, `No devices were found`)."""
    if out.rc == 0:
        return None
    text = first_line(out.stdout) or first_line(out.stderr) or f"exit code {out.rc}"
    if out.rc == 127:
        return tool_failure(f"nvidia-smi not found: looked for {SMI_PATH_HINT}",
                            "Install the NVIDIA driver (it ships nvidia-smi), or add its directory to PATH for "
                            "non-interactive SSH shells; in a container run it with the NVIDIA runtime (--gpus all)",
                            output=first_line(out.stderr))
    lost = [m.groups() for m in map(_NO_HANDLE.search, (out.stdout + "\n" + out.stderr).splitlines()) if m]
    if lost:
        buses = ", ".join(bus for bus, _ in lost)
        return tool_failure(f"{command}: the driver cannot reach GPU {buses}: {lost[0][1].strip()[:200]}",
                            f"Reboot the node to recover GPU {buses} (`lspci -d 10de:` shows `rev ff` for a GPU off "
                            "the bus); if it is lost again after the reboot, drain the node and reseat or replace it",
                            output=text, lost_gpus=[bus for bus, _ in lost])
    return tool_failure(f"{command} failed: {text}",
                        "Check the driver: `lsmod | grep nvidia`, `dmesg | grep -i nvrm`; reload it (`modprobe nvidia`) "
                        "or reboot the node; a GPU missing from `lspci -d 10de:` needs a hardware ticket", output=text)


def read_smi(outputs, probe: str, command: str) -> CommandOutput | Finding:
    """The output of an nvidia-smi probe, or the fail that its absence or error is. A hang or a
    lost connection raises ParseError (an `error`: preflight could not tell)."""
    out = require_ok(outputs.get(probe), command)
    return smi_failure(out, command) or out
