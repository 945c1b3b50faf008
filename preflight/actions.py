"""What to do with a failure: every fail and warn carries one `action`, the way GPU fleet tools
grade an Xid (monitor it, fix the configuration, restart the job, reset the device, reboot the
node, replace the hardware).

Why the check decides and not a rule in the core: the check knows the cause. A check module
declares `ACTIONS`, a table `{problem: (action, source)}`: `problem` is a code the check names
where it finds that cause, `source` says where the grading comes from (a vendor page, the fault
code table in preflight/data/). A finding sets its action from it (`action=graded(ACTIONS,
"link_down", ...)`: the worst of the problems it names, since one finding can name several), or
from data (npu-smi's fault codes, the Xid table). The row `""` is the check's fallback, given to
a fail or warn that set none (and to the runner's own results for that check). The wording of a
summary never selects an action: rewording a message cannot change the repair.

A fail or warn of a check without a fallback gets DEFAULT[status] (warn: monitor, fail:
fix_config); tests/test_check_contract.py holds every shipped check to a table with a fallback.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from .model import Result, Status

# Least to most disruptive; the order is also the severity used to pick the worst.
ACTIONS: tuple[str, ...] = ("monitor", "fix_config", "restart_process", "reset_device", "reboot_node",
                            "replace_hardware")
RANK = {a: i for i, a in enumerate(ACTIONS)}
GRADED = (Status.FAIL, Status.WARN)
DEFAULT = {Status.WARN: "monitor", Status.FAIL: "fix_config"}


class RuleError(ValueError):
    pass


def table(rows: Mapping[str, Any], where: str) -> Mapping[str, tuple[str, str]]:
    """A module's ACTIONS as read-only {problem: (action, source)}; a bad row is the module's bug, named here."""
    from types import MappingProxyType

    if not isinstance(rows, Mapping):
        raise RuleError(f"{where}: ACTIONS must be a mapping {{problem: (action, source)}}, got {type(rows).__name__}")
    for problem, row in rows.items():
        if not isinstance(problem, str) or not isinstance(row, tuple) or len(row) != 2 \
                or not all(isinstance(x, str) for x in row):
            raise RuleError(f"{where}: ACTIONS[{problem!r}] must be (action, source) strings, got {row!r}")
        if row[0] not in RANK:
            raise RuleError(f"{where}: ACTIONS[{problem!r}]: action {row[0]!r}; expected one of {', '.join(ACTIONS)}")
        if not row[1].strip():
            raise RuleError(f"{where}: ACTIONS[{problem!r}] cites no source")
    return MappingProxyType(dict(rows))


def worst_action(actions: Iterable[str | None]) -> str | None:
    found = [a for a in actions if a]
    return max(found, key=RANK.__getitem__) if found else None


def graded(rows: Mapping[str, tuple[str, str]], *problems: str | None) -> str | None:
    """The worst action of the problems named in a check's ACTIONS (a KeyError for one the table
    lacks: the check's bug). None and "" name no problem: a finding that names none gets the
    check's fallback (assign), and one that names some is graded by those alone."""
    return worst_action(rows[p][0] for p in problems if p)


def fallback(rows: Mapping[str, tuple[str, str]], status: Status) -> str | None:
    """The action of a result that set none: the check's "" row, else DEFAULT (None for pass, skip, error)."""
    if status not in GRADED:
        return None
    row = rows.get("")
    return row[0] if row else DEFAULT[status]


def assign(results: Iterable[Result], tables: Mapping[str, Mapping[str, tuple[str, str]]]) -> list[Result]:
    """Every result with its action filled in (an action a finding set itself is kept)."""
    from dataclasses import replace

    out = []
    for r in results:
        if r.action is None and r.status in GRADED:
            r = replace(r, action=fallback(tables.get(r.check, {}), r.status))
        out.append(r)
    return out


def parse_list(text: str) -> tuple[str, ...]:
    """`reboot_node,replace_hardware` -> the tuple; an unknown name raises ValueError naming it."""
    names = tuple(a.strip() for a in text.split(",") if a.strip())
    bad = [a for a in names if a not in RANK]
    if bad or not names:
        raise ValueError(f"unknown action {', '.join(bad) or '(none given)'}; expected some of {', '.join(ACTIONS)}")
    return names
