"""Pure parsers of Slurm's own output.

`sinfo -h -N -o '%N %t %E'` is what NHC's node-mark-online reads to decide whether a node is
offline and who put it there: node name, compact state, reason ("none" when there is none).
Compact states (sinfo(1), NODE STATE CODES) carry a suffix: `*` not responding, `~` powered off,
`#` powering up, `%` powering down, `!` pending power down, `$` maintenance reservation, `@`
pending reboot, `^` rebooting, `-` planned by backfill. With -N a node in several partitions is
listed once per partition; the first line wins. docs/SLURM.md §1.1 has the table and sources.
"""
from __future__ import annotations

from dataclasses import dataclass

# Compact base states that keep new jobs off the node (NHC's node-mark-online table).
OFFLINE = ("down", "drain", "drng", "fail", "maint", "boot")
SUFFIXES = "*~#%!$@^-"


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str             # sinfo's compact state, suffix included: idle, drain, down*, ...
    reason: str | None     # None when sinfo says "none"

    @property
    def base(self) -> str:
        return self.state.rstrip(SUFFIXES)

    @property
    def offline(self) -> bool:
        return self.base.startswith(OFFLINE)

    @property
    def responding(self) -> bool:
        return "*" not in self.state


def parse_sinfo_states(text: str) -> dict[str, SlurmNode]:
    out: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        parts = line.strip().split(None, 2)
        if len(parts) < 2 or parts[0] in out:
            continue
        reason = parts[2].strip() if len(parts) == 3 else "none"
        out[parts[0]] = SlurmNode(parts[0], parts[1], None if reason == "none" else reason)
    return out
