"""`preflight fix` on the 8-node simulated cluster, as a user runs it: a dry run writes scripts and
changes nothing; --apply corrects node04's env file and the re-check passes; --rollback restores the
file byte for byte. HCCL's port range is reserved (and released again) through the sysctl."""
from __future__ import annotations

import base64
import os
import subprocess

import pytest

from tests.simfixtures import requires_netns
from tests.job.conftest import write_inventory

pytestmark = requires_netns
ENV_FILE = "/etc/pfjob/job.env"
ORIGINAL = (b"# job launch settings (hand-written)\n"
            b"export HCCL_CONNECT_TIMEOUT=1200\n"
            b"export GLOO_SOCKET_IFNAME=eth9   # copied from another cluster\n"
            b"unset NCCL_DEBUG\n")


def pf(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PREFLIGHT_DEBUG"}
    return subprocess.run(["preflight", *args], capture_output=True, text=True, timeout=300, env=env)


def node_bytes(c, node: str, path: str) -> bytes:
    return base64.b64decode(c.exec(node, f"base64 -w0 {path}").stdout)


@pytest.fixture()
def broken_node04(job_cluster, tmp_path):
    c = job_cluster
    c.exec("node04", f"mkdir -p /etc/pfjob && printf '%s' {base64.b64encode(ORIGINAL).decode()} | base64 -d > {ENV_FILE} "
                     f"&& chmod 0640 {ENV_FILE}")
    inv = write_inventory(c, tmp_path / "inv.yaml", {"nproc_per_node": 8}, {"node04": [ENV_FILE]},
                          drop_env=("GLOO_SOCKET_IFNAME",), checks={"net.ports": {"warn_ephemeral": False}})
    yield c, inv
    c.exec("node04", "rm -rf /etc/pfjob")


def test_dry_run_apply_recheck_and_rollback(broken_node04, tmp_path):
    c, inv = broken_node04
    out = tmp_path / "fix"
    dry = pf("fix", str(inv), "--out-dir", str(out))
    assert dry.returncode == 0, dry.stderr
    assert sorted(os.listdir(out)) == ["node04.fix.sh", "node04.plan.json", "node04.rollback.sh"]
    assert f"node04: {ENV_FILE}: GLOO_SOCKET_IFNAME=eth0" in dry.stdout
    assert node_bytes(c, "node04", ENV_FILE) == ORIGINAL  # a dry run touches nothing

    applied = pf("fix", str(inv), "--out-dir", str(out), "--apply")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "re-check passed on the fixed nodes" in applied.stdout
    fixed = node_bytes(c, "node04", ENV_FILE)
    assert fixed == ORIGINAL.replace(b"GLOO_SOCKET_IFNAME=eth9", b"GLOO_SOCKET_IFNAME=eth0")
    assert c.exec("node04", f"stat -c %a {ENV_FILE}").stdout.strip() == "640"

    back = pf("fix", str(inv), "--out-dir", str(out), "--rollback")
    assert back.returncode == 0, back.stderr
    assert node_bytes(c, "node04", ENV_FILE) == ORIGINAL


def test_apply_refuses_a_file_changed_since_it_was_read(broken_node04, tmp_path):
    c, inv = broken_node04
    out = tmp_path / "fix"
    assert pf("fix", str(inv), "--out-dir", str(out)).returncode == 0
    c.exec("node04", f"echo 'export EXTRA=1' >> {ENV_FILE}")
    script = (out / "node04.fix.sh").read_text()
    res = c.exec("node04", script)
    assert res.returncode == 1 and "changed since it was read; not touched" in res.stderr
    assert node_bytes(c, "node04", ENV_FILE).endswith(b"export EXTRA=1\n")


def test_reserves_hccl_ports_and_rolls_back(job_cluster, tmp_path):
    c = job_cluster
    tuned = c.exec("node02", "cat /proc/sys/net/ipv4/ip_local_reserved_ports").stdout  # the sim reserves 60000-60015
    c.exec("node02", "echo > /proc/sys/net/ipv4/ip_local_reserved_ports")  # an untuned node: nothing reserved
    before = c.exec("node02", "cat /proc/sys/net/ipv4/ip_local_reserved_ports").stdout
    inv = write_inventory(c, tmp_path / "inv.yaml", {"nproc_per_node": 8})
    out = tmp_path / "fix"
    res = pf("fix", str(inv), "--limit", "node02", "--out-dir", str(out), "--apply")
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        assert "node02: reserve HCCL's host ports 60000-60015" in res.stdout
        assert "60000-60015" in c.exec("node02", "cat /proc/sys/net/ipv4/ip_local_reserved_ports").stdout
        assert sorted(os.listdir(out)) == ["node02.fix.sh", "node02.plan.json", "node02.rollback.sh"]  # --limit: node02 only
    finally:
        back = pf("fix", str(inv), "--limit", "node02", "--out-dir", str(out), "--rollback")
        restored = c.exec("node02", "cat /proc/sys/net/ipv4/ip_local_reserved_ports").stdout
        c.exec("node02", f"echo {tuned.strip()} > /proc/sys/net/ipv4/ip_local_reserved_ports")
    assert back.returncode == 0, back.stderr
    assert restored == before


def test_rollback_runs_only_what_preflight_recorded(broken_node04, tmp_path):
    """A dry run applied nothing: its rollback runs nothing. An edited rollback script, a directory
    others can write, or a script another user owns is refused before anything reaches the node."""
    c, inv = broken_node04
    out = tmp_path / "fix"
    assert pf("fix", str(inv), "--out-dir", str(out)).returncode == 0
    c.exec("node04", f"echo 'export EXTRA=1' >> {ENV_FILE}")  # the old code ran the rollback: "changed since read"
    back = pf("fix", str(inv), "--out-dir", str(out), "--rollback")
    assert back.returncode == 0 and "node04: nothing to roll back (no step of its fix applied)" in back.stdout, back.stderr
    c.exec("node04", f"printf '%s' {base64.b64encode(ORIGINAL).decode()} | base64 -d > {ENV_FILE}")

    applied = pf("fix", str(inv), "--out-dir", str(out), "--apply")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    script = out / "node04.rollback.sh"
    good = script.read_bytes()
    script.write_bytes(good + b"touch /tmp/planted\n")
    edited = pf("fix", str(inv), "--out-dir", str(out), "--rollback")
    assert edited.returncode == 1 and "recorded when the plan was made: refused" in edited.stderr
    script.write_bytes(good)
    os.chown(script, 65534, 65534)
    foreign = pf("fix", str(inv), "--out-dir", str(out), "--rollback")
    assert foreign.returncode == 1 and "owned by uid 65534" in foreign.stderr
    os.chown(script, os.geteuid(), os.getegid())
    out.chmod(0o777)
    open_dir = pf("fix", str(inv), "--out-dir", str(out), "--rollback")
    assert open_dir.returncode == 1 and "writable by group or others" in open_dir.stderr
    out.chmod(0o700)
    assert c.exec("node04", "test -e /tmp/planted").returncode != 0
    assert node_bytes(c, "node04", ENV_FILE) != ORIGINAL  # nothing above rolled back
    back = pf("fix", str(inv), "--out-dir", str(out), "--rollback")
    assert back.returncode == 0, back.stderr
    assert node_bytes(c, "node04", ENV_FILE) == ORIGINAL
    again = pf("fix", str(inv), "--out-dir", str(out), "--rollback")  # the record says nothing applied now
    assert again.returncode == 0 and "nothing to roll back" in again.stdout
