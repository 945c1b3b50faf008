"""Ping statistics (iputils, busybox, and the `hccn_tool -ping` body) and the bounded mesh script.

iputils:  `2 packets transmitted, 0 received, +1 errors, 100% packet loss, time 0ms`
          `rtt min/avg/max/mdev = 0.048/0.099/0.150/0.051 ms`
busybox:  `2 packets transmitted, 2 packets received, 0% packet loss`
          `round-trip min/avg/max = 0.048/0.099/0.150 ms`
hccn_tool (inferred, docs/FORMATS.md §3.5): `3 packets transmitted, 3 received, 0.00% packet loss`
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

from ..checkapi import Shell, sh

_STATS = re.compile(
    r"(\d+) packets transmitted, (\d+) (?:packets )?received"
    r"(?:, \+(\d+) errors)?(?:, \+\d+ duplicates)?, ([\d.]+)% packets? loss"
)
_RTT = re.compile(r"(?:rtt|round-trip) min/avg/max(?:/mdev)? = ([\d.]+)/([\d.]+)/([\d.]+)")


@dataclass(frozen=True)
class PingStats:
    transmitted: int
    received: int
    loss_pct: float
    rtt_avg_ms: float | None = None
    rtt_max_ms: float | None = None
    errors: int = 0


def parse_stats(text: str) -> PingStats | None:
    """The summary of one ping run, or None when there is no statistics line (ping did not run)."""
    m = _STATS.search(text)
    if not m:
        return None
    rtt = _RTT.search(text)
    return PingStats(
        int(m.group(1)), int(m.group(2)), float(m.group(4)),
        float(rtt.group(2)) if rtt else None, float(rtt.group(3)) if rtt else None,
        int(m.group(3) or 0),
    )


MARK = "@@preflight-ping"


def mesh_script(targets: Sequence[tuple[str, str]], count: int, parallel: int, interval: float = 0.2) -> Shell:
    """POSIX sh that pings every (label, ip) with at most `parallel` pings at once.

    `parallel` workers each take every parallel-th target in turn, so a dead peer (which holds its
    ping until `-w`, count * interval + 1 s) delays only its own worker, and no `wait -n` (bash only)
    is needed. Each ping writes to its own file, so outputs never interleave; at the end every
    result is printed as `@@preflight-ping <label> <ip> rc=<rc>` followed by ping's `-q` summary.
    """
    deadline = max(1, math.ceil(count * interval + 1))
    workers = max(1, min(int(parallel), len(targets)))
    # the targets are the positional parameters ("$@"), one quoted word each: no word splitting
    return sh(
        "set -- {targets}; "
        "d=$(mktemp -d) || exit 70; trap 'rm -rf \"$d\"' EXIT; "
        "w() {{ m=$1; shift; n=0; for t in \"$@\"; do n=$((n+1)); [ $(((n-1) % {workers})) -eq $m ] || continue; "
        "LC_ALL=C ping -q -n -c {count} -i {interval} -W 1 -w {deadline} \"${{t#*=}}\" >\"$d/$n\" 2>&1; "
        "echo $? >\"$d/$n.rc\"; done; }}; "
        "j=0; while [ $j -lt {workers} ]; do w $j \"$@\" & j=$((j+1)); done; wait; "
        "n=0; for t in \"$@\"; do n=$((n+1)); r=; read r <\"$d/$n.rc\"; "
        "printf {fmt} \"${{t%%=*}}\" \"${{t#*=}}\" \"$r\"; cat \"$d/$n\"; done",
        targets=[f"{label}={ip}" for label, ip in targets], workers=workers, count=int(count),
        interval=f"{interval:g}", deadline=deadline, fmt=MARK + " %s %s rc=%s\\n")


def split_mesh(text: str) -> dict[str, tuple[str, int | None, str]]:
    """mesh_script output -> {label: (ip, rc, ping output)}."""
    result: dict[str, tuple[str, int | None, str]] = {}
    label = None
    for line in text.splitlines():
        if line.startswith(MARK + " "):
            parts = line.split()
            label, ip = parts[1], parts[2]
            rc = parts[3].removeprefix("rc=")
            result[label] = (ip, int(rc) if rc.isdigit() else None, "")
        elif label is not None:
            ip, rc, body = result[label]
            result[label] = (ip, rc, body + line + "\n")
    return result
