"""Interfaces, addresses and routes where iproute2 (`ip`) is not installed: the kernel's own files.

Why: real GPU and NPU nodes (and job images) ship without iproute2; /sys/class/net and /proc/net
are always there, in the node's (or the container's) network namespace. iproute.PROCNET_DUMP (a part of
iproute.ADDR_CMD) prints them in one framed text; `parse_dump` turns it into the same `Interface`s `ip addr` gives, and
`route_to` answers what `ip route get` would for the main table.

What each file gives (man 5 proc; Documentation/ABI/testing/sysfs-class-net):
* /sys/class/net/<if>/{ifindex,flags,operstate,carrier}: the interfaces, their IFF_* flags (hex),
  RFC 2863 operstate, and carrier (1 with a link; reading it fails on an interface that is down);
* /proc/net/fib_trie: every IPv4 address of the namespace, as a `/32 host LOCAL` leaf, with no
  interface name;
* /proc/net/route: the main table's IPv4 routes (interface, destination, gateway, flags, metric,
  mask; addresses as host-order hex words); the connected route of an address names its
  interface and its prefix length;
* /proc/net/if_inet6: every IPv6 address with its interface, prefix length and scope;
* /proc/net/ipv6_route: the IPv6 routes (network-order hex).

Limits, compared with `ip`: an IPv4 address is placed on the interface whose connected route
covers it (longest prefix), so an address without one (a /32, or an interface that is down: the
kernel removes its routes) is not listed; addresses of one interface come in numeric order, not
primary first; routes are the main table's only (policy rules are not followed).
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ..checkapi import ParseError
from .iproute import PROCNET_MARK as MARK, SOURCES, Address, Interface, Route, owner
from .sockets import proc_addr

SOURCE = SOURCES[MARK]  # how results name this source: "/sys/class/net + /proc/net"
# include/uapi/linux/if.h: the IFF_* bits of /sys/class/net/<if>/flags, by the names `ip` prints.
IFF_NAMES = ((0x1, "UP"), (0x2, "BROADCAST"), (0x8, "LOOPBACK"), (0x10, "POINTOPOINT"), (0x80, "NOARP"),
             (0x100, "PROMISC"), (0x1000, "MULTICAST"))
# include/net/ipv6.h IPV6_ADDR_* scope bits as if_inet6 prints them; `ip` names them so.
V6_SCOPES = {0x00: "global", 0x10: "host", 0x20: "link", 0x40: "site"}
RTF_GATEWAY, RTF_REJECT = 0x2, 0x200  # include/uapi/linux/route.h (IPv6: ipv6_route.h, same bits)


@dataclass(frozen=True)
class Dump:
    """The framed text, split: interface lines and each file's text by path."""
    links: tuple[dict[str, str], ...]
    files: dict[str, str]


def split(text: str) -> Dump:
    if MARK not in text:
        raise ParseError(f"{SOURCE}: no {MARK} line", text)
    links: list[dict[str, str]] = []
    files: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.split(MARK, 1)[1].splitlines():
        if line.startswith("@@if "):
            name, *pairs = line[5:].split()
            links.append({"name": name, **dict(p.partition("=")[::2] for p in pairs)})
            current = None
        elif line.startswith("@@file "):
            current = files.setdefault(line[7:].strip(), [])
        elif current is not None:
            current.append(line)
    return Dump(tuple(links), {k: "\n".join(v) for k, v in files.items()})


def fib_locals(text: str) -> list[str]:
    """The IPv4 addresses of the namespace: each `|-- <ip>` leaf followed by `/32 host LOCAL`
    (every table of the trie is printed, Main and Local alike: each address is kept once)."""
    found: dict[str, None] = {}
    leaf = None
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "|--":
            leaf = words[1]
        elif leaf and words[:1] == ["/32"] and words[-1:] == ["LOCAL"]:
            found[leaf] = None
        elif words[:1] != [] and not words[0].startswith("/"):
            leaf = None
    return list(found)


@dataclass(frozen=True)
class V4Route:
    iface: str
    net: ipaddress.IPv4Network
    gateway: str | None
    flags: int
    metric: int


def parse_route(text: str) -> list[V4Route]:
    """/proc/net/route rows (`eth0	000200C0	00000000	0001	0	0	0	00FFFFFF	0	0	0`)."""
    routes = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0] == "Iface":
            continue
        if len(words) < 8:
            raise ParseError("/proc/net/route: unexpected line", line)
        try:
            dst, gw, mask = proc_addr(words[1]), proc_addr(words[2]), proc_addr(words[7])
            net = ipaddress.IPv4Network(f"{dst}/{mask}", strict=False)
            flags, metric = int(words[3], 16), int(words[6])
        except ValueError:
            raise ParseError("/proc/net/route: unexpected line", line) from None
        routes.append(V4Route(words[0], net, gw if flags & RTF_GATEWAY else None, flags, metric))
    return routes


@dataclass(frozen=True)
class V6Route:
    iface: str
    net: ipaddress.IPv6Network
    gateway: str | None
    flags: int
    metric: int


def _v6(hexaddr: str) -> str:
    return str(ipaddress.IPv6Address(bytes.fromhex(hexaddr)))


def parse_ipv6_route(text: str) -> list[V6Route]:
    """/proc/net/ipv6_route rows: dst plen src plen nexthop metric refcnt use flags dev (hex)."""
    routes = []
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        try:
            net = ipaddress.IPv6Network(f"{_v6(words[0])}/{int(words[1], 16)}", strict=False)
            gw, metric, flags = _v6(words[4]), int(words[5], 16), int(words[8], 16)
        except (ValueError, IndexError):
            raise ParseError("/proc/net/ipv6_route: unexpected line", line) from None
        routes.append(V6Route(words[9] if len(words) > 9 else "", net, gw if flags & RTF_GATEWAY else None, flags, metric))
    return routes


def parse_if_inet6(text: str) -> list[tuple[str, Address]]:
    """/proc/net/if_inet6 rows (`fe800000000000000000000000000001 02 40 20 80 eth0`):
    (interface, address)."""
    out = []
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        try:
            ip, plen, scope = _v6(words[0]), int(words[2], 16), int(words[3], 16)
        except (ValueError, IndexError):
            raise ParseError("/proc/net/if_inet6: unexpected line", line) from None
        out.append((words[5] if len(words) > 5 else "", Address(ip, plen, "inet6", V6_SCOPES.get(scope & 0xF0, "global"))))
    return out


def _flags(link: dict[str, str]) -> tuple[str, ...]:
    try:
        bits = int(link.get("flags", "0"), 16)
    except ValueError:
        raise ParseError(f"/sys/class/net/{link['name']}/flags: not a hex number", link.get("flags", "")) from None
    names = [name for bit, name in IFF_NAMES if bits & bit]
    if link.get("carrier") == "1":
        names.append("LOWER_UP")  # what `ip` prints for a carrier
    return tuple(names)


def _connected(ip: str, routes: list[V4Route]) -> V4Route | None:
    """The connected (gateway-less) route that covers `ip`, longest prefix first, then metric."""
    addr = ipaddress.IPv4Address(ip)
    best = [r for r in routes if not r.flags & (RTF_GATEWAY | RTF_REJECT) and r.iface != "*" and addr in r.net]
    return min(best, key=lambda r: (-r.net.prefixlen, r.metric), default=None)


def parse_dump(text: str) -> tuple[Interface, ...]:
    """PROCNET_DUMP's output -> interfaces in ifindex order, with the addresses each one carries."""
    dump = split(text)
    if not dump.links:
        raise ParseError(f"{SOURCE}: no interface under /sys/class/net", text)
    routes = parse_route(dump.files.get("/proc/net/route", ""))
    addrs: dict[str, list[Address]] = {}
    loopback = next((link["name"] for link in dump.links if int(link.get("flags", "0"), 16) & 0x8), "lo")
    for ip in fib_locals(dump.files.get("/proc/net/fib_trie", "")):
        if ipaddress.IPv4Address(ip).is_loopback:
            addrs.setdefault(loopback, []).append(Address(ip, 8, "inet", "host"))
        elif (route := _connected(ip, routes)) is not None:
            addrs.setdefault(route.iface, []).append(Address(ip, route.net.prefixlen, "inet", "global"))
    for name, a in parse_if_inet6(dump.files.get("/proc/net/if_inet6", "")):
        addrs.setdefault(name, []).append(a)
    out = []
    for link in sorted(dump.links, key=lambda x: int(x["ifindex"]) if x.get("ifindex", "").isdigit() else 1 << 30):
        out.append(Interface(link["name"], _flags(link), link.get("operstate", "").upper().replace("-", ""),
                             tuple(addrs.get(link["name"], ()))))
    return tuple(out)


def route_to(ip: str, text: str, interfaces: tuple[Interface, ...]) -> Route | None:
    """What `ip route get <ip>` answers, from the main table in PROCNET_DUMP's text (or a text holding
    the route files after their `@@file` lines): `local` for an address of this node; None
    when no route covers it."""
    addr = ipaddress.ip_address(ip)
    family = "inet" if addr.version == 4 else "inet6"
    mine = owner(interfaces, ip)
    if mine is not None:  # `ip` names lo and the owner's first address as the source
        return Route(ip, "lo", mine.addresses(family)[0].ip if mine.addresses(family) else ip, None, "local")
    files = split(text if MARK in text else MARK + "\n" + text).files
    routes = (parse_route(files.get("/proc/net/route", "")) if addr.version == 4
              else parse_ipv6_route(files.get("/proc/net/ipv6_route", "")))
    hits = [r for r in routes if addr in r.net]
    if not hits:
        return None
    best = min(hits, key=lambda r: (-r.net.prefixlen, r.metric))
    if best.flags & RTF_REJECT:
        return Route(ip, None, None, None, "unreachable")
    dev = next((i for i in interfaces if i.name == best.iface), None)
    src = dev.addresses(family)[0].ip if dev is not None and dev.addresses(family) else None
    return Route(ip, best.iface, src, best.gateway, "unicast")
