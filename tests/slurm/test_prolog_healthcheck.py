"""README's Prolog and HealthCheckProgram recipes, run by real slurmd on the test bed's nodes
(each slurmd sees its node's own npu-smi, as a prolog on a real node does)."""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from preflight.sim import slurm as sim_slurm
from tests.simfixtures import requires_slurm

pytestmark = requires_slurm
SLURM_SPEC = {"nodes": 4}
README = Path(__file__).resolve().parents[2] / "README.md"


def recipe(name: str) -> str:
    m = re.search(rf"<!-- recipe: {name}\b.*?-->\n```sh\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert m, f"README has no recipe {name!r}"
    return m.group(1)


@pytest.fixture(scope="module")
def site(slurm_cluster, tmp_path_factory):
    """The preflight executable at an absolute path and a writer of README's scripts with the
    test bed's paths substituted."""
    d = tmp_path_factory.mktemp("site")
    exe = d / "preflight"
    exe.write_text(f"#!{sys.executable}\nfrom preflight.cli import entry\nentry()\n")
    exe.chmod(0o755)

    def script(name: str) -> Path:
        text = (recipe(name).replace("/usr/local/bin/preflight", str(exe))
                .replace("/etc/preflight/inventory.yaml", str(slurm_cluster.inventory_path)))
        # a login on this shared test machine can take seconds: more time, nothing else changed
        text = text.replace("--deadline 20", "--deadline 60")
        path = d / f"{name}.sh"
        path.write_text(text)
        path.chmod(0o755)
        return path
    return script


def sinfo(c):
    cp = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%t|%E"], env=c.slurm_env(), capture_output=True, text=True,
                        timeout=30, check=True)
    return {n: (s.rstrip("*"), r) for n, s, r in (ln.split("|", 2) for ln in cp.stdout.splitlines())}


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"{what} not seen within {timeout:.0f}s")


def job_field(c, job_id, field):
    cp = subprocess.run(["scontrol", "-o", "show", "job", job_id], env=c.slurm_env(), capture_output=True, text=True,
                        timeout=30)
    m = re.search(rf"\b{field}=(\S+)", cp.stdout)
    return m.group(1) if m else None


def test_prolog_keeps_the_job_off_the_faulty_node_and_drains_it(slurm_cluster, site, tmp_path):
    c = slurm_cluster
    sim_slurm.reconfigure(c, {"Prolog": str(site("prolog")), "PrologFlags": "Alloc"})
    c.inject("node03", "npu_health", device=3, status="Alarm", codes=["A4025021"])
    ran = tmp_path / "ran"
    ran.mkdir()
    try:
        cp = subprocess.run(["sbatch", "--parsable", "-N3", f"--chdir={tmp_path}", f"--output={tmp_path}/job.out",
                             "--wrap", f'srun sh -c \'hostname > {ran}/"$SLURMD_NODENAME"\''],
                            env=c.slurm_env(), capture_output=True, text=True, timeout=60)
        assert cp.returncode == 0, cp.stderr
        job = cp.stdout.strip().split(";")[0]
        # Slurm's own behaviour for a failing prolog: the node drains (with the reason preflight
        # gave it from inside the prolog) and the job goes back to the queue, held
        state, reason = wait_for(lambda: sinfo(c)["node03"] if sinfo(c)["node03"][0] == "drain" else None,
                                 150, "node03 drained")
        assert reason.startswith("preflight: npu.health device 3 health Alarm")
        wait_for(lambda: job_field(c, job, "Restarts") not in (None, "0")
                 and job_field(c, job, "JobState") == "PENDING", 60, "the job requeued")
        assert not (ran / "node03").exists()
        # released (and its requeue delay skipped), it runs on the three good nodes
        for args in (["release", job], ["update", f"JobId={job}", "StartTime=now"]):
            subprocess.run(["scontrol", *args], env=c.slurm_env(), capture_output=True, timeout=30)
        wait_for(lambda: job_field(c, job, "JobState") == "COMPLETED", 180, "the requeued job completed")
        assert sorted(p.name for p in ran.iterdir() if p.stat().st_size) == ["node01", "node02", "node04"]
        assert (ran / "node04").read_text().strip() == "node04"
        assert {sinfo(c)[n][0] for n in ("node01", "node02", "node04")} <= {"idle", "mix", "alloc"}
    finally:
        sim_slurm.reconfigure(c, {})
        c.reset()
        sim_slurm.resume_all(c)


def test_healthcheck_drains_and_later_resumes_only_its_own(slurm_cluster, site):
    c = slurm_cluster
    subprocess.run(["scontrol", "update", "NodeName=node04", "State=DRAIN", "Reason=maintenance window"],
                   env=c.slurm_env(), check=True, capture_output=True, timeout=30)
    c.inject("node02", "npu_health", device=1, status="Alarm", codes=["A4025021"])
    sim_slurm.reconfigure(c, {"HealthCheckProgram": str(site("healthcheck")), "HealthCheckInterval": "10"})
    try:
        _, reason = wait_for(lambda: sinfo(c)["node02"] if sinfo(c)["node02"][0] == "drain" else None,
                             120, "node02 drained by the health check")
        assert reason.startswith("preflight: npu.health device 1 health Alarm")
        c.reset("node02")
        wait_for(lambda: sinfo(c)["node02"][0] == "idle", 120, "node02 resumed by the health check")
        assert sinfo(c)["node04"] == ("drain", "maintenance window")
        assert sinfo(c)["node01"][0] == "idle"
    finally:
        sim_slurm.reconfigure(c, {})
        c.reset()
        sim_slurm.resume_all(c)
