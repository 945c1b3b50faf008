"""The job's container on real podman (issue 13, items 3-6): job-side checks look inside it.

A 3-node netns cluster; n1's job runs in a named container (`exec`), n2's and n3's are fresh
`run --rm` of their images. n1 and n3 run one image, n2 another (another torch, another digest).
Every container sees the job's checkpoint at /job/ckpt and ASCEND_RT_VISIBLE_DEVICES=0,1, which
the hosts have not; the image's own interpreter (JOB_PYTHON) exists on no host. Skips, saying
why, where podman cannot run (no root, no podman/runc).
"""
from __future__ import annotations

import importlib.util
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from preflight.inventory import load
from preflight.model import Status
from preflight.runner import Options, Runner
from preflight.sim import podman
from tests.simfixtures import requires_netns
from preflight.transport.hostkeys import KnownHosts
from preflight.transport.ssh import SSHTransport
from tests.job.trees import megatron_tree

_OK, _WHY = podman.available()
pytestmark = [requires_netns, pytest.mark.skipif(not _OK, reason=f"podman cannot run here: {_WHY}")]
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch not installed (pip install torch==2.13.0, CPU build)")

SIM_SPEC = {"cluster": "jobs", "nodes": ["n1", "n2", "n3"]}
SIM_MODE = "netns"
CKPT = "/job/ckpt"  # where the job's containers mount the checkpoint: no host has this path
JOB = {"nnodes": 3, "nproc_per_node": 2, "tp": 1, "pp": 1, "load": CKPT}
SMOKE = {"size_mib": 1, "iters": 2, "warmup": 1, "rendezvous_timeout_s": 60, "run_timeout_s": 20, "startup_s": 30}


@pytest.fixture(scope="module")
def jobs(sim_cluster):
    j = podman.JobImages(sim_cluster)
    try:
        j.configure()
        megatron_tree(sim_cluster.dir / "jobckpt", 200)
        j.build("n1", "pfsim-job:a", torch="2.1.0")
        j.build("n2", "pfsim-job:b", torch="2.2.0")
        j.start("n1", "pfjob-n1", "pfsim-job:a", job_args(sim_cluster, j, "n1"))
        yield j
    finally:
        j.close()


def job_args(cluster, jobs, node: str, **kw) -> list[str]:
    return jobs.run_args(node, **kw) + ["-e", "ASCEND_RT_VISIBLE_DEVICES=0,1",
                                        "-v", f"{cluster.dir / 'jobckpt'}:{CKPT}:ro"]


def inventory(cluster, jobs, tmp_path: Path, job: bool = True, defaults=None, checks=None, **over) -> str:
    doc = yaml.safe_load(Path(cluster.inventory_path).read_text())
    containers = {"n1": {"runtime": "podman", "name": "pfjob-n1"},
                  "n2": {"runtime": "podman", "image": "pfsim-job:b", "run_args": job_args(cluster, jobs, "n2")},
                  "n3": {"runtime": "podman", "image": "pfsim-job:a", "run_args": job_args(cluster, jobs, "n3")}}
    containers.update(over)
    for e in doc["nodes"]:
        if containers.get(e["name"]):
            e["container"] = containers[e["name"]]
    if job:
        doc["job"] = JOB
    doc["defaults"].update(defaults or {})
    if checks:
        doc["checks"] = checks
    path = tmp_path / f"inv{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def host_inventory(cluster, jobs, tmp_path: Path, **kw) -> str:
    return inventory(cluster, jobs, tmp_path, n1=None, n2=None, n3=None, **kw)


def run(path: str, checks: list[str], deadline: float | None = None):
    KnownHosts.forget_all()
    return Runner(load(path), SSHTransport(), Options(checks=checks, deadline=deadline)).run()


def one(report, node, check):
    (r,) = [r for r in report.results if r.node == node and r.check == check]
    return r


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")  # as podman's events.log writes it


def test_container_runtime_passes_for_a_named_container_and_an_image(sim_cluster, jobs, tmp_path):
    rep = run(inventory(sim_cluster, jobs, tmp_path), ["container.runtime"])
    for n in ("n1", "n2", "n3"):
        r = one(rep, n, "container.runtime")
        assert r.status is Status.PASS, r
        assert r.details["image_id"]


def test_job_side_checks_look_inside_the_container(sim_cluster, jobs, tmp_path):
    sim_cluster.set_state("n1", "set_env", False)  # the host has no toolkit to source; the image has
    try:
        rep = run(inventory(sim_cluster, jobs, tmp_path), ["cann.env", "sw.consistency"])
        assert one(rep, "n1", "cann.env").status is Status.PASS
        sw = one(rep, "n2", "sw.consistency")  # n1 and n3 run image a (torch 2.1.0): n2 is the odd one
        assert sw.status is Status.FAIL and "torch 2.2.0, expected 2.1.0" in sw.summary, sw
        # the same cluster judged on the hosts: no toolkit on n1's host
        host = run(host_inventory(sim_cluster, jobs, tmp_path), ["cann.env"])
        assert one(host, "n1", "cann.env").status is Status.FAIL
    finally:
        sim_cluster.reset("n1")


def test_another_image_on_one_node_fails_there_naming_both_digests(sim_cluster, jobs, tmp_path):
    rep = run(inventory(sim_cluster, jobs, tmp_path), ["sw.consistency", "container.runtime"])
    ids = {n: one(rep, n, "container.runtime").details["image_id"] for n in ("n1", "n2", "n3")}
    assert ids["n1"] == ids["n3"] != ids["n2"]
    sw = one(rep, "n2", "sw.consistency")
    assert sw.status is Status.FAIL and f"job image (by digest) {ids['n2']}, expected {ids['n1']}" in sw.summary
    assert [r.node for r in rep.results if r.check == "sw.consistency" and r.node] == ["n2"]
    same = run(inventory(sim_cluster, jobs, tmp_path,  # n2 on image a too: one digest, nothing to say about it
                         n2={"runtime": "podman", "image": "pfsim-job:a", "run_args": job_args(sim_cluster, jobs, "n2")}),
               ["sw.consistency"])
    assert one(same, None, "sw.consistency").status is Status.PASS


def test_plan_checkpoint_and_launch_environment_are_the_jobs(sim_cluster, jobs, tmp_path):
    inv = inventory(sim_cluster, jobs, tmp_path, n3={"runtime": "podman", "image": "pfsim-job:a", "run_args":
                    job_args(sim_cluster, jobs, "n3") + ["-e", "HCCL_CONNECT_TIMEOUT=5"]})
    rep = run(inv, ["plan.parallel", "ckpt.resume", "env.comm"])
    plan = one(rep, None, "plan.parallel")
    assert plan.status is Status.PASS and plan.details["visible_devices"] == {"n1": 2, "n2": 2, "n3": 2}, plan
    ck = [r for r in rep.results if r.check == "ckpt.resume"]
    assert ck[0].status is Status.PASS and len(ck) == 1, ck
    assert one(rep, "n1", "env.comm").status is Status.PASS  # interfaces: the host's (host network)
    bad = one(rep, "n3", "env.comm")  # a variable only n3's container sets
    assert bad.status is not Status.PASS and "HCCL_CONNECT_TIMEOUT" in bad.summary, bad
    host = run(host_inventory(sim_cluster, jobs, tmp_path), ["plan.parallel", "ckpt.resume", "env.comm"])
    assert one(host, None, "plan.parallel").details["visible_devices"]["n1"] == sim_cluster.node("n1").devices
    assert one(host, "n1", "ckpt.resume").status is Status.FAIL  # no /job/ckpt on a host
    assert one(host, "n3", "env.comm").status is Status.PASS


def test_one_runtime_call_per_node_and_round(sim_cluster, jobs, tmp_path):
    since = now()
    rep = run(inventory(sim_cluster, jobs, tmp_path), ["container.runtime", "cann.env", "sw.consistency",
                                                       "storage.data", "plan.parallel"])
    assert all(r.status is not Status.ERROR for r in rep.results), [r for r in rep.results if r.status is Status.ERROR]
    # one round of node probes: 6+ job-side probes per node, one exec into n1, one fresh container each on n2, n3
    assert jobs.events("exec", since) == ["pfjob-n1"]
    created = jobs.events("create", since)
    assert len(created) == 2 and "pfjob-n1" not in created, created


def test_nothing_is_left_running_in_or_beside_the_container(sim_cluster, jobs, tmp_path):
    run(inventory(sim_cluster, jobs, tmp_path), ["container.runtime", "cann.env", "sw.consistency", "storage.data"])
    assert jobs.ps("n1") == ["pfjob-n1"]  # the run --rm containers of n2 and n3 are gone
    procs = jobs.exec("n1", "podman top pfjob-n1 args").stdout.splitlines()[1:]
    assert [p.strip() for p in procs] == ["sleep infinity"]
    left = [cmd for _, cmd in sim_cluster.node_processes("n2") if "podman" in cmd or "conmon" in cmd]
    assert left == []


def leftovers(cluster, jobs, addr: str) -> list[str]:
    """Rank processes of this cluster (by their rendezvous address), container processes other than
    the named container's own, containers other than it, runtime clients, anywhere."""
    found = [f"{n.name}: {cmd}" for n in cluster.nodes for _, cmd in cluster.node_processes(n.name)
             if ("allreduce_worker" in cmd and addr in cmd) or " exec -i " in cmd or " run --rm " in cmd]
    top = [p.strip() for p in jobs.exec("n1", "podman top pfjob-n1 args").stdout.splitlines()[1:]]
    found += [f"in pfjob-n1: {p}" for p in top if p != "sleep infinity"]
    found += [f"container {c}" for c in jobs.ps("n1") if c != "pfjob-n1"]
    return found


def wait_clean(cluster, jobs, addr: str, timeout: float = 15.0) -> list[str]:
    end = time.monotonic() + timeout
    while (left := leftovers(cluster, jobs, addr)) and time.monotonic() < end:
        time.sleep(0.5)
    return left


@needs_torch
def test_allreduce_runs_with_the_containers_python(sim_cluster, jobs, tmp_path):
    assert not Path(podman.JOB_PYTHON).exists()  # no host has it: a rank that ran, ran in its container
    inv = inventory(sim_cluster, jobs, tmp_path, defaults={"python": podman.JOB_PYTHON},
                    checks={"smoke.allreduce": SMOKE})
    rep = run(inv, ["smoke.allreduce"])
    s = one(rep, None, "smoke.allreduce")
    assert s.status is Status.PASS, s.summary
    assert [r["node"] for r in s.details["ranks"]] == ["n1", "n2"]  # exec into n1, a fresh run on n2
    assert wait_clean(sim_cluster, jobs, sim_cluster.node("n1").host) == []


@needs_torch
def test_allreduce_cut_by_the_deadline_leaves_nothing(sim_cluster, jobs, tmp_path):
    port = 29463
    rule = f"INPUT -p tcp --dport {port} -j DROP"  # rank 1 never reaches rank 0: both wait
    assert sim_cluster.exec("n1", f"iptables -I {rule}").returncode == 0
    try:
        inv = inventory(sim_cluster, jobs, tmp_path, defaults={"python": podman.JOB_PYTHON},
                        checks={"smoke.allreduce": {**SMOKE, "port": port}})
        t0 = time.monotonic()
        rep = run(inv, ["smoke.allreduce"], deadline=20)
        assert time.monotonic() - t0 < 30
        cut = one(rep, None, "smoke.allreduce")
        assert cut.status is Status.ERROR, (cut.summary, cut.details)
        assert wait_clean(sim_cluster, jobs, sim_cluster.node("n1").host) == []
    finally:
        sim_cluster.exec("n1", f"iptables -D {rule}")


def test_stopped_container_and_absent_image_are_errors_naming_them(sim_cluster, jobs, tmp_path):
    jobs.exec("n1", "podman stop -t 0 pfjob-n1")
    try:
        inv = inventory(sim_cluster, jobs, tmp_path, n2={"runtime": "podman", "image": "pfsim-job:absent"},
                        n3={"runtime": "podman", "name": "pfjob-none"})
        t0 = time.monotonic()
        rep = run(inv, ["container.runtime", "cann.env", "plan.parallel"])
        assert time.monotonic() - t0 < 60
        r1 = one(rep, "n1", "container.runtime")
        assert r1.status is Status.ERROR and "container pfjob-n1 is exited, not running" in r1.summary
        r2 = one(rep, "n2", "container.runtime")
        assert r2.status is Status.ERROR and "image pfsim-job:absent is not on this node" in r2.summary
        r3 = one(rep, "n3", "container.runtime")
        assert r3.status is Status.ERROR and "container pfjob-none does not exist on this node" in r3.summary
        for node, label in (("n1", "container pfjob-n1"), ("n2", "image pfsim-job:absent"), ("n3", "container pfjob-none")):
            for check in ("cann.env", "plan.parallel"):
                r = one(rep, node, check)
                assert r.status is Status.ERROR and f"{label} on {node}" in r.summary, r
                assert "\n" not in r.summary and "Traceback" not in r.summary
    finally:
        jobs.exec("n1", "podman start pfjob-n1")


def test_a_runtime_that_cannot_answer_is_an_error_naming_node_and_container(sim_cluster, jobs, tmp_path):
    # docker on a node without its daemon (or without docker at all): the client's own words
    inv = inventory(sim_cluster, jobs, tmp_path, n2={"runtime": "docker", "name": "train"})
    rep = run(inv, ["container.runtime", "cann.env", "plan.parallel"])
    assert one(rep, "n2", "container.runtime").status is Status.FAIL
    for check in ("cann.env", "plan.parallel"):
        r = one(rep, "n2", check)
        assert r.status is Status.ERROR and "docker could not run the probe in container train on n2" in r.summary, r
    assert one(rep, "n1", "cann.env").status is Status.PASS


def test_non_host_network_warns(sim_cluster, jobs, tmp_path):
    inv = inventory(sim_cluster, jobs, tmp_path,
                    n2={"runtime": "podman", "image": "pfsim-job:b", "run_args": jobs.run_args("n2", network="none")})
    r = one(run(inv, ["container.runtime"]), "n2", "container.runtime")
    assert r.status is Status.WARN and "HCCL_IF_IP" in r.remediation


def test_a_deployed_cann_container_gives_no_false_alarm_and_a_driver_copy_is_found(sim_cluster, jobs, tmp_path):
    """A job container as real deployments start it: the CANN image's ENV (podman.CANN_IMAGE_ENV,
    from Ascend/cann-container-image's Dockerfile), the driver's lib64 and version.info and npu-smi
    mounted read-only, the data mounted, no firmware tree inside. cann.env reads the driver and
    firmware versions on the host, the toolkit and the launch environment in the container: it
    passes. An image that carries its own, other driver version file fails, naming both versions."""
    env = podman.cann_env()
    jobs.build("n3", "pfsim-cann:deployed", torch="2.1.0", env=env)
    jobs.build("n3", "pfsim-cann:own-driver", torch="2.1.0", env=env, driver_version="23.0.99")
    no_firmware = jobs.exec("n3", "podman run --rm --pull=never " + " ".join(jobs.deployed_run_args("n3"))
                            + " pfsim-cann:deployed sh -c 'ls /usr/local/Ascend; echo LD=$LD_LIBRARY_PATH'")
    assert "firmware" not in no_firmware.stdout and "driver" in no_firmware.stdout
    assert "LD=/usr/local/Ascend/ascend-toolkit/latest/tools/aml/lib64:" in no_firmware.stdout  # the image's ENV
    host_driver = versions_of(sim_cluster, "n3")
    rep = run(inventory(sim_cluster, jobs, tmp_path, n1=None, n2=None,
                        n3={"runtime": "podman", "image": "pfsim-cann:deployed",
                            "run_args": jobs.deployed_run_args("n3")}), ["cann.env", "storage.data"])
    r = one(rep, "n3", "cann.env")
    assert r.status is Status.PASS, r.summary
    assert one(rep, "n3", "storage.data").status is Status.PASS  # the data as mounted in the container
    assert r.details["firmware_version"] and r.details["job_driver_version"] == r.details["driver_version"] == host_driver
    rep = run(inventory(sim_cluster, jobs, tmp_path, n1=None, n2=None,
                        n3={"runtime": "podman", "image": "pfsim-cann:own-driver",
                            "run_args": jobs.deployed_run_args("n3", driver_file=False)}), ["cann.env"])
    r = one(rep, "n3", "cann.env")
    assert r.status is Status.FAIL and f"the job's container shows driver Version=23.0.99" in r.summary, r.summary
    assert f"the host has {host_driver}" in r.summary


def versions_of(cluster, node: str) -> str:
    """The node's driver Version as its version.info says (the host's)."""
    text = cluster.exec(node, "cat /usr/local/Ascend/driver/version.info").stdout
    return next(ln.split("=", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Version="))
