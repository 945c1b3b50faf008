"""`container:` in the inventory (issue 13, items 3 and 6): one-line errors at load, and the one
place a job-side probe becomes a runtime call. On real podman: tests/integration/test_container.py."""
from __future__ import annotations

import shlex

import pytest

from preflight.container import Container, job_command
from preflight.node import Node
from preflight.checkapi import Probe
from preflight.model import CommandOutput
from preflight.engine.batches import asks
from preflight.transport.wrapping import spec as wrapped
from tests.core.test_inventory import error_of, inv_of
from tests.core.test_privilege import info


def _spec(probe, node, info):
    """A check's probe as the driver takes it (the runner's run_batch does the same)."""
    return wrapped(probe, node, asks(info))


NODES = "\nnodes:\n  - {name: a, host: 10.0.0.1}\n"


def test_container_with_name_or_image(tmp_path):
    (n,) = inv_of(tmp_path, "defaults: {container: {runtime: podman, name: job}}" + NODES).nodes
    assert n.container == Container("podman", name="job")
    (n,) = inv_of(tmp_path, "defaults: {container: {image: 'reg/img:1', run_args: '--network host --device /dev/davinci0'}}"
                  + NODES).nodes
    assert n.container == Container("docker", image="reg/img:1", run_args=("--network", "host", "--device", "/dev/davinci0"))


@pytest.mark.parametrize("value,words", [
    ("{runtime: podman}", "give exactly one of name"),
    ("{name: a, image: b}", "not both"),
    ("{runtime: containerd, name: a}", "'containerd' is not one of docker, podman"),
    ("{name: a, run_args: [--rm]}", "run_args apply to image"),
    ("{image: '--privileged'}", "not starting with '-'"),
    ("{name: a, user: x}", "unknown container key"),
    ("job", "expected dict"),
])
def test_bad_container_is_one_line_naming_the_line(tmp_path, value, words):
    msg = error_of(tmp_path, f"defaults: {{container: {value}}}" + NODES)
    assert words in msg and ":1" in msg and "\n" not in msg


def test_job_probe_becomes_one_quoted_runtime_call_that_needs_root():
    node = Node("a", "h", become="sudo", container=Container("podman", name="my job"))
    job = info()
    job.where = "job"
    spec = _spec(Probe("echo \"it's $HOME\""), node, job)
    assert spec.job and spec.root and spec.timeout == node.probe_timeout + 15
    argv = shlex.split(spec.cmd)
    assert argv[:4] == ["podman", "exec", "-i", "my job"] and argv[-1] == "echo \"it's $HOME\""
    # what a batch runs inside: the probe itself, its own timeout, through that runtime prefix
    assert spec.inner == "echo \"it's $HOME\"" and spec.inner_timeout == node.probe_timeout
    assert shlex.split(spec.runtime) == ["podman", "exec", "-i", "my job"]
    host = info()
    host.where = "host"
    assert _spec(Probe("echo hi"), node, host).cmd == "echo hi"  # host checks stay on the host
    assert not _spec(Probe("echo hi"), Node("a", "h"), job).job  # no container: the host


def test_image_run_is_removed_and_never_pulls():
    cmd = job_command(Container("docker", image="img:1", run_args=("-v", "/a b:/c")), "true", 30)
    argv = shlex.split(cmd)
    assert argv[:5] == ["docker", "run", "--rm", "-i", "--pull=never"] and "/a b:/c" in argv
    assert argv[argv.index("img:1") + 1:] == ["timeout", "-k", "2", "30", "/bin/sh", "-c", "true"]


def test_the_jobs_view_is_declared_by_each_check_that_needs_it():
    from preflight.registry import discover

    every = discover()
    job_side = {c for c, i in every.items() if i.where == "job"}
    assert {"cann.env", "sw.consistency", "storage.data", "plan.parallel", "smoke.allreduce", "sw.stack",
            "ckpt.resume"} <= job_side
    assert not {"npu.health", "hccn.link", "net.ports", "storage.disk", "net.ping_mesh"} & job_side
    assert "looks at: the job's container" in every["plan.parallel"].policy_text()


@pytest.mark.parametrize("container,net_inside", [
    (Container("podman", name="job"), False),  # a named container: host network assumed (container.runtime warns)
    (Container("podman", image="i:1", run_args=("--network", "host")), False),
    (Container("podman", image="i:1", run_args=("--network=none",)), True),
    (Container("podman", image="i:1"), False),  # no --network given: the job's usual host mode
])
def test_env_comm_reads_the_launch_env_inside_and_the_interfaces_where_the_network_is(container, net_inside):
    from preflight.checks import env_comm
    from preflight.registry import discover

    node = Node("a", "h", container=container)
    info = discover()["env.comm"]
    specs = {k: _spec(p, node, info) for k, p in env_comm.probes(node, {}).items()}
    assert specs["launch_env"].job and specs["ip_addr"].job is net_inside
    env = CommandOutput(stdout="MASTER_ADDR=10.0.0.1\0")
    master = _spec(env_comm.followup({"launch_env": env}, node, {})["master_addr"], node, info)
    assert master.job is net_inside
