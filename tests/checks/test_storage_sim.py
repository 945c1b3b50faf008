"""Integration: storage.* and sw.consistency over real SSH on the simulated cluster (netns mode).

One 6-node cluster for the module, one fault per node, each flagged where it is and nowhere else:
node02 lacks train.idx, node03 has a same-size but different train.bin, node04 another CANN
version, node05 a read-only checkpoint mount, node06 a data directory the non-root login user
cannot read (only the storage checks run as that user: the test interpreter may not be readable
by it)."""
from __future__ import annotations

import dataclasses
import os
import pwd
import subprocess

import pytest

from preflight import inventory as inv_mod
from preflight import runner
from preflight.model import Status
from tests.simfixtures import requires_netns
from preflight.transport.ssh import SSHTransport

pytestmark = requires_netns
USER = "pfdata"
SPEC = {"nodes": 6, "defaults": {"data_files": {"train.bin": 65536, "train.idx": 4096}}}


def _ensure_user() -> bool:
    try:
        pwd.getpwnam(USER)
        return False
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", USER], check=True)
        # '*' instead of useradd's locked '!': sshd without PAM refuses locked accounts
        subprocess.run(["usermod", "-p", "*", USER], check=True)
        return True


@pytest.fixture(scope="module")
def cluster(sim_cluster_factory):
    created = _ensure_user()  # before bring-up: the nodes' /etc is an overlay of the host's
    try:
        c = sim_cluster_factory(SPEC, mode="netns")
        c.inject("node02", "data_missing", file="train.idx")
        c.inject("node03", "data_different", file="train.bin")
        c.inject("node04", "version", component="cann", value="8.0.RC3")
        # a non-root user must reach the data path through the cluster's own temp dirs
        for d in (c.dir.parent, c.dir):
            os.chmod(d, 0o755)
        os.chmod(c.dir / "authorized_keys", 0o644)  # sshd reads it as the login user
        for n in c.nodes:
            os.chmod(n.dir, 0o755)
            os.chmod(n.dir / "data", 0o755)
            for f in (n.dir / "data").iterdir():
                os.chmod(f, 0o644)
            os.chmod(n.dir / "ckpt", 0o1777)
        os.chmod(c.node("node06").dir / "data", 0o700)
        sshd = next(r for r in c._procs("node05", "sshd"))
        ckpt = str(c.dir / "mnt" / "ckpt")
        subprocess.run(["nsenter", "-t", str(sshd["pid"]), "-m", "--", "mount", "-o", "remount,bind,ro", ckpt], check=True)
        yield c
    finally:
        if created:
            subprocess.run(["userdel", USER], check=False)


def _run(c, checks, user=None):
    inv = inv_mod.load(c.inventory_path)
    if user:
        inv = dataclasses.replace(inv, nodes=tuple(dataclasses.replace(n, user=user) for n in inv.nodes))
    return runner.run(inv, SSHTransport(), runner.Options(checks=checks))


def _flagged(report, check):
    return {(r.node, r.status) for r in report.results if r.check == check and r.node and r.status is not Status.PASS}


@pytest.fixture(scope="module")
def root_report(cluster):
    return _run(cluster, ["storage", "sw.consistency"])


@pytest.fixture(scope="module")
def user_report(cluster):
    return _run(cluster, ["storage.disk", "storage.data"], user=USER)


def test_consistency_blames_missing_idx_and_different_bin(root_report):
    assert _flagged(root_report, "storage.consistency") == {("node02", Status.FAIL), ("node03", Status.FAIL)}
    texts = {r.node: r.summary for r in root_report.results if r.check == "storage.consistency" and r.node}
    assert "train.idx missing" in texts["node02"] and "train.bin content differs at the same size" in texts["node03"]


def test_data_flags_only_the_unpaired_bin(root_report):
    assert _flagged(root_report, "storage.data") == {("node02", Status.FAIL)}


def test_sw_consistency_names_the_other_cann(root_report):
    blamed = {r.node for r in root_report.results if r.check == "sw.consistency" and r.node}
    assert blamed == {"node04"}


def test_read_only_checkpoint_flagged_on_its_node(root_report):
    assert _flagged(root_report, "storage.disk") == {("node05", Status.FAIL)}
    [r] = [r for r in root_report.results if r.check == "storage.disk" and r.node == "node05"]
    assert "read-only" in r.summary
    ok = [r for r in root_report.results if r.check == "storage.disk" and r.node == "node01"]
    assert any(m["name"] == "free_space" for m in ok[0].details["metrics"])


def test_unreadable_data_for_non_root_user(user_report):
    assert ("node06", Status.FAIL) in _flagged(user_report, "storage.data")
    assert {n for n, _ in _flagged(user_report, "storage.data")} == {"node02", "node06"}
    [r] = [r for r in user_report.results if r.check == "storage.data" and r.node == "node06"]
    assert f"not readable by {USER}" in r.summary
