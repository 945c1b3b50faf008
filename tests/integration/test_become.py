"""Logging in as a non-root user with sudo (issue 13, items 1-2), on real sshd and real sudo.

One netns cluster serves the module, one node per case: `sudo` NOPASSWD (nopw), a password
required (pw), no sudo rule (nosudo), no sudo rule but in HwHiAiUser (grp), a login user with no
become in the inventory (nobecome), and root (root). Every case runs in the same `preflight run`
(the mixed cluster), and the simulated tools refuse a non-root caller with the real tools' words.
"""
from __future__ import annotations

import threading

import pytest

from preflight.inventory import load
from preflight.model import Status
from preflight.runner import Options, Runner
from preflight.sim import render_hccn, render_npusmi
from tests.simfixtures import requires_netns
from preflight.transport.batch import NEEDS_ROOT, ProbeSpec
from preflight.transport.hostkeys import KnownHosts
from preflight.transport.ssh import SSHTransport

pytestmark = requires_netns

USER = "pfop"
SIM_SPEC = {"cluster": "become", "nodes": [
    {"name": "nopw", "login_user": USER, "sudo": "nopasswd"},
    {"name": "pw", "login_user": USER, "sudo": "password"},
    {"name": "nosudo", "login_user": USER, "sudo": "none"},
    {"name": "grp", "login_user": USER, "sudo": "none", "groups": ["HwHiAiUser"]},
    {"name": "nobecome", "login_user": USER, "become": False},
    {"name": "root"},
]}
SIM_MODE = "netns"
CHECKS = ["npu.health", "npu.idle", "hccn.link", "storage.disk", "env.consistency"]


@pytest.fixture(scope="module")
def report(sim_cluster):
    KnownHosts.forget_all()
    return Runner(load(sim_cluster.inventory_path), SSHTransport(), Options(checks=CHECKS)).run()


def results(report, node: str, check: str):
    return [r for r in report.results if r.node == node and r.check == check]


def one(report, node: str, check: str):
    (r,) = results(report, node, check)
    return r


def run_probes(cluster, node: str, specs: list[ProbeSpec]):
    KnownHosts.forget_all()
    t = SSHTransport()
    try:
        s = t.connect(load(cluster.inventory_path, limit=node).nodes[0], threading.Event())
        return s.run(specs, threading.Event())
    finally:
        t.close()


def test_nopasswd_sudo_runs_exactly_the_root_probes_as_root(sim_cluster):
    out = run_probes(sim_cluster, "nopw", [ProbeSpec("r", "id -un", 10, root=True, become="root"),
                                           ProbeSpec("u", "id -un", 11)])
    assert out["r"].stdout.strip() == "root" and out["r"].denied is None
    assert out["u"].stdout.strip() == USER


def test_nopasswd_node_passes_the_root_checks(report):
    for check in ("npu.health", "npu.idle", "hccn.link"):
        assert one(report, "nopw", check).status is Status.PASS, check
    # a user-privilege check ran as the login user, not under sudo
    disk = one(report, "nopw", "storage.disk")
    assert disk.status is Status.PASS and "checkpoint writable" in disk.summary


@pytest.mark.parametrize("node", ["pw", "nosudo"])
def test_sudo_asking_for_a_password_is_an_error_in_sudos_words(report, node):
    for check in ("npu.health", "hccn.link", "env.consistency"):
        r = one(report, node, check)
        assert r.status is Status.ERROR, (check, r)
        assert r.summary == "sudo -n refused: sudo: a password is required"
        assert "NOPASSWD" in r.remediation and USER in r.remediation
    assert one(report, node, "npu.idle").status is Status.SKIP  # REQUIRES npu.health
    assert one(report, node, "storage.disk").status is Status.PASS  # needs no root


def test_hwhiaiuser_member_runs_npu_smi_without_sudo_but_not_hccn_tool(report):
    assert one(report, "grp", "npu.health").status is Status.PASS
    assert one(report, "grp", "npu.idle").status is Status.PASS
    link = one(report, "grp", "hccn.link")
    assert link.status is Status.ERROR and link.summary.startswith("sudo -n refused")


def test_no_become_and_not_root_leaves_root_probes_unrun(report):
    for check in ("npu.health", "hccn.link"):
        r = one(report, "nobecome", check)
        assert r.status is Status.ERROR and r.summary == NEEDS_ROOT == "needs root: set become: sudo, or run as root"
        assert "become: sudo" in r.remediation
    assert "HwHiAiUser" in one(report, "nobecome", "npu.health").remediation  # npu-smi's group way


def test_root_login_needs_no_sudo(report):
    for check in CHECKS[:4]:
        assert one(report, "root", check).status is Status.PASS, check


def test_mixed_cluster_is_never_ready(report):
    assert report.exit_code == 3 and report.verdict == "incomplete"
    errored = {r.node for r in report.results if r.status is Status.ERROR}
    assert errored == {"pw", "nosudo", "grp", "nobecome"}


def test_simulated_hccn_tool_refuses_a_non_root_caller_with_the_real_words(sim_cluster):
    tool = "/usr/local/Ascend/driver/tools/hccn_tool -i 0 -link -g"
    out = run_probes(sim_cluster, "nosudo", [ProbeSpec("t", tool, 10)])["t"]
    assert out.rc != 0 and out.stderr == render_hccn.ERR_NOT_ROOT
    assert render_hccn.ERR_NOT_ROOT == "permission denied: pls check this cmd run permission.\n"


def test_simulated_npu_smi_answers_a_user_outside_hwhiaiuser_as_the_real_one(sim_cluster):
    out = run_probes(sim_cluster, "nosudo", [ProbeSpec("n", "npu-smi info", 10)])["n"]
    assert out.rc == 187 and out.stdout == render_npusmi.DENIED
    assert "dcmi module initialize failed. ret is -8005" in out.stdout
    ok = run_probes(sim_cluster, "grp", [ProbeSpec("n", "npu-smi info", 10)])["n"]
    assert ok.rc == 0 and "npu-smi" in ok.stdout


def test_sudo_password_prompt_never_hangs(sim_cluster):
    out = run_probes(sim_cluster, "pw", [ProbeSpec("r", "sleep 300", 600, root=True, become="root"),
                                         ProbeSpec("u", "echo after", 10)])
    assert out["r"].denied.startswith("sudo -n refused") and out["r"].rc is None
    assert out["u"].stdout == "after\n"
