"""The README recipes, each run as written (paths substituted): the batch-script gate, the Slurm
prolog line, the nightly crontab line with flock. The text here is what the README shows."""
from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

BATCH_SCRIPT = """#!/bin/bash
#SBATCH --nodes=4 --ntasks-per-node=1
# Gate first: exit 0 only when every allocated node is usable; otherwise the job never starts
# and the bad nodes are in exclude.$SLURM_JOB_ID (resubmit with: sbatch --exclude="$(cat exclude.<id>)").
preflight gate /etc/preflight/inventory.yaml --limit "$SLURM_JOB_NODELIST" \\
    --exclude-out "exclude.$SLURM_JOB_ID" --quiet \\
  && srun torchrun --nnodes "$SLURM_NNODES" --nproc-per-node 8 train.py
"""

PROLOG_LINE = "/usr/local/bin/preflight gate --local --quiet --deadline 20 /etc/preflight/inventory.yaml"

CRON_LINE = ("30 2 * * * flock -n -E 75 /var/lock/preflight-sweep.lock /usr/local/bin/preflight run "
             "/etc/preflight/inventory.yaml --sweep --quiet --format json --output /var/lib/preflight/last.json "
             "--prom-output /var/lib/node_exporter/textfile/preflight.prom --history /var/lib/preflight/history.sqlite")


@pytest.fixture
def site(tmp_path):
    """A fake filesystem root: the preflight executable at an absolute path, an inventory whose
    nodes refuse connections (127.0.0.1 port 1), the directories the recipes write to."""
    root = tmp_path / "root"
    for d in ("usr/local/bin", "etc/preflight", "var/lock", "var/lib/preflight", "var/lib/node_exporter/textfile",
              "bin"):
        (root / d).mkdir(parents=True)
    exe = root / "usr/local/bin/preflight"
    exe.write_text(f"#!{sys.executable}\nfrom preflight.cli import entry\nentry()\n")
    exe.chmod(0o755)
    (root / "etc/preflight/inventory.yaml").write_text(
        "defaults: {port: 1, connect_timeout: 2}\nnodes:\n  - {name: 'node[01-04]', host: '127.0.0.[1-4]'}\n")
    torchrun = root / "bin/torchrun"
    torchrun.write_text(f"#!/bin/sh\necho started > {root}/torchrun.started\n")
    torchrun.chmod(0o755)
    srun = root / "bin/srun"
    srun.write_text('#!/bin/sh\nexec "$@"\n')
    srun.chmod(0o755)
    return root


def _paths(text: str, root) -> str:
    for p in ("/usr/local/bin/", "/etc/preflight/", "/var/lock/", "/var/lib/"):
        text = text.replace(p, f"{root}{p}")
    return text


def test_batch_script_gate_keeps_the_job_from_starting(site, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text(_paths(BATCH_SCRIPT, site))
    env = {"PATH": f"{site}/usr/local/bin:{site}/bin:/usr/bin:/bin", "SLURM_JOB_NODELIST": "node[01-02,04]",
           "SLURM_JOB_ID": "4242", "SLURM_NNODES": "3", "HOME": str(tmp_path)}
    p = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, p.stderr  # incomplete: unreachable nodes are never a go
    assert not (site / "torchrun.started").exists()
    assert (tmp_path / "exclude.4242").read_text() == "node[01-02,04]\n"


def test_batch_script_gate_lets_a_good_allocation_start(site, tmp_path):
    """The same && chain when the gate passes (this host, without SSH, so it can pass here)."""
    script = tmp_path / "job.sh"
    script.write_text(_paths(BATCH_SCRIPT.replace("/etc/preflight/inventory.yaml --limit",
                                                  "--local --checks ssh.connect --limit"), site))
    env = {"PATH": f"{site}/usr/local/bin:{site}/bin:/usr/bin:/bin", "SLURM_JOB_NODELIST": "x",
           "SLURM_JOB_ID": "1", "SLURM_NNODES": "1", "HOME": str(tmp_path)}
    p = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert (site / "torchrun.started").exists() and (tmp_path / "exclude.1").read_text() == ""


def test_prolog_line_runs_with_no_path_on_the_local_host(site, tmp_path):
    """slurmd runs the Prolog as root with an empty environment and no PATH: absolute paths only."""
    line = _paths(PROLOG_LINE, site)
    env = {"SLURMD_NODENAME": "node03"}
    t0 = time.monotonic()
    ok = subprocess.run(line.split() + ["--checks", "ssh.connect"], env=env, capture_output=True, text=True,
                        timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == ""
    full = subprocess.run(line.split(), env=env, capture_output=True, text=True, timeout=60)
    assert time.monotonic() - t0 < 20
    # this test host has no Ascend driver: the default subset must say "not ready" (the prolog
    # then drains the node), never "ready"
    expected = 0 if os.path.exists("/usr/local/Ascend/driver") else 1
    assert full.returncode == expected, full.stderr


def test_crontab_line_sweeps_once_and_flock_refuses_overlap(site):
    command = _paths(CRON_LINE.split(None, 5)[5], site)
    assert "%" not in command  # cron would turn % into a newline
    env = {"PATH": "/usr/bin:/bin", "HOME": str(site), "SHELL": "/bin/sh"}  # cron's environment
    p = subprocess.run(["/bin/sh", "-c", command], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 3, p.stderr  # every node refused: incomplete
    report = json.loads((site / "var/lib/preflight/last.json").read_text())
    assert report["verdict"] == "incomplete" and len(report["nodes"]) == 4
    assert stat.S_IMODE(os.stat(site / "var/lib/preflight/last.json").st_mode) == 0o600
    prom = (site / "var/lib/node_exporter/textfile/preflight.prom").read_text()
    fams = {f.name: f for f in text_string_to_metric_families(prom)}
    assert [s.value for s in fams["preflight_node_reachable"].samples] == [0, 0, 0, 0]
    db = sqlite3.connect(site / "var/lib/preflight/history.sqlite")
    assert db.execute("SELECT exit_code, sweep FROM runs").fetchall() == [(3, 1)]
    # a run still going when the next one starts: flock -n refuses with 75, nothing else happens
    hold = subprocess.Popen(["flock", str(site / "var/lock/preflight-sweep.lock"), "sleep", "30"])
    try:
        time.sleep(0.3)
        again = subprocess.run(["/bin/sh", "-c", command], env=env, capture_output=True, text=True, timeout=30)
        assert again.returncode == 75
    finally:
        hold.kill()
        hold.wait()
    assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
