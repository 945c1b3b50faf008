"""The job's container on real podman (issue 13, items 3-6): job-side checks look inside it.

A 2-node netns cluster; n1's job runs in a named container (`exec`), n2's is a fresh `run --rm` of
its image. Both images carry the simulated toolkit; n2's has another torch. Skips, saying why,
where podman cannot run (no root, no podman/runc).
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from preflight.inventory import load
from preflight.model import Status
from preflight.runner import Options, Runner
from preflight.sim import podman
from preflight.sim.fixtures import requires_netns
from preflight.transport.hostkeys import KnownHosts
from preflight.transport.ssh import SSHTransport

_OK, _WHY = podman.available()
pytestmark = [requires_netns, pytest.mark.skipif(not _OK, reason=f"podman cannot run here: {_WHY}")]

SIM_SPEC = {"cluster": "jobs", "nodes": ["n1", "n2"]}
SIM_MODE = "netns"


@pytest.fixture(scope="module")
def jobs(sim_cluster):
    j = podman.JobImages(sim_cluster)
    try:
        j.configure()
        j.build("n1", "pfsim-job:a", torch="2.1.0")
        j.build("n2", "pfsim-job:b", torch="2.2.0")
        j.start("n1", "pfjob-n1", "pfsim-job:a", j.run_args("n1"))
        yield j
    finally:
        j.close()


def inventory(cluster, jobs, tmp_path: Path, **over) -> str:
    doc = yaml.safe_load(Path(cluster.inventory_path).read_text())
    containers = {"n1": {"runtime": "podman", "name": "pfjob-n1"},
                  "n2": {"runtime": "podman", "image": "pfsim-job:b", "run_args": jobs.run_args("n2")}}
    containers.update(over)
    for e in doc["nodes"]:
        if containers.get(e["name"]):
            e["container"] = containers[e["name"]]
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def run(path: str, checks: list[str]):
    KnownHosts.forget_all()
    return Runner(load(path), SSHTransport(), Options(checks=checks)).run()


def one(report, node, check):
    (r,) = [r for r in report.results if r.node == node and r.check == check]
    return r


def test_container_runtime_passes_for_a_named_container_and_an_image(sim_cluster, jobs, tmp_path):
    rep = run(inventory(sim_cluster, jobs, tmp_path), ["container.runtime"])
    for n in ("n1", "n2"):
        r = one(rep, n, "container.runtime")
        assert r.status is Status.PASS, r
        assert r.details["image_id"]


def test_job_side_checks_look_inside_the_container(sim_cluster, jobs, tmp_path):
    sim_cluster.set_state("n1", "set_env", False)  # the host has no toolkit to source; the image has
    try:
        rep = run(inventory(sim_cluster, jobs, tmp_path), ["cann.env", "sw.consistency"])
        assert one(rep, "n1", "cann.env").status is Status.PASS
        sw = one(rep, None, "sw.consistency")  # two nodes, two torches: no majority to blame one
        assert sw.status is Status.FAIL and "torch" in sw.summary and "2.2.0" in sw.summary, sw
        # the same cluster judged on the hosts: no toolkit on n1's host
        host = run(sim_cluster.inventory_path, ["cann.env"])
        assert one(host, "n1", "cann.env").status is Status.FAIL
    finally:
        sim_cluster.reset("n1")


def test_nothing_is_left_running_in_or_beside_the_container(sim_cluster, jobs, tmp_path):
    run(inventory(sim_cluster, jobs, tmp_path), ["container.runtime", "cann.env", "sw.consistency", "storage.data"])
    assert jobs.ps("n1") == ["pfjob-n1"]  # the run --rm containers of n2 are gone
    procs = jobs.exec("n1", "podman top pfjob-n1 args").stdout.splitlines()[1:]
    assert [p.strip() for p in procs] == ["sleep infinity"]
    left = [cmd for _, cmd in sim_cluster.node_processes("n2") if "podman" in cmd or "conmon" in cmd]
    assert left == []


def test_stopped_container_and_absent_image_are_errors_naming_them(sim_cluster, jobs, tmp_path):
    jobs.exec("n1", "podman stop -t 0 pfjob-n1")
    try:
        inv = inventory(sim_cluster, jobs, tmp_path, n2={"runtime": "podman", "image": "pfsim-job:absent"})
        t0 = time.monotonic()
        rep = run(inv, ["container.runtime", "cann.env"])
        assert time.monotonic() - t0 < 60
        r1 = one(rep, "n1", "container.runtime")
        assert r1.status is Status.ERROR and "container pfjob-n1 is exited, not running" in r1.summary
        r2 = one(rep, "n2", "container.runtime")
        assert r2.status is Status.ERROR and "image pfsim-job:absent is not on this node" in r2.summary
        c1 = one(rep, "n1", "cann.env")
        assert c1.status is Status.ERROR and "container pfjob-n1 on n1" in c1.summary
        assert one(rep, "n2", "cann.env").status is Status.ERROR
    finally:
        jobs.exec("n1", "podman start pfjob-n1")


def test_non_host_network_warns(sim_cluster, jobs, tmp_path):
    inv = inventory(sim_cluster, jobs, tmp_path,
                    n2={"runtime": "podman", "image": "pfsim-job:b", "run_args": jobs.run_args("n2", network="none")})
    r = one(run(inv, ["container.runtime"]), "n2", "container.runtime")
    assert r.status is Status.WARN and "HCCL_IF_IP" in r.remediation
