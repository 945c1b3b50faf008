"""What the history remembers across runs: sticky flapping, the worst nodes, the node x run grid,
and retention.

Why sticky: a port that went down at 02:00 and came back at 02:05 passes the 03:00 sweep, yet it
is the port that will stall the next job. So a (node, check) that failed in any of the last N
stored runs is shown as flapping even while it passes now. Why a ranking: in published fleet
studies a few nodes cause most exclusions; `history --worst` names them, by the number of runs
they failed in over a window, then by how many checks.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from ..model import Report, Status, worst

FAILED = ("fail", "error")
DEFAULT_FLAP_WINDOW = 5


def _last_runs(db: sqlite3.Connection, n: int) -> list[int]:
    return [r[0] for r in db.execute("SELECT id FROM runs ORDER BY id DESC LIMIT ?", (n,))][::-1]


def failed_recently(db: sqlite3.Connection, window: int) -> dict[tuple[str, str], int]:
    """(node, check) -> in how many of the last `window` stored runs it failed."""
    ids = _last_runs(db, window)
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    out: dict[tuple[str, str], int] = {}
    for node, check, n in db.execute(
            f"SELECT node, check_id, COUNT(DISTINCT run_id) FROM results WHERE run_id IN ({marks}) "
            f"AND node IS NOT NULL AND status IN ('fail','error') GROUP BY node, check_id", ids):
        out[(node, check)] = n
    return out


def mark_flapping(report: Report, db: sqlite3.Connection, window: int = DEFAULT_FLAP_WINDOW) -> Report:
    """Results that pass now but failed in one of the last `window` stored runs: flapping=True."""
    recent = failed_recently(db, window)
    if not recent:
        return report
    results = tuple(replace(r, flapping=True) if r.node and r.status in (Status.PASS, Status.WARN)
                    and (r.node, r.check) in recent else r for r in report.results)
    return replace(report, results=results)


@dataclass(frozen=True)
class Worst:
    node: str
    runs_failed: int
    runs_seen: int
    checks: dict[str, int]  # check -> runs it failed in
    last_failed_run: int


def worst_nodes(db: sqlite3.Connection, window: int = 30, top: int = 20) -> list[Worst]:
    """Nodes ranked by the runs (of the last `window`) in which anything failed on them, then by
    how many distinct checks failed, then by name."""
    ids = _last_runs(db, window)
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    seen = dict(db.execute(f"SELECT name, COUNT(*) FROM nodes WHERE run_id IN ({marks}) GROUP BY name", ids).fetchall())
    runs: dict[str, set[int]] = {}
    checks: dict[str, dict[str, set[int]]] = {}
    for node, check, run in db.execute(
            f"SELECT node, check_id, run_id FROM results WHERE run_id IN ({marks}) AND node IS NOT NULL "
            f"AND status IN ('fail','error')", ids):
        runs.setdefault(node, set()).add(run)
        checks.setdefault(node, {}).setdefault(check, set()).add(run)
    out = [Worst(n, len(r), seen.get(n, len(r)), {c: len(v) for c, v in sorted(checks[n].items())}, max(r))
           for n, r in runs.items()]
    out.sort(key=lambda w: (-w.runs_failed, -len(w.checks), w.node))
    return out[:top]


@dataclass(frozen=True)
class Grid:
    runs: list[tuple[int, str, str]]  # (id, finished_at, verdict), oldest first
    nodes: list[str]
    cells: dict[tuple[str, int], tuple[str, list[str]]]  # (node, run) -> (worst status, failing checks)


def run_grid(db: sqlite3.Connection, last: int = 20) -> Grid:
    """Node x run: the worst status of each node in each of the last runs, and what failed."""
    runs = [tuple(r) for r in db.execute("SELECT id, finished_at, verdict FROM runs ORDER BY id DESC LIMIT ?",
                                         (last,))][::-1]
    ids = [r[0] for r in runs]
    if not ids:
        return Grid([], [], {})
    marks = ",".join("?" * len(ids))
    statuses: dict[tuple[str, int], list[Status]] = {}
    failing: dict[tuple[str, int], list[str]] = {}
    for node, check, status, run in db.execute(
            f"SELECT node, check_id, status, run_id FROM results WHERE run_id IN ({marks}) AND node IS NOT NULL "
            f"ORDER BY id", ids):
        statuses.setdefault((node, run), []).append(Status(status))
        if status in FAILED + ("warn",):
            failing.setdefault((node, run), []).append(f"{check} {status}")
    nodes = list(dict.fromkeys(n for (n, _) in statuses))
    for node, state, run in db.execute(f"SELECT name, state, run_id FROM nodes WHERE run_id IN ({marks})", ids):
        if state != "ok":
            failing.setdefault((node, run), []).insert(0, f"node {state}")
            statuses.setdefault((node, run), []).append(Status.ERROR)
            if node not in nodes:
                nodes.append(node)
    cells = {k: (worst(v).value, sorted(set(failing.get(k, [])))) for k, v in statuses.items()}
    return Grid(runs, nodes, cells)  # type: ignore[arg-type]


def prune(db: sqlite3.Connection, keep_days: float, now: datetime | None = None) -> int:
    """Delete runs finished more than `keep_days` ago (results and metrics go with them: ON DELETE
    CASCADE) and acks expired as long ago; one transaction. Returns how many runs went."""
    cutoff = ((now or datetime.now(timezone.utc)) - timedelta(days=keep_days)).strftime("%Y-%m-%dT%H:%M:%SZ")
    db.execute("BEGIN IMMEDIATE")
    try:
        n = db.execute("DELETE FROM runs WHERE finished_at < ?", (cutoff,)).rowcount
        db.execute("DELETE FROM acks WHERE until < ?", (cutoff,))
        db.execute("COMMIT")
    except sqlite3.Error:
        db.execute("ROLLBACK")
        raise
    return n


def remembered(report: Report, db: sqlite3.Connection | None, flap_window: int = DEFAULT_FLAP_WINDOW) -> Report:
    """The report as the history sees it: active acks attached, sticky flapping marked. Read
    before this run is stored, so "the last N runs" are the ones before it."""
    if db is None:
        return report
    from . import acks
    report = acks.apply(report, acks.active(db))
    return mark_flapping(report, db, flap_window) if flap_window > 0 else report


def open_default() -> sqlite3.Connection | None:
    """The default history database when it exists (acks written by `preflight ack` live there),
    else None. Raises HistoryError (one line) when it exists but cannot be read."""
    from . import history as hist
    path = hist.default_path()
    return hist.open_db(path, create=False) if path.exists() else None
