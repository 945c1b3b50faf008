"""Inventory nodes that are one machine: entries whose SSH endpoint resolves to the same address.

Why: an inventory with two names for one machine (an alias, an old and a new name, a copy-paste of
the host) double-counts it: the job gets fewer machines than it has ranks for, and a smoke test
between the two entries measures loopback, not the fabric. The run is not refused (both entries may
be deliberate), the user is told on stderr at load time (docs/SPEC.md §2), and smoke.allreduce never
pairs such nodes.

Resolution runs on the machine that runs preflight, in daemon threads bounded by `timeout`: a name
that does not resolve in time (or only resolves behind its ProxyJump) is compared as written.
Entries behind different jump hosts are different machines even with the same private address.
"""
from __future__ import annotations

import socket
import threading
import time
from typing import Callable, Iterable, Sequence

from .node import Node

Resolver = Callable[[str, int], str | None]


def resolve(host: str, port: int) -> str | None:
    """The first TCP address `host` resolves to, or None."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    return str(infos[0][4][0]) if infos else None


def _resolve_all(nodes: Sequence[Node], resolver: Resolver, timeout: float) -> dict[str, str]:
    found: dict[str, str] = {}
    lock = threading.Lock()

    def one(n: Node) -> None:
        addr = resolver(n.host, n.port)
        if addr:
            with lock:
                found[n.name] = addr

    todo = [n for n in nodes if not n.proxy_jump]  # behind a jump the name is the jump host's to resolve
    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in todo]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout  # one bound for all: a hung lookup is left behind
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    with lock:
        return dict(found)


def shared(nodes: Iterable[Node], resolver: Resolver = resolve, timeout: float = 2.0) -> list[tuple[str, list[str]]]:
    """[(address:port, [node names])] for every endpoint that two or more nodes reach."""
    nodes = list(nodes)
    addrs = _resolve_all(nodes, resolver, timeout)
    groups: dict[tuple[str | None, str, int], list[str]] = {}
    for n in nodes:
        groups.setdefault((n.proxy_jump, addrs.get(n.name, n.host), n.port), []).append(n.name)
    out = []
    for (jump, addr, port), names in groups.items():
        if len(names) > 1:
            where = f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"
            out.append((where + (f" via {jump}" if jump else ""), names))
    return out


def warnings(path: str, nodes: Iterable[Node], resolver: Resolver = resolve, timeout: float = 2.0) -> list[str]:
    """One line per shared endpoint, naming the nodes and their inventory lines."""
    nodes = list(nodes)
    lines = {n.name: n.source_line for n in nodes}
    out = []
    for where, names in shared(nodes, resolver, timeout):
        named = ", ".join(f"{n} (line {lines[n]})" if lines.get(n) else n for n in names)
        out.append(f"{path}: nodes {named} resolve to the same address {where}: one machine listed "
                   f"{len(names)} times? Its results count {len(names)} times; smoke.allreduce never pairs them")
    return out
