"""README's Slurm recipes, run by real Slurm on the test bed: the over-allocate-and-select batch
script is submitted with `sbatch` and its `srun --nodelist` must land on the chosen nodes."""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.simfixtures import requires_slurm

pytestmark = requires_slurm
SLURM_SPEC = {"nodes": 6}
README = Path(__file__).resolve().parents[2] / "README.md"


def recipe(name: str) -> str:
    text = README.read_text(encoding="utf-8")
    m = re.search(rf"<!-- recipe: {name}\b.*?-->\n```sh\n(.*?)```", text, re.S)
    assert m, f"README has no recipe {name!r}"
    return m.group(1)


def wait_job(c, job_id: str, timeout: float) -> int:
    """The batch script's exit code, from `scontrol show job` (ExitCode=<rc>:<signal>), polled at
    0.3 s (sbatch --wait backs off to tens of seconds between polls)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cp = subprocess.run(["scontrol", "-o", "show", "job", job_id], env=c.slurm_env(), capture_output=True,
                            text=True, timeout=30)
        state = re.search(r"\bJobState=(\S+)", cp.stdout)
        if state and state.group(1) in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            return int(re.search(r"\bExitCode=(\d+):", cp.stdout).group(1))
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} not finished after {timeout:.0f}s")


@pytest.fixture
def job(slurm_cluster, tmp_path):
    """Submit README's need recipe (paths substituted, torchrun replaced by a script that says
    where it ran) and wait for it; returns (exit code, hosts torchrun ran on, the good list)."""
    c = slurm_cluster
    exe = tmp_path / "preflight"
    exe.write_text(f"#!{sys.executable}\nfrom preflight.cli import entry\nentry()\n")
    exe.chmod(0o755)
    ran = tmp_path / "ran"
    ran.mkdir()
    torchrun = tmp_path / "torchrun"
    torchrun.write_text(f'#!/bin/sh\nhostname > {ran}/"$SLURMD_NODENAME"\n')
    torchrun.chmod(0o755)
    # Substituted: paths, torchrun, and a deadline that survives a test machine shared by many
    # sessions (a login can take seconds there; the recipe's default is 30 s)
    script = (recipe("need").replace("/etc/preflight/inventory.yaml", str(c.inventory_path))
              .replace("\npreflight gate", f"\n{exe} gate").replace(" torchrun ", f" {torchrun} ")
              .replace(" --quiet", " --quiet --deadline 150"))
    (tmp_path / "job.sh").write_text(script)

    def submit():
        cp = subprocess.run(["sbatch", "--parsable", f"--chdir={tmp_path}", f"--output={tmp_path}/job.out",
                             str(tmp_path / "job.sh")], env=c.slurm_env(), capture_output=True, text=True, timeout=60)
        assert cp.returncode == 0, cp.stderr
        job_id = cp.stdout.strip().split(";")[0]
        rc = wait_job(c, job_id, 240)
        good = tmp_path / f"good.{job_id}"
        return (rc, sorted(p.name for p in ran.iterdir()),
                good.read_text() if good.exists() else None, (tmp_path / "job.out").read_text())
    yield submit
    c.reset()


def test_allocate_six_need_four_runs_on_four_good_nodes(slurm_cluster, job):
    slurm_cluster.inject("node03", "npu_health", device=3, status="Alarm", codes=["A4025021"])
    rc, ran_on, good, out = job()
    assert rc == 0, out
    assert good == "node[01-02,04-05]\n"
    assert ran_on == ["node01", "node02", "node04", "node05"]


def test_not_enough_usable_nodes_keeps_the_job_from_starting(slurm_cluster, job):
    for node in ("node02", "node03", "node05"):
        slurm_cluster.inject(node, "npu_health", device=1, status="Alarm", codes=["A4025021"])
    rc, ran_on, good, out = job()
    assert rc == 1, out
    assert ran_on == []
    assert good == "node[01,04,06]\n"
