"""History across three runs on the simulated cluster: a link goes down, then is repaired."""
from __future__ import annotations

from click.testing import CliRunner

from preflight.ops import history as hist
from preflight.cli import main

SIM_SPEC = {"nodes": 2}
SIM_MODE = "loopback"  # no test subnet needed: runs beside other simulated clusters


def test_fault_appears_then_cured_on_the_sim(sim_cluster, tmp_path):
    db = tmp_path / "h.sqlite"
    inv = str(sim_cluster.inventory_path)

    def run() -> int:
        r = CliRunner().invoke(main, ["run", inv, "--checks", "hccn.link", "--history", str(db), "-q",
                                      "--format", "json"])
        return r.exit_code

    assert run() == 0
    sim_cluster.inject("node02", "link_down", device=3)
    assert run() == 1
    sim_cluster.reset("node02")
    assert run() == 0
    conn = hist.open_db(db, create=False)
    appeared = hist.diff(conn, hist.resolve(conn, "-3", 1), hist.resolve(conn, "-2", 1))
    assert [(c.node, c.check) for c in appeared.new] == [("node02", "hccn.link")]
    cured = hist.diff(conn, hist.resolve(conn, None, 2), hist.resolve(conn, None, 1))
    assert [(c.node, c.check) for c in cured.recovered] == [("node02", "hccn.link")] and cured.new == []
