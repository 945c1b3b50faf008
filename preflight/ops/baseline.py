"""A figure against its own past: with `run --history`, a check whose policy asks for it
(`Policy(baseline=True)`, smoke.allreduce's busbw) warns where this run's value of its
`trend_metric` lies at least 3 standard deviations the bad way from the same series' stored
values.

Why a series' own past and not only the fleet's median: a pair of nodes that always reached
48 GB/s and now reaches 30 is degrading even when the round's median lets it pass (MindCluster's
slow-node rule: a node 3 sigma under its own baseline). A series is what `preflight trend` follows
(check, metric, node, labels: smoke.allreduce's pair rank0/rank1, or the whole collective's node
and rank counts), so the two agree on what "the same figure" is.

Why a floor beside 3 sigma: a steady series' sigma can be near zero on a quiet fabric, and then any
wobble would warn; a value must also be at least FLOOR of the baseline's mean away. Why at least
MIN_RUNS stored values: a sigma from two or three points says nothing. Read before this run is
stored (ops/memory.py), so the baseline is the runs before it; a degraded value joins the baseline
once stored, so a lasting change stops warning after a while, as the operator has then seen it.
"""
from __future__ import annotations

import sqlite3
import statistics
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from ..actions import graded
from ..model import Report, Result, Status
from .history import labels_key

WINDOW = 10  # stored values of a series that make its baseline (the newest)
MIN_RUNS = 5
SIGMAS = 3.0
FLOOR = 0.10  # and at least this share of the baseline's mean away
PROBLEM = "under_baseline"  # the ACTIONS row a baseline check grades its warn by


@dataclass(frozen=True)
class Drift:
    metric: str
    labels: dict[str, str]
    unit: str
    value: float
    mean: float
    sd: float
    runs: int
    rising_is_bad: bool = False

    def text(self) -> str:
        where = ", ".join(f"{k}={v}" for k, v in sorted(self.labels.items()) if v)
        u = f" {self.unit}" if self.unit else ""
        return (f"{self.metric} {self.value:.3g}{u}" + (f" ({where})" if where else "")
                + f" is {abs(self.value - self.mean) / self.sd if self.sd else float('inf'):.1f} sigma "
                f"{'over' if self.rising_is_bad else 'under'} its baseline {self.mean:.3g} +- {self.sd:.2g}{u} over the last {self.runs} stored runs")

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "labels": dict(self.labels), "value": self.value, "mean": self.mean,
                "sd": self.sd, "runs": self.runs}


def judge(value: float, past: list[float], rising_is_bad: bool) -> tuple[float, float] | None:
    """(mean, sd) of `past` when `value` is SIGMAS sd and FLOOR of the mean the bad way from it;
    None when it is not, or when `past` holds fewer than MIN_RUNS values."""
    if len(past) < MIN_RUNS:
        return None
    mean, sd = statistics.fmean(past), statistics.stdev(past)
    off = (value - mean) if rising_is_bad else (mean - value)
    return (mean, sd) if off >= SIGMAS * sd and off >= FLOOR * abs(mean) and off > 0 else None


def _past(db: sqlite3.Connection, check: str, node: str | None, metric: str, labels: Mapping[str, Any]) -> list[float]:
    rows = db.execute("SELECT value FROM metrics WHERE check_id=? AND name=? AND node IS ? AND labels=? "
                      "ORDER BY run_id DESC LIMIT ?", (check, metric, node, labels_key(labels), WINDOW))
    return [r[0] for r in rows]


def drifts(db: sqlite3.Connection, result: Result, metric: str, rising_is_bad: bool) -> list[Drift]:
    out = []
    for m in result.details.get("metrics") or ():
        if not isinstance(m, dict) or m.get("name") != metric or isinstance(m.get("value"), bool) \
                or not isinstance(m.get("value"), (int, float)):
            continue
        labels = {str(k): str(v) for k, v in (m.get("labels") or {}).items()}
        past = _past(db, result.check, result.node, metric, labels)
        found = judge(float(m["value"]), past, rising_is_bad)
        if found:
            out.append(Drift(metric, labels, str(m.get("unit") or ""), float(m["value"]), *found, len(past), rising_is_bad))
    return out


def mark(report: Report, db: sqlite3.Connection, policy_of: Callable[[str], Any]) -> Report:
    """The report with a warn where a baseline check's figure left its series' baseline: the row
    that carried the figure (a pass becomes a warn; a warn or fail keeps its status and gains the
    text), and a warn row for each node the figure's labels name that has no row of that check
    yet (a pair's two ends). `policy_of(check)` is the check's CheckInfo, or None."""
    rows = list(report.results)
    names = {n.name for n in report.nodes}
    present = {(r.check, r.node) for r in rows}
    added: list[Result] = []
    changed = False
    for i, r in enumerate(rows):
        info = policy_of(r.check)
        if info is None or not info.baseline or r.status in (Status.SKIP, Status.ERROR):
            continue
        metric, rising = info.trend_metric
        found = drifts(db, r, metric, rising)
        if not found:
            continue
        text = "; ".join(d.text() for d in found)
        remedy = (f"a figure that left its own baseline: `preflight trend --check {r.check}` shows the series; "
                  f"if it stays there, find the node (docs/ISOLATION.md: mode: all) and look at its links")
        action = graded(info.actions, PROBLEM) if PROBLEM in info.actions else "monitor"
        changed = True
        details = {**r.details, "baseline": [d.to_dict() for d in found]}
        if r.status is Status.PASS:
            rows[i] = replace(r, status=Status.WARN, summary=f"{r.summary}; {text}", details=details,
                              remediation=remedy, action=action)
        else:
            rows[i] = replace(r, summary=f"{r.summary}; {text}", details=details)
        for d in found:
            for node in sorted({v for v in d.labels.values() if v in names}):
                if (r.check, node) not in present:
                    present.add((r.check, node))
                    added.append(Result(r.check, node, Status.WARN, d.text(), {"baseline": d.to_dict()},
                                        remedy, action=action))
    return replace(report, results=tuple(rows + added)) if changed else report
