"""Listening TCP sockets (`ss -ltnp`, or /proc/net/tcp{,6} where ss is missing) and the kernel's
ephemeral/reserved port settings.

`LISTEN_CMD` prints ss output, or a marker line and the two /proc tables; `parse_listeners` reads
either. /proc has no process names (only socket inodes), so owners are then unknown.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from ..checkapi import CommandOutput, ParseError, sh

PROC_MARK = "@@preflight-proc-net-tcp"
LISTEN_CMD = sh("LC_ALL=C ss -ltnp 2>/dev/null || {{ echo {mark}; cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; }}",
               mark=PROC_MARK)
SYSCTL_CMD = sh(
    "for f in ip_local_port_range ip_local_reserved_ports; do "
    "printf '%s=' $f; tr '\\t\\n' '  ' </proc/sys/net/ipv4/$f; echo; done"
)


@dataclass(frozen=True)
class Listener:
    address: str  # "0.0.0.0", "::", "*", "127.0.0.1", ...
    port: int
    processes: tuple[tuple[str, int], ...] = ()  # (name, pid); empty when not visible

    def owner(self) -> str:
        if not self.processes:
            return "process not visible to this user"
        return ", ".join(f"{name} (pid {pid})" for name, pid in self.processes)


# `users:(("python3",pid=6151,fd=3),("python3",pid=6152,fd=3))`
_USER = re.compile(r'\("((?:[^"\\]|\\.)*)",pid=(\d+),fd=\d+\)')


def _split_host_port(local: str) -> tuple[str, int]:
    """`0.0.0.0:2024`, `*:29500`, `[::]:22`, `[::ffff:1.2.3.4]:80`, `127.0.0.53%lo:53`."""
    host, sep, port = local.rpartition(":")
    if not sep or not port.isdigit():
        raise ParseError("ss: cannot read local address", local)
    host = host.split("%", 1)[0].strip("[]")
    return host, int(port)


def parse_ss(text: str) -> tuple[Listener, ...]:
    """`LISTEN 0 128 0.0.0.0:60003 0.0.0.0:* users:(("python3",pid=6151,fd=3))` lines (header skipped)."""
    result = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0] == "State":
            continue
        if words[0] != "LISTEN" or len(words) < 5:
            raise ParseError("ss -ltnp: unexpected line", line)
        host, port = _split_host_port(words[3])
        procs = tuple((m.group(1), int(m.group(2))) for m in _USER.finditer(line))
        result.append(Listener(host, port, procs))
    return tuple(result)


def proc_addr(hexaddr: str) -> str:
    """/proc/net/tcp stores the address as host-order 32-bit words: `0100007F` is 127.0.0.1."""
    raw = bytes.fromhex(hexaddr)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def parse_proc(text: str) -> tuple[Listener, ...]:
    """`   0: 00000000:07E8 00000000:0000 0A ...` rows; state 0A is LISTEN."""
    result = []
    for line in text.splitlines():
        words = line.split()
        if len(words) < 4 or words[0] == "sl" or words[0] == PROC_MARK:
            continue
        if not words[0].endswith(":"):
            raise ParseError("/proc/net/tcp: unexpected line", line)
        if words[3] != "0A":
            continue
        addr, _, port = words[1].partition(":")
        result.append(Listener(proc_addr(addr), int(port, 16)))
    return tuple(result)


def parse_listeners(out: CommandOutput) -> tuple[tuple[Listener, ...], str]:
    """-> (listeners, source) where source is "ss" or "/proc/net/tcp"."""
    if PROC_MARK in out.stdout:
        if "local_address" not in out.stdout:
            raise ParseError("neither ss nor /proc/net/tcp could be read", out.stderr or out.stdout)
        return parse_proc(out.stdout), "/proc/net/tcp"
    return parse_ss(out.stdout), "ss"


def parse_port_list(text: str) -> list[tuple[int, int]]:
    """`60000-60015,61000` (ip_local_reserved_ports, HCCL_HOST_SOCKET_PORT_RANGE) -> inclusive ranges."""
    ranges = []
    for item in re.split(r"[,\s]+", text.strip()):
        if not item:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if not m:
            raise ValueError(f"not a port or port range: {item!r}")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if not 0 < lo <= hi <= 65535:
            raise ValueError(f"port range out of 1-65535: {item!r}")
        ranges.append((lo, hi))
    return ranges


@dataclass(frozen=True)
class PortSysctl:
    ephemeral: tuple[int, int]
    reserved: tuple[tuple[int, int], ...]

    def is_reserved(self, port: int) -> bool:
        return any(lo <= port <= hi for lo, hi in self.reserved)

    def is_ephemeral(self, port: int) -> bool:
        return self.ephemeral[0] <= port <= self.ephemeral[1]


def parse_sysctl(text: str) -> PortSysctl:
    """`ip_local_port_range=32768 60999 ` / `ip_local_reserved_ports=60000-60015 ` (SYSCTL_CMD)."""
    values = dict(line.partition("=")[::2] for line in text.splitlines() if "=" in line)
    try:
        lo, hi = (int(x) for x in values["ip_local_port_range"].split())
        reserved = tuple(parse_port_list(values.get("ip_local_reserved_ports", "")))
    except (KeyError, ValueError) as exc:
        raise ParseError(f"ip_local_port_range/ip_local_reserved_ports unreadable ({exc})", text) from None
    return PortSysctl((lo, hi), reserved)
