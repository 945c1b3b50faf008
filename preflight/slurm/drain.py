"""Drain failing nodes and resume recovered ones, by the rule of LBNL NHC (node-mark-offline /
node-mark-online): a node is only ever resumed by the tool that drained it, recognised by the
prefix of its reason, and a node already offline for someone else's reason is left alone.

`plan()` is pure: the gate's report + Slurm's view of the nodes -> one Action per node (drain,
resume, or nothing with a note saying why). `apply()` runs the actions' scontrol lines, stopping
at the first refusal, so a user who is not an operator gets one line and nothing half-done
beyond what Slurm already accepted. The rule, item by item: docs/SLURM.md §2.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Callable, Sequence

from ..model import NodeStateKind, Report, Status
from ..registry import CONNECT_ID
from . import commands
from .parse import SlurmNode

PREFIX = "preflight:"
REASON_MAX = 120  # a Reason shows in `sinfo -R` and `scontrol show node`; keep it one short line


@dataclass(frozen=True)
class Action:
    node: str
    verb: str                 # "drain", "resume" or "none"
    note: str                 # why, for the operator
    reason: str | None = None

    @property
    def argv(self) -> list[str] | None:
        if self.verb == "drain":
            return commands.update_argv(self.node, "DRAIN", self.reason)
        if self.verb == "resume":
            return commands.update_argv(self.node, "RESUME")
        return None

    @property
    def line(self) -> str | None:
        return shlex.join(self.argv) if self.argv else None


def ours(reason: str | None) -> bool:
    return bool(reason) and reason.startswith(PREFIX)  # type: ignore[union-attr]


def reason_text(check: str, finding: str) -> str:
    """`preflight: <check> <short finding>`: node text is untrusted, so control characters go and
    the length is bounded."""
    finding = re.sub(r"[\x00-\x1f\x7f]+", " ", finding)
    text = " ".join(f"{PREFIX} {check} {finding}".split())
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 3].rstrip() + "..."


def findings(report: Report, strict: bool = False) -> dict[str, tuple[str, bool]]:
    """node -> (reason, unreachable) for every node the gate found unusable."""
    bad_status = {Status.FAIL, Status.ERROR} | ({Status.WARN} if strict else set())
    out: dict[str, tuple[str, bool]] = {}
    for n in report.nodes:
        if n.state is not NodeStateKind.OK:
            out[n.name] = (reason_text(CONNECT_ID, f"{n.state.value}{': ' + n.error if n.error else ''}"), True)
    for r in report.results:
        if r.node and r.node not in out and r.status in bad_status:
            out[r.node] = (reason_text(r.check, r.summary), False)
    return out


def plan(report: Report, slurm: dict[str, SlurmNode], drain: bool, resume: bool,
         drain_unreachable: bool = False, strict: bool = False) -> list[Action]:
    bad = findings(report, strict)
    actions = []
    for n in report.nodes:
        s = slurm.get(n.name)
        if s is None:
            actions.append(Action(n.name, "none", "not a node of this Slurm cluster (sinfo does not list it)"))
            continue
        if n.name in bad:
            reason, unreachable = bad[n.name]
            if not drain:
                actions.append(Action(n.name, "none", f"unusable ({reason}); not drained without --drain"))
            elif unreachable and not drain_unreachable:
                actions.append(Action(n.name, "none", f"unreachable; not drained without --drain-unreachable ({reason})"))
            elif s.offline and not ours(s.reason):
                actions.append(Action(n.name, "none", f"already {s.state} for a reason that is not ours "
                                                      f"({s.reason or 'none'}): left alone"))
            elif s.offline and s.reason == reason:
                actions.append(Action(n.name, "none", f"already drained by preflight ({reason})"))
            else:
                actions.append(Action(n.name, "drain", f"drain: {reason}", reason))
        elif s.offline and ours(s.reason):
            if drain or resume:
                actions.append(Action(n.name, "resume", f"resume: passes now (was: {s.reason})"))
            else:
                actions.append(Action(n.name, "none", f"passes, still {s.state} ({s.reason}); resumed only with --resume"))
        elif s.offline:
            actions.append(Action(n.name, "none", f"passes, but {s.state} for a reason that is not ours "
                                                  f"({s.reason or 'none'}): left alone"))
    return actions


def apply(actions: Sequence[Action], dry_run: bool, say: Callable[[str], None],
          update: Callable[[Sequence[str]], None] = commands.update) -> None:
    """Say every note; run (or, with dry_run, print) each scontrol line. Raises SlurmError on the
    first refusal (nothing after it runs)."""
    for a in actions:
        if a.argv is None:
            say(f"slurm: {a.node}: {a.note}")
        elif dry_run:
            say(f"slurm: dry run: {a.line}")
        else:
            update(a.argv)
            say(f"slurm: {a.node}: {a.note}")
