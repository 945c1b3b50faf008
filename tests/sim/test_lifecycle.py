"""Bring-up and tear-down: `down` leaves nothing, is safe twice, and `up` cleans a crashed run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from preflight.sim import Cluster
from preflight.sim import netns as simnet
from tests.simfixtures import requires_netns
from preflight.sim.record import tag_for

ROOT = Path(__file__).resolve().parents[2]


def leftovers(directory: Path, pids: list[int]) -> list[str]:
    """Everything of this cluster still around: processes, namespaces, links, mounts, files."""
    found = [f"pid {p}" for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    tag = tag_for(directory)
    if os.geteuid() == 0:
        found += [f"netns {ns}" for ns in simnet.list_namespaces() if ns.startswith(f"pfs-{tag}-")]
        found += [f"link {ln}" for ln in simnet.list_links() if ln.startswith(f"pfs{tag}")]
    for p in psutil.process_iter(["cmdline"]):
        if any(str(directory) in a for a in (p.info["cmdline"] or [])) and p.pid != os.getpid():
            found.append(f"process {p.pid} {' '.join(p.info['cmdline'])[:80]}")
    with open("/proc/self/mountinfo") as fh:
        found += [f"mount {ln.split()[4]}" for ln in fh if str(directory) in ln]
    found += [f"file {p.name}" for p in directory.glob("*") if p.name not in ("keys",)]
    return found


def _spec(mode: str) -> dict:
    return {"nodes": 2}  # netns mode picks free test subnets itself


@pytest.mark.parametrize("mode", [pytest.param("netns", marks=requires_netns), "loopback"])
def test_down_leaves_nothing_and_is_safe_twice(tmp_path: Path, mode: str) -> None:
    c = Cluster.up(_spec(mode), dir=tmp_path / "c", mode=mode)
    c.inject("node02", "port_held", port=29500)
    c.inject("node01", "silent_banner")
    pids = c.pids()
    assert len(pids) == 3  # node02's sshd, its listener, node01's silent listener
    c.inject("node02", "npu_smi_hang")  # a wedged call orphaned in the node must not survive down
    assert c.exec("node02", "npu-smi info >/dev/null 2>&1 </dev/null & echo started").stdout == "started\n"
    c.down()
    assert leftovers(c.dir, pids) == []
    assert Cluster.down_dir(c.dir) is False  # second time: nothing to do, no error
    assert (c.dir / "keys" / "client_ed25519").exists()  # kept for the next up


@requires_netns
def test_up_after_crash_cleans_leftovers(tmp_path: Path) -> None:
    d = tmp_path / "c"
    first = Cluster.up(_spec("netns"), dir=d, mode="netns")
    old = first.pids()
    key = first.client_key.read_bytes()
    # "crash": the handle is dropped without down; also a half-made namespace with our prefix
    ghost = f"pfs-{tag_for(d)}-ghost"
    subprocess.run(["ip", "netns", "add", ghost], check=True)
    second = Cluster.up(_spec("netns"), dir=d, mode="netns")
    try:
        assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in old)
        assert ghost not in simnet.list_namespaces()
        assert second.client_key.read_bytes() == key  # reused, not regenerated
        assert len(second.pids()) == 2
    finally:
        second.down()
    assert leftovers(d, old + second.pids()) == []


def test_cli_up_status_down(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("cluster: cli\nnodes: 2\nfaults:\n  - {node: node02, fault: npu_health, device: 1, status: Warning}\n")
    d = tmp_path / "c"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cli = [sys.executable, "-m", "preflight.sim.cli"]
    up = subprocess.run(cli + ["up", str(spec), "--dir", str(d), "--mode", "loopback"], capture_output=True,
                        text=True, env=env, timeout=60)
    assert up.returncode == 0, up.stderr
    inv = yaml.safe_load(Path(up.stdout.strip()).read_text())
    assert inv["cluster"] == "cli" and [n["name"] for n in inv["nodes"]] == ["node01", "node02"]
    assert inv["defaults"]["host_key_policy"] == "strict" and inv["defaults"]["env"]["MASTER_PORT"] == "29500"
    st = subprocess.run(cli + ["status", "--dir", str(d), "--json"], capture_output=True, text=True, env=env, timeout=30)
    assert st.returncode == 0 and all(n["answering"] for n in json.loads(st.stdout)["nodes"])
    state = json.loads((d / "nodes" / "node02" / "state.json").read_text())
    assert state["npus"][1]["chips"][0]["health"] == "Warning"
    inj = subprocess.run(cli + ["inject", "node01", "npu_health", "device=2", "status=Alarm", "codes=[A4025021]",
                                "--dir", str(d)], capture_output=True, text=True, env=env, timeout=30)
    assert inj.returncode == 0, inj.stderr
    assert json.loads((d / "nodes" / "node01" / "state.json").read_text())["npus"][2]["chips"][0]["codes"] == ["A4025021"]
    bad_inj = subprocess.run(cli + ["inject", "node01", "nope", "--dir", str(d)], capture_output=True, text=True,
                             env=env, timeout=30)
    assert bad_inj.returncode == 1 and "unknown fault 'nope'" in bad_inj.stderr
    pids = [r["pid"] for r in json.loads((d / "record.json").read_text())["procs"]]
    for _ in range(2):
        dn = subprocess.run(cli + ["down", "--dir", str(d)], capture_output=True, text=True, env=env, timeout=30)
        assert dn.returncode == 0, dn.stderr
    assert leftovers(d, pids) == []
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [a, a]\n")
    r = subprocess.run(cli + ["up", str(bad), "--dir", str(d)], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "duplicate node name 'a'" in r.stderr
