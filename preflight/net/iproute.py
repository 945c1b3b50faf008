"""Interfaces and routes from iproute2: `ip -j addr` (JSON), plain `ip addr` (older iproute2 without
`-j`, busybox), and `ip route get`.

One probe command, `ADDR_CMD`, asks for JSON and falls back to text on the node itself, so several
checks share it and it runs once; where `ip` is not installed it prints /sys/class/net and /proc/net
instead (preflight/net/procnet.py). `read_addr` accepts any of the three and names the source.
"""
from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass

from ..checkapi import CommandOutput, ParseError, Shell, sh
from ..model import direct_init

# `ip -j` appeared in iproute2 4.13; older ones print `Option "-j" is unknown` and exit 255.
# No `ip` at all (minimal images, the real H200 node of docs/NVIDIA.md): the kernel's files.
PROCNET_MARK = "@@preflight-sysfs-net"  # procnet.MARK (procnet imports this module's types)
SOURCES = {"[": "ip -j addr", PROCNET_MARK: "/sys/class/net + /proc/net"}
TEXT_SOURCE = "ip addr"
PROCNET_FILES = ("/proc/net/fib_trie", "/proc/net/route", "/proc/net/if_inet6", "/proc/net/ipv6_route")
# One line per interface (`@@if <name> ifindex=2 flags=0x1003 operstate=up carrier=1`, `-` for a
# file that cannot be read), then each file after its own `@@file <path>` line (procnet reads it).
PROCNET_DUMP = sh(
    "echo {mark}; for d in /sys/class/net/*; do [ -e \"$d/flags\" ] || continue; printf '@@if %s' \"${{d##*/}}\"; "
    "for k in ifindex flags operstate carrier; do v=$(cat \"$d/$k\" 2>/dev/null) || v=-; "
    "printf ' %s=%s' \"$k\" \"${{v:--}}\"; done; echo; done; "
    "for f in {files}; do echo \"@@file $f\"; cat \"$f\" 2>/dev/null; done",
    mark=PROCNET_MARK, files=list(PROCNET_FILES))
ADDR_CMD = sh("if command -v ip >/dev/null 2>&1; then LC_ALL=C ip -j addr show 2>/dev/null || LC_ALL=C ip addr show; "
              "else {dump:raw}; fi", dump=PROCNET_DUMP)


@direct_init
@dataclass(frozen=True)
class Address:
    ip: str
    prefixlen: int
    family: str  # inet | inet6
    scope: str = "global"

    @property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_interface(f"{self.ip}/{self.prefixlen}").network

    def __str__(self) -> str:
        return f"{self.ip}/{self.prefixlen}"


@direct_init
@dataclass(frozen=True)
class Interface:
    name: str
    flags: tuple[str, ...]
    operstate: str
    addrs: tuple[Address, ...] = ()

    @property
    def up(self) -> bool:
        """Administratively UP with carrier. `lo` reports operstate UNKNOWN, so flags decide:
        `<LOOPBACK,UP,LOWER_UP> ... state UNKNOWN`; a cable-less port shows `NO-CARRIER ... state DOWN`."""
        return "UP" in self.flags and ("LOWER_UP" in self.flags or self.operstate == "UP")

    @property
    def loopback(self) -> bool:
        return "LOOPBACK" in self.flags or self.name == "lo"

    def addresses(self, family: str = "inet") -> list[Address]:
        """Usable addresses of a family; IPv6 link-local (`scope link`) cannot carry HCCL traffic."""
        return [a for a in self.addrs if a.family == family and a.scope != "link"]

    def state(self) -> str:
        return "UP" if self.up else ("DOWN" if "UP" not in self.flags else "NO-CARRIER")


def parse_addr(out: CommandOutput) -> tuple[Interface, ...]:
    """`ip -j addr` JSON, plain `ip addr` text or procnet's dump -> interfaces in ifindex order."""
    return read_addr(out)[0]


def read_addr(out: CommandOutput) -> tuple[tuple[Interface, ...], str]:
    """(interfaces, the source they were read from: "ip -j addr", "ip addr" or "/sys/class/net + /proc/net")."""
    text = out.stdout.strip()
    if not text:
        raise ParseError("ip addr printed nothing", out.stderr)
    if text.startswith(PROCNET_MARK):
        from .procnet import parse_dump
        return parse_dump(text), SOURCES[PROCNET_MARK]
    if text.startswith("["):
        return parse_json(text), SOURCES["["]
    return parse_text(text), TEXT_SOURCE


def parse_json(text: str) -> tuple[Interface, ...]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"ip -j addr: invalid JSON ({exc.msg})", text) from None
    result = []
    for item in items:
        addrs = tuple(
            Address(a["local"], int(a.get("prefixlen", 32)), a.get("family", "inet"), a.get("scope", "global"))
            for a in item.get("addr_info", []) if "local" in a
        )
        result.append(Interface(item["ifname"], tuple(item.get("flags", ())), item.get("operstate", ""), addrs))
    return tuple(result)


# `4: eth0@if5: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1400 qdisc pfifo_fast state UP group default`
_LINK = re.compile(r"^\d+:\s+([^:@\s]+)(?:@\S+)?:\s+<([^>]*)>(.*)$")
# `    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0` / `    inet6 fe80::1/64 scope link`
_ADDR = re.compile(r"^\s+(inet6?)\s+([0-9a-fA-F.:]+)(?:/(\d+))?(.*)$")


def parse_text(text: str) -> tuple[Interface, ...]:
    result: list[Interface] = []
    name, flags, state, addrs = None, (), "", []
    for line in text.splitlines():
        if m := _LINK.match(line):
            if name:
                result.append(Interface(name, flags, state, tuple(addrs)))
            rest = m.group(3).split()
            name, flags, addrs = m.group(1), tuple(f for f in m.group(2).split(",") if f), []
            state = rest[rest.index("state") + 1] if "state" in rest[:-1] else ""
        elif (m := _ADDR.match(line)) and name:
            family, ip, plen, rest = m.groups()
            words = rest.split()
            scope = words[words.index("scope") + 1] if "scope" in words[:-1] else "global"
            addrs.append(Address(ip, int(plen or (32 if family == "inet" else 128)), family, scope))
        elif line.strip() and not line.startswith(" ") and name is None:
            raise ParseError("ip addr: unexpected line", line)
    if name:
        result.append(Interface(name, flags, state, tuple(addrs)))
    if not result:
        raise ParseError("ip addr: no interface found", text)
    return tuple(result)


def owner(interfaces: tuple[Interface, ...], ip: str) -> Interface | None:
    """The interface that carries `ip` as one of its addresses (any state)."""
    if ipv4_value(ip) is not None:
        # IPv4 has one spelling ipaddress reads (no leading zeros, no spaces, no other base) and
        # an IPv6 text never equals it: equal text is the equal address, and each node's addresses
        # are its own, so parsing them all was the cost
        # (0.4-0.5 M instructions a node, docs/PERFORMANCE.md §4; the reference that parses every
        # address is in tests/net/test_helpers.py)
        for iface in interfaces:
            if any(a.ip == ip for a in iface.addrs):
                return iface
        return None
    want = _address(ip)
    if want is None:
        return None
    for iface in interfaces:
        if any(a.ip == ip or _address(a.ip) == want for a in iface.addrs):
            return iface
    return None


def ipv4_value(text: str) -> int | None:
    """A dotted quad as ipaddress reads one (ASCII digits, no leading zero, each <= 255) as an
    integer, else None."""
    parts = text.split(".")
    if len(parts) != 4:
        return None
    value = 0
    for p in parts:
        if not (p.isascii() and p.isdigit() and len(p) <= 3 and (p[0] != "0" or p == "0")):
            return None
        octet = int(p)
        if octet > 255:
            return None
        value = value << 8 | octet
    return value


_PREFIX_OF_NETMASK = {(0xFFFFFFFF << (32 - p)) & 0xFFFFFFFF: p for p in range(33)}


def _prefix(mask: str) -> int | None:
    """The prefix length a dotted netmask or a prefix length as `ip` prints it (24) stands for
    ("": a host, /32); None for anything else."""
    if not mask:
        return 32
    if "." in mask:
        bits = ipv4_value(mask)
        return _PREFIX_OF_NETMASK.get(bits) if bits is not None else None
    if mask.isascii() and mask.isdigit() and (mask == "0" or mask[0] != "0") and int(mask) <= 32:
        return int(mask)
    return None  # another spelling of a prefix length: ipaddress's to read


def subnet(ip: str, mask: str | None) -> str:
    """`str(ipaddress.ip_interface(f"{ip}/{mask or 32}").network)`, ValueError where that raises.

    An IPv4 address with a dotted netmask (what hccn_tool prints: 8 devices a node, 8,000 at
    1,000 nodes, read by env.consistency) or a prefix length (`ip addr`'s) is worked out with
    integers; anything else (a host mask, IPv6) is ipaddress's to read. The integers buy 0.85 M
    instructions a node after the bytes arrive (docs/PERFORMANCE.md §4); the plain reading, the
    ipaddress line above, is what tests/checks/test_env_consistency.py compares them with."""
    addr = ipv4_value(ip)
    prefix = _prefix(mask or "")
    if addr is None or prefix is None:
        return str(ipaddress.ip_interface(f"{ip}/{mask or 32}").network)
    net = addr & (0xFFFFFFFF << (32 - prefix)) & 0xFFFFFFFF
    return f"{net >> 24}.{net >> 16 & 255}.{net >> 8 & 255}.{net & 255}/{prefix}"


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class Route:
    dst: str
    dev: str | None
    src: str | None
    via: str | None
    kind: str = "unicast"  # unicast | local | unreachable | prohibit | blackhole


_ROUTE_KINDS = ("local", "unreachable", "prohibit", "blackhole", "broadcast", "multicast")


def parse_route_get(text: str) -> Route:
    """`192.0.2.9 dev eth0 src 192.0.2.2 uid 0` / `local 192.0.2.2 dev lo table local src 192.0.2.2`
    / `203.0.113.5 via 192.0.2.1 dev eth0 src 192.0.2.2 uid 0` (the `cache` line is ignored)."""
    line = next((ln for ln in text.splitlines() if ln.strip() and not ln.startswith(" ")), "")
    words = line.split()
    if not words:
        raise ParseError("ip route get printed nothing", text)
    kind = words.pop(0) if words[0] in _ROUTE_KINDS else "unicast"
    if not words:
        raise ParseError("ip route get: no destination", line)

    def after(key: str) -> str | None:
        return words[words.index(key) + 1] if key in words[:-1] else None

    return Route(words[0], after("dev"), after("src"), after("via"), kind)

