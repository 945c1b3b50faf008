"""History: three runs with a fault that appears and is cured; migration; trends; a full disk."""
from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from preflight.ops import history as hist
from preflight.cli import main
from tests.ops import make_report, optical_metrics


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "state" / "history.sqlite"


def _three_runs(db_path):
    db = hist.open_db(db_path)
    ids = [hist.store(db, make_report(finished="2026-12-01T03:00:07Z")),
           hist.store(db, make_report(fail={"node02": "hccn.link"}, unreachable={"node03"},
                                      finished="2026-12-02T03:00:07Z")),
           hist.store(db, make_report(finished="2026-12-03T03:00:07Z"))]
    db.close()
    return ids


def test_fault_appears_then_cured_diff_shows_new_and_recovered(db_path):
    ids = _three_runs(db_path)
    db = hist.open_db(db_path, create=False)
    appear = hist.diff(db, ids[0], ids[1])
    assert {(c.node, c.check) for c in appear.new} == {("node02", "hccn.link"), ("node03", "ssh.connect")}
    assert appear.recovered == [] and appear.still == []
    cured = hist.diff(db, hist.resolve(db, None, 2), hist.resolve(db, None, 1))  # default: the last two
    assert (cured.run_a, cured.run_b) == (ids[1], ids[2])
    assert {(c.node, c.check, c.before, c.after) for c in cured.recovered} == {
        ("node02", "hccn.link", "fail", "pass"), ("node03", "ssh.connect", "error", "pass")}
    assert cured.new == []


def test_cli_history_and_diff(db_path):
    _three_runs(db_path)
    r = CliRunner().invoke(main, ["history", "--db", str(db_path)])
    assert r.exit_code == 0, r.output
    assert len(r.output.strip().splitlines()) == 4 and "not_ready" in r.output
    r = CliRunner().invoke(main, ["diff", "--db", str(db_path)])
    assert r.exit_code == 0, r.output
    assert "recovered: 2" in r.output and "newly failing: 0" in r.output
    assert "node02" in r.output and "fail -> pass" in r.output
    r = CliRunner().invoke(main, ["diff", "1", "2", "--db", str(db_path), "--json"])
    assert {c["node"] for c in json.loads(r.output)["new"]} == {"node02", "node03"}


def test_still_failing_and_bad_run_refs(db_path):
    db = hist.open_db(db_path)
    a = hist.store(db, make_report(fail={"node01": "hccn.link"}))
    b = hist.store(db, make_report(fail={"node01": "hccn.link"}))
    assert [(c.node, c.check) for c in hist.diff(db, a, b).still] == [("node01", "hccn.link")]
    with pytest.raises(hist.HistoryError, match="holds 2 run"):
        hist.resolve(db, "-3", 1)
    r = CliRunner().invoke(main, ["diff", "7", "--db", str(db_path)])
    assert r.exit_code == 2 and "no run with id 7" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["history", "--db", str(db_path.parent / "none.sqlite")])
    assert r.exit_code == 2 and "no history database" in r.output


def test_stores_nodes_results_and_every_metric(db_path):
    db = hist.open_db(db_path)
    rx = {(d, lane): 0.5 + d / 100 for d in range(8) for lane in range(4)}
    rid = hist.store(db, make_report(metrics={"node01": optical_metrics(rx)}, unreachable={"node03"}))
    assert db.execute("SELECT COUNT(*) FROM metrics WHERE run_id=?", (rid,)).fetchone()[0] == 32
    assert db.execute("SELECT state FROM nodes WHERE name='node03'").fetchone()[0] == "unreachable"
    row = db.execute("SELECT value, unit, labels FROM metrics WHERE node='node01' AND labels=?",
                     (json.dumps({"device": "7", "lane": "3"}, sort_keys=True),)).fetchone()
    assert row == (pytest.approx(0.57), "mW", '{"device": "7", "lane": "3"}')


def test_created_0600_in_0700_dir_and_schema_versioned(db_path):
    hist.open_db(db_path).close()
    assert stat.S_IMODE(os.stat(db_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(db_path.parent).st_mode) == 0o700
    assert sqlite3.connect(db_path).execute("PRAGMA user_version").fetchone()[0] == hist.SCHEMA_VERSION


def test_migrates_a_version_1_database_keeping_its_runs(db_path):
    db_path.parent.mkdir(parents=True)
    old = sqlite3.connect(db_path, isolation_level=None)
    hist.MIGRATIONS[0](old)
    old.execute("PRAGMA user_version = 1")
    old.execute("INSERT INTO runs (started_at, finished_at, exit_code, verdict) VALUES ('a','b',0,'ready')")
    old.close()
    db = hist.open_db(db_path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == hist.SCHEMA_VERSION
    assert [r.id for r in hist.runs(db)] == [1] and hist.runs(db)[0].sweep is False
    assert hist.store(db, make_report(), sweep=True) == 2


def test_refuses_a_newer_schema(db_path):
    hist.open_db(db_path).close()
    sqlite3.connect(db_path).execute(f"PRAGMA user_version = {hist.SCHEMA_VERSION + 1}")
    with pytest.raises(hist.HistoryError, match="newer than this preflight"):
        hist.open_db(db_path)


def test_not_a_database_is_one_clear_line(db_path):
    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(hist.HistoryError, match="cannot read history database"):
        hist.open_db(db_path)


# ---------------------------------------------------------------- trends

def _lane_runs(db, values, node="node02", device=3, lane=1):
    """One run per value: device/lane falls, every other lane stays put with a little noise."""
    for i, v in enumerate(values):
        rx = {(d, l): 0.80 + 0.01 * ((i + d + l) % 3) for d in range(8) for l in range(4)}
        rx[(device, lane)] = v
        hist.store(db, make_report(metrics={node: optical_metrics(rx), "node01": optical_metrics(
            {k: 0.8 for k in rx})}))


def test_degrading_lane_over_five_runs_warns_before_the_threshold(db_path):
    db = hist.open_db(db_path)
    # the module's RxPower Low Thres is 0.1445 mW (fixtures): every value is still inside it
    _lane_runs(db, [0.80, 0.71, 0.62, 0.52, 0.43])
    found, examined = hist.trends(db, "hccn.optical", "optical_rx_power", window=5)
    assert examined == 64
    assert [(t.node, t.labels) for t in found] == [("node02", {"device": "3", "lane": "1"})]
    t = found[0]
    assert t.values[-1] > 0.1445 and t.slope < -0.08 and 45 < t.drop_pct < 48
    # thresholds are parameters: ask for a 50% drop and nothing warns yet
    assert hist.trends(db, "hccn.optical", "optical_rx_power", min_drop_pct=50)[0] == []
    # a window of 2 runs sees only the last step (17%): under the default 20% total drop
    assert hist.trends(db, "hccn.optical", "optical_rx_power", window=2, min_points=2)[0] == []


def test_one_bad_reading_is_not_a_trend(db_path):
    db = hist.open_db(db_path)
    _lane_runs(db, [0.80, 0.81, 0.40, 0.80, 0.79])
    assert hist.trends(db, "hccn.optical", "optical_rx_power")[0] == []


def test_cli_trend_exit_codes(db_path):
    db = hist.open_db(db_path)
    _lane_runs(db, [0.80, 0.80, 0.79, 0.80, 0.80])
    r = CliRunner().invoke(main, ["trend", "--check", "hccn.optical", "--db", str(db_path)])
    assert r.exit_code == 0 and "0 of 64 series drifting" in r.output
    _lane_runs(db, [0.70, 0.60, 0.50, 0.40])
    r = CliRunner().invoke(main, ["trend", "--check", "hccn.optical", "--db", str(db_path)])
    assert r.exit_code == 1, r.output
    assert "WARN node02 hccn.optical optical_rx_power{device=3,lane=1}: 0.8 -> 0.4 mW over 5 runs" in r.output
    r = CliRunner().invoke(main, ["trend", "--check", "npu.idle", "--db", str(db_path)])
    assert r.exit_code == 2 and "--metric" in r.output


# ---------------------------------------------------------------- failures to write

def test_disk_full_fails_clearly_and_keeps_earlier_runs(db_path):
    """RLIMIT_FSIZE at the current size: every write that grows the file fails, as on a full disk."""
    db = hist.open_db(db_path)
    hist.store(db, make_report())
    db.close()
    size = os.path.getsize(db_path)
    script = textwrap.dedent(f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, ({size}, {size}))
        from preflight.ops import history as hist
        from tests.ops import make_report, optical_metrics
        db = hist.open_db({str(db_path)!r})
        big = {{(d, l): 0.5 for d in range(64) for l in range(64)}}
        try:
            hist.store(db, make_report(metrics={{n: optical_metrics(big) for n in ("node01", "node02")}}))
        except hist.HistoryError as exc:
            print(exc); sys.exit(9)
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert p.returncode == 9, p.stderr
    assert "cannot write to the history database" in p.stdout and "earlier runs are intact" in p.stdout
    db = hist.open_db(db_path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert len(hist.runs(db)) == 1 and db.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 0


def test_full_database_rolls_back_the_whole_run(db_path):
    db = hist.open_db(db_path)
    hist.store(db, make_report())
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages + 1}")
    big = {(d, l): 0.5 for d in range(64) for l in range(64)}
    with pytest.raises(hist.HistoryError, match="full"):
        hist.store(db, make_report(metrics={"node01": optical_metrics(big)}))
    assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    assert db.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 9


def test_unwritable_history_path_is_one_line(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    with pytest.raises(hist.HistoryError, match=r"cannot open history database .*afile/h.sqlite: (File exists|Not a directory)"):
        hist.open_db(blocker / "h.sqlite")


def test_default_path_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert hist.default_path() == tmp_path / "preflight" / "history.sqlite"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hist.default_path() == tmp_path / ".local" / "state" / "preflight" / "history.sqlite"


def test_run_with_unwritable_history_fails_before_connecting(tmp_path, monkeypatch):
    from preflight.transport import factory
    from tests.ops import ScriptedTransport
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - {name: n1, host: 10.0.0.1}\n")
    transport = ScriptedTransport({})
    monkeypatch.setattr(factory, "make_transport", lambda replay=None, local=False: transport)
    (tmp_path / "afile").write_text("x")
    bad = str(tmp_path / "afile" / "h.sqlite")
    r = CliRunner().invoke(main, ["run", str(inv), "--history", bad, "-q"])
    # a usage error (SPEC §7: 2, as --record DIR), naming the path, before any connection
    assert r.exit_code == 2 and transport.connects == [], r.output
    assert r.output.startswith(f"preflight: --history {bad}: cannot create") and len(r.output.strip().splitlines()) == 1
    assert f"no directory {tmp_path / 'afile'}" in r.output
    r = CliRunner().invoke(main, ["run", str(inv), "--history", str(tmp_path), "-q"])
    assert r.exit_code == 2 and "it is a directory" in r.output and transport.connects == []


def test_run_history_entry_then_diff_via_cli(tmp_path, monkeypatch):
    """Two `run --history` invocations; the second adds a failing npu.idle; diff names it."""
    from preflight.transport import factory
    from preflight.model import CommandOutput
    from tests.ops import ScriptedTransport
    from tests.support import fixture_body
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - {name: n1, host: 10.0.0.1}\n")
    db = tmp_path / "h.sqlite"
    for text in ("npu-smi_info__910B1_8card_idle_npu-smi24.1.0__vllm-ascend-4037.txt",
                 "npu-smi_info__910B3_8card_1proc__vllm-ascend-6512.txt"):
        body = fixture_body(text)
        transport = ScriptedTransport({"n1": lambda cmd, b=body: CommandOutput(b if "npu-smi" in cmd else "", "", 0)})
        monkeypatch.setattr(factory, "make_transport", lambda replay=None, local=False, t=transport: t)
        CliRunner().invoke(main, ["run", str(inv), "--checks", "npu.idle", "--history", str(db), "-q"])
    r = CliRunner().invoke(main, ["diff", "--db", str(db)])
    assert "newly failing: 1" in r.output and "n1" in r.output and "npu.idle" in r.output
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o600


def test_migrates_a_version_2_database_to_acks_and_run_ids(db_path):
    db_path.parent.mkdir(parents=True)
    old = sqlite3.connect(db_path, isolation_level=None)
    hist.MIGRATIONS[0](old)
    hist.MIGRATIONS[1](old)
    old.execute("PRAGMA user_version = 2")
    old.execute("INSERT INTO runs (started_at, finished_at, exit_code, verdict, sweep) VALUES ('a','b',1,'not_ready',1)")
    old.close()
    db = hist.open_db(db_path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == hist.SCHEMA_VERSION == 3
    assert [(r.id, r.verdict, r.sweep) for r in hist.runs(db)] == [(1, "not_ready", True)]
    rid = hist.store(db, make_report(fail={"node02": "hccn.link"}))
    assert db.execute("SELECT COUNT(*) FROM acks").fetchone()[0] == 0
    assert db.execute("SELECT run_uuid FROM runs WHERE id=?", (rid,)).fetchone()[0] is None  # hand-made: no id
