"""What to do with a failure: every fail and warn carries one `action`, the way GPU fleet tools
grade an Xid (monitor it, fix the configuration, restart the job, reset the device, reboot the
node, replace the hardware).

Why a table per check and not a rule in the core: the check knows its findings. A check module
declares `ACTIONS`, rows of `(pattern, action, source)`: `pattern` is a regular expression searched
in the finding's summary, `source` names where the grading comes from (a vendor page, the fault
code table in preflight/data/). The worst action among the rows that match wins, because one
summary can name several problems (`device 1 link DOWN; device 2 link flapping`). A row with an
empty pattern is the check's fallback, used when no other row matches. A finding may also set its
action itself (Finding.action) when it computed it from data, and that wins.

A fail or warn that no row grades gets DEFAULT[status] (warn: monitor, fail: fix_config), so a
check written before it had a table still says something to act on; tests/test_check_contract.py
holds every shipped check to a table with a fallback row.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .model import Result, Status

# Least to most disruptive; the order is also the severity used to pick the worst.
ACTIONS: tuple[str, ...] = ("monitor", "fix_config", "restart_process", "reset_device", "reboot_node",
                            "replace_hardware")
RANK = {a: i for i, a in enumerate(ACTIONS)}
GRADED = (Status.FAIL, Status.WARN)
DEFAULT = {Status.WARN: "monitor", Status.FAIL: "fix_config"}


@dataclass(frozen=True)
class Rule:
    pattern: str
    action: str
    source: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "_re", re.compile(self.pattern) if self.pattern else None)

    def matches(self, summary: str) -> bool:
        rx = getattr(self, "_re")
        return rx is not None and rx.search(summary) is not None


class RuleError(ValueError):
    pass


def rules(rows: Iterable[Any], where: str) -> tuple[Rule, ...]:
    """A module's ACTIONS rows as Rules; a bad row is the module's bug, named here."""
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, (tuple, list)) or len(row) != 3 or not all(isinstance(x, str) for x in row):
            raise RuleError(f"{where}: ACTIONS[{i}] must be (pattern, action, source) strings, got {row!r}")
        pattern, action, source = row
        if action not in RANK:
            raise RuleError(f"{where}: ACTIONS[{i}]: action {action!r}; expected one of {', '.join(ACTIONS)}")
        if not source.strip():
            raise RuleError(f"{where}: ACTIONS[{i}] ({pattern!r}) cites no source")
        try:
            out.append(Rule(pattern, action, source))
        except re.error as exc:
            raise RuleError(f"{where}: ACTIONS[{i}]: bad pattern {pattern!r}: {exc}") from None
    return tuple(out)


def worst_action(actions: Iterable[str | None]) -> str | None:
    found = [a for a in actions if a]
    return max(found, key=RANK.__getitem__) if found else None


def choose(table: Iterable[Rule], status: Status, summary: str) -> str | None:
    """The action for one finding of a check with `table` (None for pass, skip, error)."""
    if status not in GRADED:
        return None
    table = tuple(table)
    hit = worst_action(r.action for r in table if r.matches(summary))
    if hit:
        return hit
    fallback = next((r.action for r in table if not r.pattern), None)
    return fallback or DEFAULT[status]


def assign(results: Iterable[Result], tables: Mapping[str, Iterable[Rule]]) -> list[Result]:
    """Every result with its action filled in (an action a finding set itself is kept)."""
    from dataclasses import replace

    out = []
    for r in results:
        if r.action is None and r.status in GRADED:
            r = replace(r, action=choose(tables.get(r.check, ()), r.status, r.summary))
        out.append(r)
    return out


def parse_list(text: str) -> tuple[str, ...]:
    """`reboot_node,replace_hardware` -> the tuple; an unknown name raises ValueError naming it."""
    names = tuple(a.strip() for a in text.split(",") if a.strip())
    bad = [a for a in names if a not in RANK]
    if bad or not names:
        raise ValueError(f"unknown action {', '.join(bad) or '(none given)'}; expected some of {', '.join(ACTIONS)}")
    return names
