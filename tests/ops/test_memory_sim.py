"""History that remembers, on the simulated cluster through the CLI: a flapping port stays visible
after it recovers, an ack keeps a known fault in the report without failing the run or the gate
(unless --strict) and stops applying once expired, `history --worst` ranks the repeat offender,
`--keep` prunes, and `history --html` draws the node x run grid."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from preflight.cli import main
from preflight.ops import acks, history as hist

SIM_SPEC = {"nodes": 3}
SIM_MODE = "loopback"


@pytest.fixture
def env(sim_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the default DB: gate and ack use it
    yield str(sim_cluster.inventory_path), hist.default_path()
    sim_cluster.reset()


def _run(inv, *extra):
    r = CliRunner().invoke(main, ["run", inv, "--checks", "hccn.link,npu.health", "--history", "-q",
                                  "--format", "json", *extra])
    return r.exit_code, (json.loads(r.output) if r.output.startswith("{") else r.output)


def _by(doc):
    return {(r["node"], r["check"]): r for r in doc["results"]}


def test_sticky_flapping_worst_and_grid(sim_cluster, env):
    inv, db = env
    assert _run(inv)[0] == 0
    sim_cluster.inject("node02", "link_down", device=3)
    assert _run(inv)[0] == 1
    sim_cluster.reset("node02")
    code, doc = _run(inv, "--flap-window", "3")
    assert code == 0
    r = _by(doc)[("node02", "hccn.link")]
    assert r["status"] == "pass" and r.get("flapping") is True      # passes now, failed last run
    assert "flapping" not in _by(doc)[("node01", "hccn.link")]
    code, doc = _run(inv, "--flap-window", "1")                     # the failing run is now 2 back
    assert "flapping" not in _by(doc)[("node02", "hccn.link")]
    table = CliRunner().invoke(main, ["run", inv, "--checks", "hccn.link", "-q", "--flap-window", "5"]).output
    assert "flapping" in table and "node02" in table
    sim_cluster.inject("node03", "npu_health", device=1, status="Alarm")
    _run(inv)
    _run(inv)
    out = CliRunner().invoke(main, ["history", "--worst", "--last", "10"]).output.splitlines()
    assert out[1].split()[0] == "node03" and out[2].split()[0] == "node02", out   # 2 runs failed, then 1
    worst = [json.loads(x) for x in CliRunner().invoke(main, ["history", "--worst", "--json"]).output.splitlines()]
    assert worst[0]["node"] == "node03" and worst[0]["checks"] == {"npu.health": 2}
    page = CliRunner().invoke(main, ["history", "--html", "--last", "7"]).output
    assert page.startswith("<!DOCTYPE html>") and "default-src 'none'" in page
    assert page.count('data-run="') >= 7 * 1 and 'class="cell st-fail" data-run' in page
    assert "npu.health fail" in page and "hccn.link fail" in page


def test_ack_hides_a_known_failure_from_the_exit_code_until_it_expires(sim_cluster, env):
    inv, db = env
    sim_cluster.inject("node01", "link_down", device=4)
    until = (datetime.now(timezone.utc) + timedelta(days=3)).strftime("%Y-%m-%d")
    r = CliRunner().invoke(main, ["ack", "node[01-02]", "hccn", "--until", until, "--reason", "TICKET-42 optic on order"])
    assert r.exit_code == 0, r.output
    code, doc = _run(inv)
    r1 = _by(doc)[("node01", "hccn.link")]
    assert code == 0 and r1["status"] == "fail" and r1["ack"]["reason"] == "TICKET-42 optic on order"
    assert doc["verdict"] == "ready"
    assert _run(inv, "--strict")[0] == 1
    gate = CliRunner().invoke(main, ["gate", inv, "--checks", "hccn.link", "-q", "--deadline", "600"])
    assert gate.exit_code == 0
    assert CliRunner().invoke(main, ["gate", inv, "--checks", "hccn.link", "-q", "--deadline", "600", "--strict"]).exit_code == 1
    md = CliRunner().invoke(main, ["run", inv, "--checks", "hccn.link", "--format", "html", "-q"]).output
    assert 'class="finding st-fail acked"' in md and "TICKET-42" in md
    # an ack in force only: expire it by moving its until into the past
    conn = hist.open_db(db, create=False)
    conn.execute("UPDATE acks SET until='2000-01-01T00:00:00Z'")
    assert acks.active(conn) == []
    conn.close()
    code, doc = _run(inv)
    assert code == 1 and "ack" not in _by(doc)[("node01", "hccn.link")]


def test_ack_refuses_bad_input_with_one_line(env):
    for args, why in ((["node01", "hccn", "--until", "2001-01-01", "--reason", "x"], "already past"),
                      (["node01", "nosuch", "--until", "2999-01-01", "--reason", "x"], "no check matches"),
                      (["node[01", "hccn", "--until", "2999-01-01", "--reason", "x"], "NODE"),
                      (["node01", "hccn", "--until", "soon", "--reason", "x"], "expected a date"),
                      (["node01", "hccn", "--until", "2999-01-01", "--reason", " "], "must say why"),
                      (["node01"], "needs NODE CHECK")):
        r = CliRunner().invoke(main, ["ack", *args])
        assert r.exit_code == 2 and why in r.output and "Traceback" not in r.output, (args, r.output)


def test_keep_prunes_old_runs(sim_cluster, env):
    inv, db = env
    _run(inv)
    _run(inv)
    conn = hist.open_db(db, create=False)
    conn.execute("UPDATE runs SET finished_at='2020-01-01T00:00:00Z' WHERE id=(SELECT MIN(id) FROM runs)")
    before = conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    conn.close()
    _run(inv, "--keep", "30")
    conn = hist.open_db(db, create=False)
    assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == before  # one gone, one added
    assert conn.execute("SELECT COUNT(*) FROM runs WHERE finished_at < '2021'").fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM results WHERE run_id NOT IN (SELECT id FROM runs)").fetchone()[0] == 0
    conn.close()
