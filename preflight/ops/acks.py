"""`preflight ack NODE CHECK --until DATE --reason TEXT`: a known failure, acknowledged until a date.

Why in the history database: the nightly sweep and the gate must agree on what is known, and the
ack must outlive a shell session; the database is already the tool's memory (one file, 0600). An
acknowledged failure keeps its status and carries the ack in the JSON (`ack`: until, reason, by,
at), is dimmed in the views, and does not fail the run or the gate unless `--strict`. An ack past
its `until` stops applying by itself; nothing has to remove it.
"""
from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, replace
from datetime import datetime, time, timedelta, timezone

from ..model import Report, Status
from ..nodeset import RangeError, expand
from ..registry import discover, matches
from ..safefile import user_name

ACKED = (Status.FAIL, Status.WARN, Status.ERROR)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class AckError(ValueError):
    pass


@dataclass(frozen=True)
class Ack:
    id: int
    node: str  # a node set (node[01-03]) or a name
    check: str  # an id or a prefix (hccn = every hccn.*)
    until: str  # UTC, YYYY-MM-DDTHH:MM:SSZ
    reason: str
    by: str
    at: str

    def as_detail(self) -> dict[str, str]:
        return {"until": self.until, "reason": self.reason, "by": self.by, "at": self.at}


def _utc(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_until(text: str, now: datetime | None = None) -> str:
    """`2026-12-24` (through the end of that day, UTC) or an ISO time with a zone -> UTC text."""
    now = now or datetime.now(timezone.utc)
    text = text.strip()
    try:
        if _DATE.match(text):
            dt = datetime.combine(datetime.fromisoformat(text).date(), time(23, 59, 59), tzinfo=timezone.utc)
        else:
            dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
            if dt.tzinfo is None:
                raise AckError(f"--until {text!r}: give a time zone (e.g. {text}Z) or a plain date")
    except ValueError as exc:
        if isinstance(exc, AckError):
            raise
        raise AckError(f"--until {text!r}: expected a date YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]Z") from None
    if dt <= now:
        raise AckError(f"--until {text!r} is already past")
    return _utc(dt)


def add(db: sqlite3.Connection, node: str, check: str, until: str, reason: str,
        now: datetime | None = None) -> Ack:
    if not reason.strip():
        raise AckError("--reason must say why (it is shown next to the failure)")
    try:
        expand(node)
    except RangeError as exc:
        raise AckError(f"NODE {node!r}: {exc}") from None
    if not any(matches(c, check) for c in discover()):
        raise AckError(f"no check matches {check!r} (see: preflight list-checks)")
    at = _utc(now or datetime.now(timezone.utc))
    by = user_name()  # the real uid's name: $LOGNAME and $USER are the caller's to set
    stamp = parse_until(until, now)
    # history.open_db's connection autocommits: this one INSERT is its own transaction
    cur = db.execute("INSERT INTO acks (node, check_id, until, reason, by, at) VALUES (?,?,?,?,?,?)",
                     (node, check, stamp, reason.strip(), by, at))
    return Ack(int(cur.lastrowid), node, check, stamp, reason.strip(), by, at)


def active(db: sqlite3.Connection, now: datetime | None = None) -> list[Ack]:
    """Acks whose `until` is still ahead; newest first (the newest reason is the one shown)."""
    stamp = _utc(now or datetime.now(timezone.utc))
    return [Ack(*row) for row in db.execute(
        "SELECT id, node, check_id, until, reason, by, at FROM acks WHERE until > ? ORDER BY id DESC", (stamp,))]


def apply(report: Report, acks: list[Ack]) -> Report:
    """The report with every fail/warn/error that an active ack covers carrying that ack."""
    if not acks:
        return report
    expanded = [(set(expand(a.node)), a) for a in acks]
    results = []
    for r in report.results:
        if r.node and r.status in ACKED and r.ack is None:
            hit = next((a for nodes, a in expanded if r.node in nodes and matches(r.check, a.check)), None)
            if hit is not None:
                r = replace(r, ack=hit.as_detail())
        results.append(r)
    return replace(report, results=tuple(results))


def expires_in(ack: Ack, now: datetime | None = None) -> timedelta:
    until = datetime.strptime(ack.until, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    return until - (now or datetime.now(timezone.utc))
