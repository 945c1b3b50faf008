"""hccn.ip: every NPU has a device IP and netmask, matching /etc/hccn.conf where that exists.

What it checks: `hccn_tool -i N -ip -g` prints `ipaddr:<ip>` and `netmask:<mask>` for every
logical device N. Empty output or `Get ipconf failed, because no ip was preset there!` fails.
When /etc/hccn.conf exists, its `address_N` / `netmask_N` must equal the live values: a stale
entry fails, naming both.

Why it matters: HCCL reaches the other nodes' NPUs over these addresses. A device without an IP
cannot join the ring; a stale hccn.conf entry is applied again at the next reboot or driver
reload and silently breaks one NPU (VA PR #16847: `HcclCommPrepare fail, ret: 0x9`).

How to fix: set the address with `hccn_tool -i N -ip -s address <ip> netmask <mask>` and make
/etc/hccn.conf agree (`address_N=<ip>`, `netmask_N=<mask>`). Skipped on inference cards.
Other checks (hccn.ping_mesh, env.consistency) read `Facts.devices` (device -> DeviceIp).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from preflight.ascend import hccn_common as common
from preflight.ascend import probes as ascend
from preflight.checkapi import Policy, CommandOutput, Finding, Probe, Status, cmd, passed, require_ok, tool_failure
from preflight.checkhelpers import graded, first_line, q
from preflight.ascend import hccn

ID = "hccn.ip"
SCOPE = "node"
POLICY = Policy(
    backend="ascend",
    gate=True,
    privilege="root",  # hccn_tool
)
NPU = "npu.idle"  # its facts are the parsed npu-smi table (ascend.probes.npu_table), read once a node
USES = (NPU,)
# What to do with a fail/warn (preflight/actions.py): a missing or stale address is configuration.
ACTIONS = {
    "tool_failed": ("reset_device", "hccn_tool failing on a device (docs/FORMATS.md §3.10)"),
    "": ("fix_config", "device IP, netmask and /etc/hccn.conf are set by hccn_tool -ip -s (docs/FAILURES.md row 10)"),
}
DEFAULTS: dict = {}
QUERIES = {"ip": "-ip -g"}
CONF_PROBE = "hccn_conf"
ABSENT = "@@absent"


@dataclass(frozen=True)
class DeviceIp:
    ip: str | None
    netmask: str | None
    conf_address: str | None = None  # /etc/hccn.conf address_N (None: no entry or no file)
    conf_netmask: str | None = None
    error: str | None = None  # hccn_tool's error line


@dataclass(frozen=True)
class Facts:
    skip: str | None
    missing_tool: str | None
    devices: dict[int, DeviceIp] = field(default_factory=dict)
    conf_present: bool = False
    chips: dict[int, tuple[int, int]] = field(default_factory=dict)
    conf_error: str | None = None  # /etc/hccn.conf exists but could not be read: what cat said


class UnreadableConf(Exception):
    """/etc/hccn.conf exists and `cat` failed on it (a fault of the node, not unreadable output)."""


def probes(node, params) -> dict[str, Probe]:
    return {**common.probes(node, params), CONF_PROBE: cmd(ascend.HCCN_CONF_CAT)}


def followup(outputs, node, params, used):
    return common.hccn_followup(outputs, node, QUERIES, used.get(NPU))


def _conf(out: CommandOutput | None) -> dict[int, dict[str, str]] | None:
    """hccn.conf entries, None when the file does not exist."""
    if out is None or out.stdout.startswith(ABSENT):
        return None
    if out.timed_out or out.error:
        require_ok(out, f"cat {ascend.HCCN_CONF}")
    if out.rc != 0:
        raise UnreadableConf(first_line(out.stderr or out.stdout) or f"exit code {out.rc}")
    return hccn.parse_hccn_conf(out.stdout)


def _device(out: CommandOutput, conf: dict[str, str]) -> DeviceIp:
    extra = {"conf_address": conf.get("address"), "conf_netmask": conf.get("netmask")}
    err = common.device_error(out)
    if err:
        return DeviceIp(None, None, error=err[0], **extra)
    ipconf = hccn.parse_ip(out.stdout)
    return DeviceIp(ipconf.ip, ipconf.netmask, **extra)


def parse(outputs: Mapping[str, CommandOutput], used: Mapping[str, Any]) -> Facts:
    try:
        conf, conf_error = _conf(outputs.get(CONF_PROBE)), None
    except UnreadableConf as exc:
        conf, conf_error = None, str(exc)
    run, devices = common.read_devices(outputs, used.get(NPU), QUERIES, "ip", "-ip -g", lambda out: out)
    if run.skip or run.missing_tool:
        return Facts(run.skip, run.missing_tool, chips=run.chips)
    devices = {d: _device(o, (conf or {}).get(d, {})) for d, o in devices.items()}
    return Facts(None, None, devices, conf is not None, run.chips, conf_error)


def _problem(dev: DeviceIp, conf_present: bool) -> tuple[str, str | None] | None:
    """(message, problem in ACTIONS or None for the fallback) of one device, or None."""
    if dev.error and "no ip was preset" not in dev.error:
        return f"hccn_tool failed: {dev.error}", "tool_failed"
    if not dev.ip or not dev.netmask:
        got = dev.error or "empty output"
        return f"no device IP/netmask, expected ipaddr and netmask ({got})", None
    # Only entries present are compared: a file without address_N says nothing about device N.
    stale_ip = dev.conf_address is not None and dev.conf_address != dev.ip
    stale_mask = dev.conf_netmask is not None and dev.conf_netmask != dev.netmask
    if conf_present and (stale_ip or stale_mask):
        return (f"stale {ascend.HCCN_CONF}: address/netmask {dev.conf_address}/{dev.conf_netmask}, "
                f"live {dev.ip}/{dev.netmask}"), None
    return None


def evaluate(facts: Facts, params, node) -> list[Finding]:
    frame = common.frame_findings(facts, node)
    if frame:
        return frame
    ips = {str(i): d.ip for i, d in facts.devices.items()}
    bad = {i: p for i, d in facts.devices.items() if (p := _problem(d, facts.conf_present))}
    conf = [tool_failure(f"{ascend.HCCN_CONF} exists but cannot be read: {facts.conf_error}", path=ascend.HCCN_CONF,
                         remediation=f"Make {ascend.HCCN_CONF} readable (`chmod 644 {ascend.HCCN_CONF}`, owner root): "
                                     f"the device network is configured from it at boot")] if facts.conf_error else []
    if conf and not bad:
        return conf
    if not bad:
        where = f", matching {ascend.HCCN_CONF}" if facts.conf_present else ""
        return [passed(f"{len(facts.devices)} devices have an IP and netmask{where}", ips=ips)]
    ids = " ".join(str(i) for i in bad)
    return conf + [common.device_finding(Status.FAIL, {i: m for i, (m, _) in bad.items()}, facts.chips, ips=ips,
                                         action=graded(ACTIONS, *(c for _, c in bad.values())), remediation=(
        f"Set the IP of device(s) {ids} with `{q(node.hccn_tool)} -i N -ip -s address <ip> "
        f"netmask <mask>` and make {ascend.HCCN_CONF} agree (address_N=<ip>, "
        f"netmask_N=<mask>); check with `{q(node.hccn_tool)} -i N -ip -g`"))]
