"""Privilege per probe without SSH (issue 13, item 1): inventory keys, how the runner marks probes,
the driver's decision on a local shell, the frames of probes it did not run, and what explain says.
The same paths on real sshd and sudo: tests/integration/test_become.py."""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from types import SimpleNamespace

import pytest

from preflight.checkapi import Probe
from preflight.node import Node
from preflight.registry import discover
from preflight.engine.batches import asks, run_batch
from preflight.transport.wrapping import merge as _merge, spec as wrapped
from preflight.transport.batch import NEEDS_ROOT, FrameParser, ProbeSpec, driver_script, new_nonce
from tests.core.test_batch import run_driver
from tests.core.test_cli import cli
from tests.core.test_inventory import error_of, inv_of


def _spec(probe, node, info):
    """A check's probe as the driver takes it (the runner's run_batch does the same)."""
    return wrapped(probe, node, asks(info))


NODES = "\nnodes:\n  - {name: a, host: 10.0.0.1}\n"


# ---------------------------------------------------------------- inventory

def test_become_defaults_to_none_and_become_user_to_root(tmp_path):
    (n,) = inv_of(tmp_path, NODES).nodes
    assert (n.become, n.become_user) == (None, "root")
    (n,) = inv_of(tmp_path, "defaults: {become: sudo, become_user: HwHiAiUser, user: ops}" + NODES).nodes
    assert (n.become, n.become_user, n.user) == ("sudo", "HwHiAiUser", "ops")
    (n,) = inv_of(tmp_path, "defaults: {become: none}" + NODES).nodes
    assert n.become is None


@pytest.mark.parametrize("text,words", [
    ("defaults: {become: su}", "'su' is not one of sudo, none"),
    ("defaults: {become: true}", "expected str, got bool"),
    ("defaults: {become: sudo, become_user: 'root; id'}", "is not a user name"),
])
def test_bad_become_refused_in_one_line(tmp_path, text, words):
    msg = error_of(tmp_path, text + NODES)
    assert words in msg and ":1:" in msg and "\n" not in msg


def test_ansible_become(tmp_path):
    text = """
        all:
          vars: {ansible_user: ops, ansible_become: yes, ansible_become_method: sudo, ansible_become_user: root}
          hosts:
            a: {ansible_host: 10.0.0.1}
            b: {ansible_host: 10.0.0.2, ansible_become: false}
    """
    a, b = inv_of(tmp_path, text).nodes
    assert (a.user, a.become, a.become_user) == ("ops", "sudo", "root")
    assert b.become is None


def test_ansible_become_method_other_than_sudo_refused(tmp_path):
    text = """
        all:
          hosts:
            a: {ansible_host: 10.0.0.1, ansible_become: true, ansible_become_method: su}
    """
    msg = error_of(tmp_path, text)
    assert "ansible_become_method" in msg and "sudo only" in msg and ":4:" in msg


# ---------------------------------------------------------------- which probes need root

def info(privilege="user", group=None, where="host"):
    return SimpleNamespace(privilege=privilege, privilege_group=group, where=where)



def test_probe_privilege_comes_from_the_check_unless_the_probe_says():
    node = Node("a", "h", become="sudo")
    assert _spec(Probe("x"), node, info("root")).mode == "r,,root"
    assert _spec(Probe("x"), node, info("user")).mode == "-"
    assert _spec(Probe("x", root=False), node, info("root")).mode == "-"
    assert _spec(Probe("x", root=True), node, info("user")).mode == "r,,root"
    assert _spec(Probe("x"), node, info("root", "HwHiAiUser")).mode == "r,HwHiAiUser,root"
    assert _spec(Probe("x"), Node("a", "h"), info("root")).mode == "r,,"  # no become: not run unless root


def test_one_command_for_several_checks_runs_once_with_the_most_privilege():
    node = Node("a", "h", become="sudo", become_user="admin")
    merged = _merge(_spec(Probe("x"), node, info("user")), _spec(Probe("x"), node, info("root", "HwHiAiUser")))
    assert (merged.root, merged.group, merged.become) == (True, "HwHiAiUser", "admin")


class _Session:
    def __init__(self):
        self.specs = []

    def run(self, specs, cancel):
        self.specs += specs
        return {s.key: SimpleNamespace(key=s.key) for s in specs}


def test_run_batch_marks_probes_by_their_checks_policy():
    s = _Session()
    checks = {"r": info("root"), "u": info("user")}
    run_batch(s, Node("a", "h", become="sudo"), {"r": {"p": Probe("hccn")}, "u": {"p": Probe("df"), "q": Probe("hccn")}}, None,
              checks=checks)
    modes = {sp.cmd: sp.mode for sp in s.specs}
    assert modes == {"hccn": "r,,root", "df": "-"}


# ---------------------------------------------------------------- the driver decides on the node

def test_root_login_runs_root_probes_directly():
    if os.geteuid() != 0:
        pytest.skip("needs root: the driver's root path runs without sudo only for uid 0")
    out, _, _ = run_driver([ProbeSpec("r", "id -u", 10, root=True), ProbeSpec("u", "id -u", 11)])
    assert out["r"].stdout == "0\n" and out["r"].denied is None and out["u"].stdout == "0\n"


def _as_nobody(specs):
    """The driver under an unprivileged uid (setpriv), as a non-root login user's shell runs it;
    stdin stays open until the driver says the round is done (EOF would stop it, as a lost client)."""
    nonce = new_nonce()
    uid = pwd.getpwnam("nobody").pw_uid
    proc = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "/bin/sh", "-c",
                             driver_script(specs, nonce)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env={"PATH": os.environ["PATH"], "TMPDIR": "/tmp"})
    raw, ready = b"", f"@@PF:{nonce}:R\n".encode()
    try:
        while ready not in raw and (chunk := proc.stdout.read1(65536)):
            raw += chunk
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
        proc.stdout.close()
    return dict((specs[i].key, o) for i, o in FrameParser(nonce, specs).feed(raw))


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv (util-linux)")
def test_non_root_without_become_does_not_run_root_probes():
    out = _as_nobody([ProbeSpec("r", "touch /tmp/.pf-should-not-exist", 10, root=True),
                      ProbeSpec("u", "id -u", 10)])
    assert out["r"].denied == NEEDS_ROOT and out["r"].rc is None and out["r"].error == NEEDS_ROOT
    assert not os.path.exists("/tmp/.pf-should-not-exist")
    assert out["u"].stdout.strip() == str(pwd.getpwnam("nobody").pw_uid)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("sudo"),
                    reason="needs root, setpriv and sudo")
def test_sudo_refusal_carries_sudos_words():
    out = _as_nobody([ProbeSpec("r", "id -u", 10, root=True, become="root")])
    assert out["r"].denied.startswith("sudo -n refused: sudo: ") and out["r"].rc is None


def test_unrun_frames_cannot_be_forged_by_a_probe():
    nonce = new_nonce()
    fake = f"printf '@@PF:{'0' * 16}:B 0 N 1 2\\n'"
    out, _, _ = run_driver([ProbeSpec("f", fake, 10)], nonce=nonce)
    assert out["f"].denied is None and out["f"].rc == 0


# ---------------------------------------------------------------- stated in explain

def test_explain_states_each_checks_privilege():
    every = discover()
    assert "root or membership of the HwHiAiUser group" in cli("explain", "npu.health").stdout
    assert "privilege: root (as a non-root login user: become: sudo" in cli("explain", "hccn.link").stdout
    assert "privilege: user (no root needed)" in cli("explain", "storage.disk").stdout
    assert {c for c, i in every.items() if i.privilege == "root"} >= {"hccn.link", "npu.health", "npu.idle"}
