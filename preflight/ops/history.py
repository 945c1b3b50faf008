"""Run history in SQLite: what a nightly sweep needs to say "what changed" and "what is degrading".

Why SQLite: one file, transactional, in the standard library. Each run is written in ONE transaction
(runs, node states, results, every `details.metrics` entry), so a crash or a full disk loses that run
only and never damages an earlier one (SQLite's rollback journal guarantees it). The schema version
lives in `PRAGMA user_version` and is migrated forward step by step on open; a database written by a
newer preflight is refused rather than guessed at.
"""
from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ..model import Report, Status, worst

SCHEMA_VERSION = 3
BAD = {Status.FAIL.value, Status.ERROR.value}


class HistoryError(Exception):
    """One line for the user: which database, what went wrong."""


def default_path() -> Path:
    """The configured `history` (preflight/config.py: PREFLIGHT_HISTORY, config files), else
    $XDG_STATE_HOME/preflight/history.sqlite (XDG base dirs; fallback ~/.local/state)."""
    from ..config import history_file
    return history_file()


# ---------------------------------------------------------------- schema

def _script(db: sqlite3.Connection, sql: str) -> None:
    """Statements one by one: `executescript` would COMMIT first and break the migration transaction."""
    for stmt in sql.split(";"):
        if stmt.strip():
            db.execute(stmt)


def _v1(db: sqlite3.Connection) -> None:
    _script(db, """
        CREATE TABLE runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            started_at TEXT NOT NULL, finished_at TEXT NOT NULL,
            inventory_path TEXT, inventory_sha256 TEXT, cluster TEXT, tool_version TEXT,
            exit_code INTEGER NOT NULL, verdict TEXT NOT NULL, interrupted INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE nodes (
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            name TEXT NOT NULL, host TEXT, state TEXT NOT NULL, error TEXT,
            PRIMARY KEY (run_id, name));
        CREATE TABLE results (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            check_id TEXT NOT NULL, node TEXT, status TEXT NOT NULL, summary TEXT,
            remediation TEXT, duration_s REAL, details TEXT);
        CREATE TABLE metrics (
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            result_id INTEGER NOT NULL REFERENCES results(id) ON DELETE CASCADE,
            check_id TEXT NOT NULL, node TEXT, name TEXT NOT NULL, value REAL NOT NULL,
            unit TEXT, labels TEXT NOT NULL);
    """)


def _v2(db: sqlite3.Connection) -> None:
    """Sweep flag on runs; indexes for the trend and diff queries."""
    _script(db, """
        ALTER TABLE runs ADD COLUMN sweep INTEGER NOT NULL DEFAULT 0;
        CREATE INDEX results_run ON results(run_id);
        CREATE INDEX metrics_series ON metrics(check_id, name, node, run_id);
    """)


def _v3(db: sqlite3.Connection) -> None:
    """The report's run_id on runs; acknowledgements (`preflight ack`); an index for retention."""
    _script(db, """
        ALTER TABLE runs ADD COLUMN run_uuid TEXT;
        CREATE TABLE acks (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            node TEXT NOT NULL, check_id TEXT NOT NULL, until TEXT NOT NULL,
            reason TEXT NOT NULL, by TEXT NOT NULL, at TEXT NOT NULL);
        CREATE INDEX runs_finished ON runs(finished_at);
    """)


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1, _v2, _v3]  # MIGRATIONS[i]: version i -> i+1
assert len(MIGRATIONS) == SCHEMA_VERSION


def _prepare_file(path: Path, create: bool) -> None:
    """Parent dir 0700 and the DB file 0600 before SQLite touches it (it would use the umask, and
    follow a dangling link to create its target); the file is a regular one of the invoking user
    or root that nobody else can write, since its acks turn failures into READY (safefile)."""
    from ..safefile import open_private, trusted_file
    try:
        os.close(open_private(path, create=create))
        trusted_file(path, "history database (its acks decide READY)")
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
        raise HistoryError(f"cannot open history database {path}: {exc.strerror}{where}") from None


def _why(exc: sqlite3.Error) -> str:
    return str(exc) or type(exc).__name__


def open_db(path: str | os.PathLike, create: bool = True) -> sqlite3.Connection:
    """Open (creating with mode 0600 if asked) and migrate to SCHEMA_VERSION."""
    p = Path(path)
    if not create and not os.path.lexists(p):
        raise HistoryError(f"no history database at {p} (run `preflight run INVENTORY --history` first)")
    _prepare_file(p, create)
    try:
        db = sqlite3.connect(str(p), timeout=5.0, isolation_level=None)
        db.execute("PRAGMA foreign_keys = ON")
        version = db.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"cannot read history database {p}: {_why(exc)}") from None
    if version > SCHEMA_VERSION:
        db.close()
        raise HistoryError(f"history database {p} has schema version {version}, newer than this "
                           f"preflight understands ({SCHEMA_VERSION}); upgrade preflight")
    if version < SCHEMA_VERSION:
        try:
            db.execute("BEGIN IMMEDIATE")
            for step in MIGRATIONS[version:]:
                step(db)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            db.close()
            raise HistoryError(f"cannot migrate history database {p}: {_why(exc)}") from None
    return db


# ---------------------------------------------------------------- writing

def store(db: sqlite3.Connection, report: Report, sweep: bool = False) -> int:
    """Write one run in one transaction; returns its id. On any error nothing of it remains."""
    try:
        db.execute("BEGIN IMMEDIATE")
        cur = db.execute(
            "INSERT INTO runs (started_at, finished_at, inventory_path, inventory_sha256, cluster, tool_version,"
            " exit_code, verdict, interrupted, sweep, run_uuid) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (report.started_at, report.finished_at, report.inventory_path, report.inventory_sha256,
             report.cluster, report.tool_version, report.exit_code, report.verdict, int(report.interrupted),
             int(sweep), report.run_id or None))
        run_id = int(cur.lastrowid)
        db.executemany("INSERT INTO nodes (run_id, name, host, state, error) VALUES (?,?,?,?,?)",
                       [(run_id, n.name, n.host, n.state.value, n.error) for n in report.nodes])
        for r in report.results:
            cur = db.execute(
                "INSERT INTO results (run_id, check_id, node, status, summary, remediation, duration_s, details)"
                " VALUES (?,?,?,?,?,?,?,?)",
                (run_id, r.check, r.node, r.status.value, r.summary, r.remediation, r.duration_s,
                 json.dumps(r.details, default=str, sort_keys=True)))
            db.executemany(
                "INSERT INTO metrics (run_id, result_id, check_id, node, name, value, unit, labels)"
                " VALUES (?,?,?,?,?,?,?,?)",
                [(run_id, cur.lastrowid, r.check, r.node, m["name"], float(m["value"]), m.get("unit", ""),
                  labels_key(m.get("labels") or {})) for m in _metrics(r.details)])
        db.execute("COMMIT")
        return run_id
    except (sqlite3.Error, OSError) as exc:
        try:
            if db.in_transaction:
                db.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        raise HistoryError(f"cannot write to the history database: {_why(exc)} "
                           f"(earlier runs are intact)") from None


def _metrics(details: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """Well-formed `details.metrics` entries; a malformed one is not worth failing the run over."""
    for m in details.get("metrics") or ():
        if isinstance(m, dict) and isinstance(m.get("name"), str) and isinstance(m.get("value"), (int, float)) \
                and not isinstance(m.get("value"), bool):
            yield m


def labels_key(labels: Mapping[str, Any]) -> str:
    """A metric's labels as stored: the key that names one series (trends, ops/baseline.py)."""
    return json.dumps({str(k): str(v) for k, v in labels.items()}, sort_keys=True)


# ---------------------------------------------------------------- reading

@dataclass(frozen=True)
class RunRow:
    id: int
    started_at: str
    finished_at: str
    cluster: str | None
    inventory_path: str | None
    exit_code: int
    verdict: str
    sweep: bool
    nodes: int
    counts: dict[str, int]


def runs(db: sqlite3.Connection, limit: int = 20) -> list[RunRow]:
    """The newest `limit` runs, oldest first."""
    rows = db.execute("SELECT id, started_at, finished_at, cluster, inventory_path, exit_code, verdict, sweep"
                      " FROM runs ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
    out = []
    for rid, st, fin, cl, inv, code, verdict, sweep in reversed(rows):
        counts = {s.value: 0 for s in Status}
        for status, n in db.execute("SELECT status, COUNT(*) FROM results WHERE run_id=? GROUP BY status", (rid,)):
            counts[status] = n
        nodes = db.execute("SELECT COUNT(*) FROM nodes WHERE run_id=?", (rid,)).fetchone()[0]
        out.append(RunRow(rid, st, fin, cl, inv, code, verdict, bool(sweep), nodes, counts))
    return out


def resolve(db: sqlite3.Connection, ref: str | int | None, default_back: int) -> int:
    """A run id: a positive id as stored, or -N for the N-th newest (-1 the last); None: -default_back."""
    if ref is None:
        ref = -default_back
    try:
        n = int(ref)
    except ValueError:
        raise HistoryError(f"bad run {ref!r}: give a run id from `preflight history` or -N (-1 = latest)") from None
    if n < 0:
        row = db.execute("SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET ?", (-n - 1,)).fetchone()
        if row is None:
            total = db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
            raise HistoryError(f"run {n} does not exist: the history holds {total} run(s)")
        return int(row[0])
    if db.execute("SELECT 1 FROM runs WHERE id=?", (n,)).fetchone() is None:
        raise HistoryError(f"no run with id {n} (see: preflight history)")
    return n


def statuses(db: sqlite3.Connection, run_id: int) -> dict[tuple[str, str], tuple[str, str]]:
    """(node or `_cluster`, check) -> (worst status, summary of that worst result)."""
    found: dict[tuple[str, str], list[tuple[Status, str]]] = {}
    for check, node, status, summary in db.execute(
            "SELECT check_id, node, status, summary FROM results WHERE run_id=? ORDER BY id", (run_id,)):
        found.setdefault((node or "_cluster", check), []).append((Status(status), summary or ""))
    out = {}
    for key, items in found.items():
        w = worst(s for s, _ in items)
        out[key] = (w.value, next(txt for s, txt in items if s is w))
    return out


@dataclass(frozen=True)
class Change:
    node: str
    check: str
    before: str | None  # status in the older run (None: not in it)
    after: str | None
    summary: str


@dataclass(frozen=True)
class Diff:
    run_a: int
    run_b: int
    new: list[Change]        # bad now, not bad before
    recovered: list[Change]  # bad before, not bad now
    still: list[Change]      # bad in both
    changed: list[Change]    # other status changes (pass <-> warn, skip)


def diff(db: sqlite3.Connection, run_a: int, run_b: int) -> Diff:
    """Per (node, check): what newly fails, what recovered, what still fails between two runs.
    "Fails" means fail or error (could not tell): either way the node is not usable."""
    a, b = statuses(db, run_a), statuses(db, run_b)
    new, recovered, still, changed = [], [], [], []
    for key in sorted(set(a) | set(b)):
        sa, sb = a.get(key, (None, ""))[0], b.get(key, (None, ""))[0]
        summary = (b.get(key) or a.get(key) or (None, ""))[1]
        ch = Change(key[0], key[1], sa, sb, summary if sb is not None else a[key][1])
        if sb in BAD and sa not in BAD:
            new.append(ch)
        elif sa in BAD and sb not in BAD:
            recovered.append(ch)
        elif sa in BAD and sb in BAD:
            still.append(ch)
        elif sa != sb and sa is not None and sb is not None:
            changed.append(ch)
    return Diff(run_a, run_b, new, recovered, still, changed)


# ---------------------------------------------------------------- trends

@dataclass(frozen=True)
class Trend:
    node: str
    check: str
    metric: str
    labels: dict[str, str]
    unit: str
    values: list[float]  # oldest first, one per run
    run_ids: list[int]
    slope: float         # units per run (least squares)
    drop_pct: float      # change first -> last in % of the first, positive = got worse

    @property
    def label_text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))


def _slope(ys: list[float]) -> float:
    n = len(ys)
    mx, my = (n - 1) / 2, sum(ys) / n
    den = sum((i - mx) ** 2 for i in range(n))
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / den if den else 0.0


def trends(db: sqlite3.Connection, check: str, metric: str, window: int = 5, min_points: int = 3,
           min_drop_pct: float = 20.0, min_slope_pct: float = 3.0, rising: bool = False,
           limit_nodes: Iterable[str] | None = None) -> tuple[list[Trend], int]:
    """Series of `metric` from `check` over the last `window` runs that measured it, one per
    (node, labels); returns (warnings, series examined).

    A series warns when it moves the bad way steadily: the least-squares slope is at least
    `min_slope_pct` % of the first value per run AND the total change first -> last is at least
    `min_drop_pct` %. Both, so one noisy reading does not warn and a slow drift that has not added
    up to much yet does not either. Falling is bad by default (Rx power, free space); `rising`
    flips it (RTT, loss). This looks at numbers only: it warns before the module's own threshold
    is crossed, which is the point."""
    run_ids = [r[0] for r in db.execute(
        "SELECT DISTINCT run_id FROM metrics WHERE check_id=? AND name=? ORDER BY run_id DESC LIMIT ?",
        (check, metric, window))][::-1]
    if not run_ids:
        return [], 0
    wanted = set(limit_nodes) if limit_nodes is not None else None
    series: dict[tuple[str, str], dict[int, tuple[float, str]]] = {}
    marks = ",".join("?" * len(run_ids))
    for run_id, node, value, unit, labels in db.execute(
            f"SELECT run_id, node, value, unit, labels FROM metrics WHERE check_id=? AND name=? "
            f"AND run_id IN ({marks}) ORDER BY run_id", (check, metric, *run_ids)):
        node = node or "_cluster"
        if wanted is not None and node not in wanted:
            continue
        series.setdefault((node, labels), {})[run_id] = (value, unit or "")
    out = []
    for (node, labels), by_run in sorted(series.items()):
        ids = [r for r in run_ids if r in by_run]
        ys = [by_run[r][0] for r in ids]
        if len(ys) < max(2, min_points):
            continue
        slope = _slope(ys)
        first = ys[0]
        sign = 1.0 if rising else -1.0
        change = sign * (ys[-1] - first)
        scale = abs(first) if first else max(abs(y) for y in ys) or 1.0
        drop_pct = 100.0 * change / scale
        slope_pct = 100.0 * sign * slope / scale
        if drop_pct >= min_drop_pct and slope_pct >= min_slope_pct:
            out.append(Trend(node, check, metric, json.loads(labels), by_run[ids[-1]][1], ys, ids, slope, drop_pct))
    return out, len(series)
