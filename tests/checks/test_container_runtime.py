"""container.runtime, pure: parse and evaluate on the runtime's answers (the --format templates the
probes ask for). On real podman: tests/integration/test_container.py."""
from __future__ import annotations

from preflight.checkapi import CommandOutput, Probe, Status
from preflight.checks import container_runtime as cr
from preflight.container import Container
from preflight.node import Node

NAMED = Node("n1", "h", devices=2, container=Container("podman", name="job"))
IMAGE = Node("n1", "h", devices=2, container=Container("docker", image="img:1", run_args=("--net=host",)))
DEVS = "".join(f"dev /dev/{d}\n" for d in ("davinci0", "davinci1", "davinci_manager", "devmm_svm", "hisi_hdc"))


def outs(version=(0, "4.3.1\n", ""), inspect=(0, "running 0f1e2d host\n", ""), inside=(0, DEVS + "driver\n", "")):
    return {k: CommandOutput(stdout=o, stderr=e, rc=rc) for k, (rc, o, e) in
            ((cr.VERSION, version), (cr.INSPECT, inspect), (cr.INSIDE, inside))}


def judge(node, **kw):
    return cr.evaluate(cr.parse(outs(**kw)), {}, node)


def test_probes_name_the_container_and_look_inside_it():
    p = cr.probes(NAMED, {})
    assert "container inspect" in p[cr.INSPECT].cmd and p[cr.INSPECT].cmd.endswith(" job")
    assert isinstance(p[cr.INSIDE], Probe) and p[cr.INSIDE].job is True
    assert "image inspect" in cr.probes(IMAGE, {})[cr.INSPECT].cmd
    assert cr.probes(Node("n1", "h"), {}) == {}


def test_running_container_with_devices_and_driver_passes():
    (f,) = judge(NAMED)
    assert f.status is Status.PASS and f.details["image_id"] == "0f1e2d"
    (f,) = judge(IMAGE, inspect=(0, "sha256:0f1e2d\n", ""))
    assert f.status is Status.PASS and f.details["image_id"] == "sha256:0f1e2d"


def test_missing_device_or_driver_fails():
    fs = judge(NAMED, inside=(0, "dev /dev/davinci0\n", ""))
    assert [f.status for f in fs] == [Status.FAIL, Status.FAIL]
    assert "/dev/davinci1" in fs[0].details["missing_devices"] and "driver" in fs[1].summary


def test_runtime_not_answering_fails_naming_it():
    (f,) = judge(NAMED, version=(127, "", "sh: 1: podman: not found\n"))
    assert f.status is Status.FAIL and "podman does not answer" in f.summary and "not found" in f.summary


def test_absent_container_or_image_and_stopped_container_are_errors_naming_it():
    (f,) = judge(NAMED, inspect=(125, "", "Error: no such container job\n"))
    assert f.status is Status.ERROR and "container job does not exist" in f.summary
    (f,) = judge(IMAGE, inspect=(1, "", "Error: No such image: img:1\n"))
    assert f.status is Status.ERROR and "image img:1 is not on this node" in f.summary and "--pull=never" in f.remediation
    (f,) = judge(NAMED, inspect=(0, "exited 0f1e2d host\n", ""))
    assert f.status is Status.ERROR and "exited, not running" in f.summary


def test_non_host_network_warns_about_hccl_if_ip():
    (f,) = judge(NAMED, inspect=(0, "running 0f1e2d bridge\n", ""))
    assert f.status is Status.WARN and "HCCL_IF_IP" in f.remediation


def test_no_container_skips():
    (f,) = cr.evaluate(cr.parse({}), {}, Node("n1", "h"))
    assert f.status is Status.SKIP
