"""Parsers of InfiniBand port state: `ibstat`, `ibstatus` and /sys/class/infiniband.

* `ibstat` (infiniband-diags): `CA '<name>'` blocks, TAB-indented CA fields, `Port N:` with
  two-TAB `State:`, `Physical state:`, `Rate:` (Gb/s, a number), `Link layer:`.
* `ibstatus`: `Infiniband device '<name>' port N status:` blocks with `state: 4: ACTIVE`,
  `phys state: 5: LinkUp`, `rate: 200 Gb/sec (4X HDR)`, `link_layer: InfiniBand`.
* sysfs, read by the probe as `@@port <ca> <port>` followed by the files `state`, `phys_state`,
  `rate`, `link_layer` as `name: content` lines (the files hold `4: ACTIVE`, `5: LinkUp`,
  `400 Gb/sec (4X NDR)`, `InfiniBand`).

All three give the same Port; state names are normalised to ibstat's words (Active, Down,
Initializing, Armed; LinkUp, Polling, Disabled).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..checkapi import ParseError


@dataclass(frozen=True)
class Port:
    ca: str
    port: int
    state: str           # Active | Down | Initializing | Armed | ...
    phys_state: str      # LinkUp | Polling | Disabled | ...
    rate: float | None   # Gb/s
    link_layer: str      # InfiniBand | Ethernet

    @property
    def name(self) -> str:
        return f"{self.ca}:{self.port}"

    @property
    def up(self) -> bool:
        return self.state == "Active" and self.phys_state == "LinkUp"


# `4: ACTIVE` -> Active; `5: LinkUp` stays; ibstatus/sysfs spell states in capitals
_STATE_WORDS = {"ACTIVE": "Active", "DOWN": "Down", "INIT": "Initializing", "ARMED": "Armed",
                "ACTIVE_DEFER": "Active"}


def _word(value: str) -> str:
    value = value.strip()
    m = re.match(r"\d+:\s*(\S+)", value)
    word = m.group(1) if m else value
    return _STATE_WORDS.get(word, word)


def _rate(value: str) -> float | None:
    m = re.match(r"\s*([\d.]+)", value)
    return float(m.group(1)) if m else None


def parse_ibstat(text: str) -> list[Port]:
    ports: list[Port] = []
    ca, port, fields = None, None, {}

    def flush():
        if ca is not None and port is not None:
            ports.append(Port(ca, port, _word(fields.get("State", "")), _word(fields.get("Physical state", "")),
                              _rate(fields.get("Rate", "")), fields.get("Link layer", "").strip()))

    for line in text.splitlines():
        m = re.match(r"^CA '([^']+)'", line)
        if m:
            flush()
            ca, port, fields = m.group(1), None, {}
            continue
        m = re.match(r"^\s+Port (\d+):\s*$", line)
        if m:
            flush()
            port, fields = int(m.group(1)), {}
            continue
        if port is not None and ":" in line:
            k, _, v = line.strip().partition(":")
            fields[k.strip()] = v.strip()
    flush()
    if not ports and text.strip():
        raise ParseError("ibstat: no `CA '...'` block with a `Port N:`", text)
    return ports


def parse_ibstatus(text: str) -> list[Port]:
    ports = []
    for block in re.split(r"\n\s*\n", text.strip()):
        m = re.match(r"Infiniband device '([^']+)' port (\d+) status:", block.strip())
        if not m:
            if block.strip():
                raise ParseError(f"ibstatus: unreadable block {block.strip().splitlines()[0]!r}", text)
            continue
        f = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in block.splitlines()[1:]) if v}
        ports.append(Port(m.group(1), int(m.group(2)), _word(f.get("state", "")), _word(f.get("phys state", "")),
                          _rate(f.get("rate", "")), f.get("link_layer", "")))
    return ports


def parse_sysfs(text: str) -> list[Port]:
    ports = []
    for block in text.split("@@port ")[1:]:
        head, _, rest = block.partition("\n")
        ca, _, num = head.strip().partition(" ")
        f = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in rest.splitlines()) if k.strip()}
        ports.append(Port(ca, int(num or 0), _word(f.get("state", "")), _word(f.get("phys_state", "")),
                          _rate(f.get("rate", "")), f.get("link_layer", "")))
    return ports


def read_probe(stdout: str) -> tuple[str, list[Port]]:
    """The IB_PORTS probe (preflight/nvidia/probes.py) -> (source, ports); source `none` when the
    node has no ibstat, ibstatus or /sys/class/infiniband. ParseError on anything else."""
    head, _, rest = stdout.partition("\n")
    head = head.strip()
    if head == "@@none":
        return "none", []
    source = head[len("@@source "):] if head.startswith("@@source ") else ""
    parsers = {"ibstat": parse_ibstat, "ibstatus": parse_ibstatus, "sysfs": parse_sysfs}
    if source not in parsers:
        raise ParseError("ib port probe: unexpected output", stdout)
    return source, parsers[source](rest)
