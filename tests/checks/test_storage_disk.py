"""storage.disk: statfs/df parsing, thresholds per role, write test, read-only mount, timeouts.

The probe outputs below are what the probe commands printed on a Linux host with GNU coreutils
(captured with `sh -c` on the command strings storage_disk builds), sizes edited per case."""
from __future__ import annotations

import subprocess

import pytest

from preflight.checks import storage_disk as check
from preflight.checkapi import CommandOutput, ParseError, Status
from preflight.node import Node

GIB = 1 << 30
NODE = Node("node01", "10.0.0.1", user="train", paths={"checkpoint": "/ckpt", "data": ["/data/gpt"]})


def _space(path: str, bsize=4096, blocks=66053021, bavail=20932220, files=16777216, ffree=16368760,
           df="/dev/vda       270553174016 23205920768 85738373120      22% /ckpt") -> CommandOutput:
    return CommandOutput(stdout=f"path={path}\nstatfs={bsize} {blocks} {bavail} {files} {ffree} ext2/ext3\ndf={df}\n")


WRITABLE = CommandOutput(stdout="path=/ckpt\nwritable\n")
READ_ONLY = CommandOutput(stdout="path=/ckpt\n", rc=3, stderr=(
    "mktemp: failed to create file via template '/ckpt/.preflight-probe.XXXXXX': Read-only file system\n"))
DENIED = CommandOutput(stdout="path=/ckpt\n", rc=3, stderr=(
    "mktemp: failed to create file via template '/ckpt/.preflight-probe.XXXXXX': Permission denied\n"))
MISSING = CommandOutput(stdout="path=/ckpt\n", rc=1, stderr=(
    "stat: cannot read file system information for '/ckpt': No such file or directory\n"))


def _run(outputs):
    facts = check.parse(outputs)
    return facts, check.evaluate(facts, check.DEFAULTS, NODE)


def _ok_outputs(**over):
    base = {"disk_checkpoint": _space("/ckpt"), "disk_write": WRITABLE, "disk_data_0": _space("/data/gpt")}
    base.update(over)
    return base


def test_probes_cover_every_path_and_quote_them():
    node = Node("n", "h", paths={"checkpoint": "/ck pt", "data": ["/d1", "/d2"]})
    p = check.probes(node, check.DEFAULTS)
    assert set(p) == {"disk_checkpoint", "disk_write", "disk_data_0", "disk_data_1"}
    assert "'/ck pt'" in p["disk_checkpoint"].cmd and "stat -f -c" in p["disk_checkpoint"].cmd
    assert "df -P -B1" in p["disk_data_1"].cmd and p["disk_data_1"].timeout == 30
    assert "trap 'rm -f" in p["disk_write"].cmd


def test_write_probe_leaves_no_file_behind(tmp_path):
    r = subprocess.run(["sh", "-c", check._write_cmd(str(tmp_path))], capture_output=True, text=True)
    assert r.returncode == 0 and "writable" in r.stdout
    assert list(tmp_path.iterdir()) == []


def test_write_probe_killed_by_timeout_still_removes_file(tmp_path):
    cmd = check._write_cmd(str(tmp_path)).replace("echo writable", "sleep 5; echo writable")
    r = subprocess.run(["timeout", "1", "sh", "-c", cmd], capture_output=True, text=True)
    assert r.returncode == 124 and list(tmp_path.iterdir()) == []


def test_space_probe_runs_here(tmp_path):
    r = subprocess.run(["sh", "-c", check._space_cmd(str(tmp_path))], capture_output=True, text=True)
    s = check._parse_space("disk_checkpoint", CommandOutput(r.stdout, r.stderr, r.returncode))
    assert s.path == str(tmp_path) and s.total_bytes > 0 and s.mount.startswith("/")


def test_healthy_passes_with_metrics():
    facts, [f] = _run(_ok_outputs())
    assert f.status is Status.PASS and facts.writable is True
    free = [m for m in f.details["metrics"] if m["name"] == "free_space"]
    assert {m["labels"]["path"] for m in free} == {"/ckpt", "/data/gpt"}
    assert free[0]["value"] == 4096 * 20932220 and free[0]["unit"] == "bytes"
    assert facts.paths[0].mount == "/ckpt" and facts.paths[0].source == "/dev/vda"


def test_checkpoint_below_gib_threshold_fails():
    # 40 GiB free of 100 GiB: 40% but under 50 GiB
    _, [f] = _run(_ok_outputs(disk_checkpoint=_space("/ckpt", bsize=1024, blocks=100 * GIB // 1024, bavail=40 * GIB // 1024)))
    assert f.status is Status.FAIL and "40.0 GiB free (40.0%), expected >= 50 GiB and >= 10%" in f.summary
    assert "mounted on /ckpt" in f.summary and "du -sh" in f.remediation and f.details["metrics"]


def test_checkpoint_below_pct_threshold_fails():
    # 60 GiB free of 1000 GiB: 6%
    _, [f] = _run(_ok_outputs(disk_checkpoint=_space("/ckpt", bsize=1024, blocks=1000 * GIB // 1024, bavail=60 * GIB // 1024)))
    assert f.status is Status.FAIL and "(6.0%)" in f.summary


def test_threshold_is_a_parameter():
    facts = check.parse(_ok_outputs(disk_checkpoint=_space("/ckpt", bsize=1024, blocks=100 * GIB // 1024, bavail=40 * GIB // 1024)))
    [f] = check.evaluate(facts, {**check.DEFAULTS, "min_free_gib": 30}, NODE)
    assert f.status is Status.PASS


def test_checkpoint_out_of_inodes_fails():
    _, [f] = _run(_ok_outputs(disk_checkpoint=_space("/ckpt", files=1000000, ffree=100)))
    assert f.status is Status.FAIL and "100 inodes free (0.0%)" in f.summary


def test_filesystem_without_inode_counts_is_not_judged_on_inodes():
    _, [f] = _run(_ok_outputs(disk_checkpoint=_space("/ckpt", files=0, ffree=0)))
    assert f.status is Status.PASS


def test_data_path_low_space_warns():
    _, [f] = _run(_ok_outputs(disk_data_0=_space("/data/gpt", bsize=1024, blocks=1000 * GIB // 1024, bavail=GIB // 2048)))
    assert f.status is Status.WARN and f.summary.startswith("data path /data/gpt")


def test_read_only_checkpoint_fails():
    facts, [f] = _run(_ok_outputs(disk_write=READ_ONLY))
    assert facts.read_only and f.status is Status.FAIL
    assert "read-only mount" in f.summary and "remount,rw" in f.remediation


def test_unwritable_checkpoint_fails_naming_user():
    _, [f] = _run(_ok_outputs(disk_write=DENIED))
    assert f.status is Status.FAIL and "not writable by train" in f.summary and "chown train" in f.remediation


def test_missing_checkpoint_path_fails():
    _, findings = _run(_ok_outputs(disk_checkpoint=MISSING, disk_write=CommandOutput(
        stdout="path=/ckpt\n", rc=3, stderr="mktemp: failed to create file via template '/ckpt/.preflight-probe.XXXXXX': No such file or directory\n")))
    assert findings[0].status is Status.FAIL and "No such file or directory" in findings[0].summary
    assert "mkdir -p /ckpt" in findings[0].remediation


def test_missing_data_path_left_to_storage_data():
    _, [f] = _run(_ok_outputs(disk_data_0=CommandOutput(stdout="path=/data/gpt\n", rc=1, stderr="stat: cannot read ...: No such file or directory\n")))
    assert f.status is Status.PASS


@pytest.mark.parametrize("name", ["disk_checkpoint", "disk_write"])
def test_hanging_stat_is_parse_error(name):
    # a stale NFS mount: statfs never returns; the remote timeout ends it
    with pytest.raises(ParseError, match="timed out"):
        check.parse(_ok_outputs(**{name: CommandOutput(stdout="path=/ckpt\n", rc=124, timed_out=True, duration_s=30)}))


def test_unreadable_statfs_line_is_parse_error():
    with pytest.raises(ParseError):
        check.parse({"disk_checkpoint": CommandOutput(stdout="path=/ckpt\nstatfs=garbage\n")})


def test_no_paths_skips():
    facts = check.parse({})
    [f] = check.evaluate(facts, check.DEFAULTS, Node("n", "h"))
    assert f.status is Status.SKIP
