"""Nothing is left running after a test session, even one whose tests fail: run a small session
that uses the fixtures and fails on purpose, then look for its processes and namespaces."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil

from preflight.sim import netns as simnet
from preflight.sim import procs
from preflight.sim.cluster import Cluster
from tests.simfixtures import requires_netns

ROOT = Path(__file__).resolve().parents[2]

INNER = '''
import json, os
SIM_MODE = os.environ["INNER_MODE"]
SIM_SPEC = {"nodes": 2}

def test_fails_with_a_cluster_up(sim_cluster):
    sim_cluster.inject("node01", "port_held", port=29500)
    with open(os.environ["INNER_OUT"], "w") as fh:
        json.dump({"pids": sim_cluster.pids(), "dir": str(sim_cluster.dir), "tag": sim_cluster.rec["tag"],
                   "namespaces": sim_cluster.rec["namespaces"]}, fh)
    assert False, "on purpose"
'''


def test_session_teardown_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(INNER)
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.simfixtures"]\n')
    out = tmp_path / "out.json"
    mode = "netns" if simnet.available()[0] else "loopback"
    env = dict(os.environ, PYTHONPATH=str(ROOT), INNER_OUT=str(out), INNER_MODE=mode)
    cp = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert cp.returncode == 1 and "on purpose" in cp.stdout, cp.stdout[-2000:] + cp.stderr[-1000:]
    made = json.loads(out.read_text())
    assert len(made["pids"]) == 3
    alive = [p for p in made["pids"] if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    if mode == "netns":
        assert not set(made["namespaces"]) & set(simnet.list_namespaces())
        assert not [ln for ln in simnet.list_links() if ln.startswith(f"pfs{made['tag']}")]
    assert not Path(made["dir"]).exists()


@requires_netns
def test_down_stale_removes_a_killed_clusters_namespaces_and_keeps_a_live_one(tmp_path: Path) -> None:
    """A run killed with SIGKILL cannot tear its clusters down: `sim down --stale` (what .ci/run
    calls first) removes the namespaces nothing runs in and their bridges, and a live cluster keeps
    answering."""
    dead = Cluster.up({"nodes": 2}, dir=tmp_path / "dead", mode="netns")
    live = Cluster.up({"nodes": 2}, dir=tmp_path / "live", mode="netns")
    try:
        for ns in dead.rec["namespaces"]:  # what SIGKILL of the whole run leaves: namespaces, no process
            procs.kill_pids(simnet.ns_pids(ns))
        cp = subprocess.run([sys.executable, "-m", "preflight.sim.cli", "down", "--stale"],
                            capture_output=True, text=True, timeout=120)
        assert cp.returncode == 0 and "removed" in cp.stderr, cp.stderr
        left = [ns for ns in simnet.list_namespaces() if ns.startswith("pfs-")]
        assert not set(dead.rec["namespaces"]) & set(left)
        assert set(live.rec["namespaces"]) <= set(left)
        links = set(simnet.list_links())
        assert not set(dead.rec["links"]) & links and set(live.rec["links"]) <= links
        st = subprocess.run([sys.executable, "-m", "preflight.sim.cli", "status", "--dir", str(live.dir)],
                            capture_output=True, text=True, timeout=120)
        assert st.stdout.count("answering") == 2, st.stdout
    finally:
        live.down(purge=True)
        dead.down(purge=True)
