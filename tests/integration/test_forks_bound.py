"""`--forks` bounds connections, paramiko threads and file descriptors, also when a cluster plan
follows (issue 12, item 8): 160 loopback sshd nodes, `--forks 16` (ten nodes a fork), a node phase (ssh.connect and
env.comm, which net.ping_mesh uses) and a planned round (net.ping_mesh) that must reconnect. The client process is sampled with psutil throughout;
the peaks are printed (even without -s) and bounded.

Bounds: one daemon worker and at most one open connection's paramiko thread per fork (2 x forks),
plus the main thread; a closed connection's thread ends at its next wake-up (up to 2 s), so a
few more exist for a moment while nodes are reconnected, and the process has a handful of its own
(main, the progress and signal helpers): threads stay under 3 x forks + 16, whatever the node count
(at 512 nodes and --forks 32 the peak was 82; here 160 nodes and --forks 16 peak near 54). One socket per connection (forks) plus stdio, the agent, Python's own.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

NODES, FORKS = 160, 16
SIM_MODE = "loopback"


@pytest.fixture(scope="module")
def big_loopback(sim_cluster_factory):
    c = sim_cluster_factory({"nodes": NODES}, mode="loopback")
    try:
        yield c
    finally:
        c.down(purge=True)


def sockets_of(pid: int) -> int:
    """Open sockets of a process, from /proc (cheaper than psutil.net_connections on a busy host)."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


def sample(proc: subprocess.Popen) -> dict[str, int]:
    """Peaks of threads, open fds and sockets of the running client, every 50 ms."""
    p = psutil.Process(proc.pid)
    peak = {"threads": 0, "fds": 0, "sockets": 0, "nofile_soft": 0}
    while proc.poll() is None:
        try:
            with p.oneshot():
                peak["threads"] = max(peak["threads"], p.num_threads())
                peak["fds"] = max(peak["fds"], p.num_fds())
                peak["nofile_soft"] = max(peak["nofile_soft"], p.rlimit(psutil.RLIMIT_NOFILE)[0])
            peak["sockets"] = max(peak["sockets"], sockets_of(proc.pid))
        except (psutil.NoSuchProcess, psutil.ZombieProcess, FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.05)
    return peak


def test_ten_nodes_a_fork_every_node_reported_and_resources_bounded(big_loopback, tmp_path, capsys):
    doc = yaml.safe_load(Path(big_loopback.inventory_path).read_text())
    # One pair per node (a planned round on every node, after a reconnect), the `ping` loop (light
    # on a shared 2-core host), thresholds that ignore that host's load.
    doc["checks"] = {"net.ping_mesh": {"max_pairs": NODES, "count": 1, "pinger": "ping", "warn_rtt_ms": 5000}}
    doc["defaults"].update(probe_timeout=600, connect_timeout=120, banner_timeout=120, auth_timeout=120)
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(doc))
    out = tmp_path / "report.json"
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]

    def low_soft_limit():  # the child starts with a small soft limit: preflight must raise it to the hard one
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    env = {k: v for k, v in os.environ.items() if k != "PREFLIGHT_DEBUG"}
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "preflight.cli", "run", str(inv), "--checks",
                             "net.ping_mesh", "--forks", str(FORKS), "--format", "json",
                             "--output", str(out), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, preexec_fn=low_soft_limit)
    try:
        peak = sample(proc)
        err = proc.stderr.read().decode()
        rc = proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    elapsed = time.monotonic() - t0
    with capsys.disabled():  # the figures, in every run's output
        print(f"\n{NODES} nodes, --forks {FORKS}: {elapsed:.1f} s, peak threads {peak['threads']}, "
              f"peak fds {peak['fds']}, peak sockets {peak['sockets']}, RLIMIT_NOFILE soft {peak['nofile_soft']}")
    report = json.loads(out.read_text())
    not_ok = [(r["node"], r["check"], r["summary"]) for r in report["results"] if r["status"] != "pass"]
    # What --forks must guarantee: every node reported and reached, nothing said on stderr, and no
    # descriptor shortage passed off as a node's fault. The mesh itself may, on a loaded 2-core host,
    # miss one node's ping output (it then says "unreadable from 1 node(s)", exit 3): that is a
    # timing of the test bed, not of --forks, so it is allowed, but never a pair found unreachable.
    assert rc in (0, 3) and err == "", (rc, err[-2000:], not_ok[:10])
    assert not any(w in r["summary"] for r in report["results"] for w in ("Too many open files", "EMFILE",
                                                                          "file descriptors", "unreachable:"))
    assert [n["state"] for n in report["nodes"]] == ["ok"] * NODES
    by_check = {}
    for r in report["results"]:
        by_check.setdefault(r["check"], []).append(r["status"])
    assert by_check["ssh.connect"] == ["pass"] * NODES
    mesh = [r for r in report["results"] if r["check"] == "net.ping_mesh" and r["node"] is None]
    assert len(mesh) == 1 and (mesh[0]["status"] == "pass" and f"between {NODES} nodes" in mesh[0]["summary"]
                               or mesh[0]["summary"].startswith(f"0 of {NODES - 1} pairs unreachable")), (
        mesh[0]["summary"], mesh[0]["details"].get("unreadable"))
    assert peak["nofile_soft"] == hard
    assert peak["sockets"] <= FORKS + 4  # one per connection, the agent's, a reconnect's old one closing
    assert peak["threads"] <= 3 * FORKS + 16  # 160 nodes on 16 forks: a thread per node would be 160+
    assert peak["fds"] <= FORKS + 48
