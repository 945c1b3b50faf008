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
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["preflight.sim.fixtures"]\n')
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
