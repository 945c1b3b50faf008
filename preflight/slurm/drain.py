"""Drain failing nodes and resume recovered ones, by the rule of LBNL NHC (node-mark-offline /
node-mark-online): a node is only ever resumed by the tool that drained it, recognised by the
prefix of its reason, and a node already offline for someone else's reason is left alone.

`decide()` is pure: the gate's report + Slurm's view of the nodes -> one Action per node (drain,
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


def reason_text(checks: str | Sequence[str], finding: str) -> str:
    """`preflight: <check>[,<check>...] <short finding>`: every check that failed on the node comes
    first and whole (a resume needs each of them to pass again); node text is untrusted, so control
    characters go and the finding is cut to keep the line short."""
    ids = ",".join([checks] if isinstance(checks, str) else checks)
    finding = re.sub(r"[\x00-\x1f\x7f]+", " ", finding)
    text = " ".join(f"{PREFIX} {ids} {finding}".split())
    keep = max(REASON_MAX, len(PREFIX) + len(ids) + 5)
    return text if len(text) <= keep else text[: keep - 3].rstrip() + "..."


_CHECK_ID = re.compile(r"[a-z][a-z0-9_]*\.[a-z0-9_]+")


def drained_by(reason: str | None) -> list[str] | None:
    """The check ids our drain Reason names (reason_text's first word); None when it names none
    (a Reason written by hand or by something else that begins with our prefix)."""
    if not ours(reason):
        return None
    head = reason[len(PREFIX):].split(maxsplit=1)  # type: ignore[index]
    ids = head[0].split(",") if head else []
    return ids if ids and all(_CHECK_ID.fullmatch(i) for i in ids) else None


def _counts(r, strict: bool) -> bool:
    """A result that makes its node unusable: a fail or error (with strict, a warn); an
    acknowledged failure only with strict (as `gate` says READY over it: ops/gate.split_nodes)."""
    bad = {Status.FAIL, Status.ERROR} | ({Status.WARN} if strict else set())
    return r.status in bad and (strict or not r.ack)


def findings(report: Report, strict: bool = False) -> dict[str, tuple[list[str], str, bool]]:
    """node -> (the checks that failed on it, the first one's summary, unreachable) for every node
    the gate found unusable."""
    out: dict[str, tuple[list[str], str, bool]] = {}
    for n in report.nodes:
        if n.state is not NodeStateKind.OK:
            out[n.name] = ([CONNECT_ID], f"{n.state.value}{': ' + n.error if n.error else ''}", True)
    failed: dict[str, list] = {}
    for r in report.results:
        if r.node and r.node not in out and _counts(r, strict):
            failed.setdefault(r.node, []).append(r)
    for node, rows in failed.items():
        out[node] = (list(dict.fromkeys(r.check for r in rows)), rows[0].summary, False)
    return out


def not_passed_again(report: Report, node: str, checks: Sequence[str], strict: bool = False) -> list[str]:
    """Those of `checks` that did not run again on `node` and pass: no result of it for the node, a
    skip, an error, or (a cluster check with no row for the node) a summary that did not judge."""
    missing = []
    for check in checks:
        if check == CONNECT_ID:
            ok = any(n.name == node and n.state is NodeStateKind.OK for n in report.nodes)
        else:
            mine = [r for r in report.results if r.check == check and r.node == node]
            summary = [r for r in report.results if r.check == check and r.node is None]
            if mine:
                ok = all(r.status is Status.PASS or (not strict and r.status is Status.WARN)
                         or (not strict and r.ack and r.status is Status.FAIL) for r in mine)
            else:
                ok = any(r.status in (Status.PASS, Status.WARN, Status.FAIL) for r in summary)
        if not ok:
            missing.append(check)
    return missing


def decide(report: Report, slurm: dict[str, SlurmNode], drain: bool, resume: bool,
           drain_unreachable: bool = False, strict: bool = False) -> list[Action]:
    bad = findings(report, strict)
    actions = []
    for n in report.nodes:
        s = slurm.get(n.name)
        if s is None:
            actions.append(Action(n.name, "none", "not a node of this Slurm cluster (sinfo does not list it)"))
            continue
        if n.name in bad:
            checks, summary, unreachable = bad[n.name]
            if s.offline and ours(s.reason):  # drained before: its checks stay named until they pass again
                prior = [c for c in drained_by(s.reason) or () if c not in checks]
                checks = checks + not_passed_again(report, n.name, prior, strict)
            reason = reason_text(checks, summary)
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
            if not (drain or resume):
                actions.append(Action(n.name, "none", f"passes, still {s.state} ({s.reason}); resumed only with --resume"))
                continue
            by = drained_by(s.reason)
            missing = not_passed_again(report, n.name, by, strict) if by is not None else None
            if by is None:
                actions.append(Action(n.name, "none", f"still {s.state} ({s.reason}): the reason names no check "
                                                      "preflight can run again; resume it by hand"))
            elif missing:
                actions.append(Action(n.name, "none", f"still {s.state} ({s.reason}): not resumed, "
                                                      f"{', '.join(missing)} did not run again and pass"))
            else:
                actions.append(Action(n.name, "resume", f"resume: {', '.join(by)} passed again (was: {s.reason})"))
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
