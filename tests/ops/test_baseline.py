"""A figure against its own past (preflight/ops/baseline.py): the rule, and what it does to a report
read beside a real history database (hist.store writes the past runs as `run --history` does)."""
from __future__ import annotations

import pytest

from preflight.model import Result, Status
from preflight.ops import baseline
from preflight.ops import history as hist
from preflight.registry import discover
from tests.ops import make_report, optical_metrics

PAIR = {"rank0": "node01", "rank1": "node02", "backend": "gloo"}
OTHER = {"rank0": "node03", "rank1": "node01", "backend": "gloo"}
PAST = [10.0, 10.4, 9.7, 10.2, 9.9, 10.1]  # GB/s: sd 0.24


def smoke_row(values: dict[tuple, float], status: Status = Status.PASS) -> Result:
    """smoke.allreduce's cluster row in pair mode: a busbw per pair, labelled by its two ends."""
    metrics = [{"name": "busbw", "value": v, "unit": "GB/s", "labels": dict(lab)} for lab, v in values.items()]
    return Result("smoke.allreduce", None, status, "2 pair(s) passed all_reduce with the right sum",
                  {"metrics": metrics})


def key(labels: dict) -> tuple:
    return tuple(sorted(labels.items()))


@pytest.fixture
def db(tmp_path):
    conn = hist.open_db(tmp_path / "h.sqlite")
    for i, v in enumerate(PAST):
        rep = make_report(extra=[smoke_row({key(PAIR): v, key(OTHER): 20.0 + (i % 2) * 0.5})],
                          metrics={"node01": optical_metrics({(0, 0): 0.80 + 0.01 * (i % 3)})})
        hist.store(conn, rep)
    yield conn
    conn.close()


def marked(db, row: Result, optical: float = 0.81):
    report = make_report(extra=[row], metrics={"node01": optical_metrics({(0, 0): optical})})
    return baseline.mark(report, db, discover().get)


def test_the_rule_three_sigma_and_a_floor_and_enough_runs():
    past = [10.0, 10.4, 9.7, 10.2, 9.9]
    assert baseline.judge(8.9, past, rising_is_bad=False) is not None  # 1.14 under: > 3 sd and > 10%
    assert baseline.judge(9.5, past, rising_is_bad=False) is None  # within the noise
    noisy = [10.0, 14.0, 6.0, 12.0, 8.0]  # sd 3.2: 20% under is still inside 3 sd
    assert baseline.judge(8.0, noisy, rising_is_bad=False) is None
    assert baseline.judge(12.0, past, rising_is_bad=False) is None  # better is never a warning
    assert baseline.judge(12.0, past, rising_is_bad=True) is not None  # unless rising is bad (RTT)
    assert baseline.judge(8.0, past[:4], rising_is_bad=False) is None  # 4 runs: no baseline yet
    steady = [10.0] * 6  # sd 0: only the floor holds a wobble back
    assert baseline.judge(9.5, steady, rising_is_bad=False) is None
    assert baseline.judge(8.9, steady, rising_is_bad=False) == (10.0, 0.0)


def test_a_pair_under_its_own_baseline_warns_on_the_row_and_on_both_ends(db):
    report = marked(db, smoke_row({key(PAIR): 6.2, key(OTHER): 20.2}))
    head = next(r for r in report.results if r.check == "smoke.allreduce" and r.node is None)
    assert head.status is Status.WARN and head.action == "monitor", head
    assert "busbw 6.2 GB/s (backend=gloo, rank0=node01, rank1=node02)" in head.summary, head.summary
    assert "is 15.9 sigma under its baseline 10 +- 0.24 GB/s over the last 6 stored runs" in head.summary, head.summary
    assert [d["labels"] for d in head.details["baseline"]] == [PAIR]
    ends = {r.node: r for r in report.results if r.check == "smoke.allreduce" and r.node}
    assert sorted(ends) == ["node01", "node02"]  # not node03: its pair kept its own figure
    assert all(r.status is Status.WARN and "sigma under its baseline" in r.summary for r in ends.values())
    assert report.exit_code == 0 and report.verdict == "ready"  # a warn; --strict makes it 1
    from dataclasses import replace
    assert replace(report, strict=True).exit_code == 1


def test_noise_another_series_and_checks_without_the_policy_leave_the_report_alone(db):
    row = smoke_row({key(PAIR): 9.6, key(OTHER): 20.1})
    report = marked(db, row)
    assert [r for r in report.results if r.check == "smoke.allreduce"] == [row]
    # a pair never stored before (node02 with node03) has no baseline to leave
    fresh = smoke_row({(("backend", "gloo"), ("rank0", "node02"), ("rank1", "node03")): 1.0})
    assert [r for r in marked(db, fresh).results if r.check == "smoke.allreduce"] == [fresh]
    # hccn.optical names a trend_metric but asks for no baseline: its fall is `preflight trend`'s
    assert discover()["hccn.optical"].baseline is False
    optical = [r for r in marked(db, row, optical=0.2).results if r.check == "hccn.optical"]
    assert all(r.status is Status.PASS for r in optical)


def test_a_failing_row_keeps_its_status_and_gains_the_figure(db):
    row = smoke_row({key(PAIR): 6.2}, status=Status.FAIL)
    head = next(r for r in marked(db, row).results if r.check == "smoke.allreduce" and r.node is None)
    assert head.status is Status.FAIL and "sigma under its baseline" in head.summary


def test_a_baseline_needs_a_trend_metric():
    from preflight.policy import ContractError, Policy
    with pytest.raises(ContractError, match=r"baseline=True\) judges the trend_metric"):
        Policy(baseline=True)
    assert discover()["smoke.allreduce"].baseline is True
