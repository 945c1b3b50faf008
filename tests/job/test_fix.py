"""The pure parts of `preflight fix`: editing an assignment, reading files back, the scripts' shape."""
from __future__ import annotations

import subprocess

from preflight.job import fix


def test_edit_changes_only_plain_assignments_of_that_variable():
    old = b"export GLOO_SOCKET_IFNAME=eth9  # old\nGLOO_SOCKET_IFNAME_X=1\n  GLOO_SOCKET_IFNAME='a b'\necho $GLOO_SOCKET_IFNAME\n"
    new = fix.edit(old, "GLOO_SOCKET_IFNAME", "eth0")
    assert new == b"export GLOO_SOCKET_IFNAME=eth0  # old\nGLOO_SOCKET_IFNAME_X=1\n  GLOO_SOCKET_IFNAME=eth0\necho $GLOO_SOCKET_IFNAME\n"
    assert fix.edit(b"export A=1\n", "GLOO_SOCKET_IFNAME", "eth0") is None
    assert fix.edit(b"export HCCL_SOCKET_IFNAME=eth\n", "HCCL_SOCKET_IFNAME", "=eth0") == b"export HCCL_SOCKET_IFNAME==eth0\n"  # docs/ENV.md §A.2: two signs


def test_read_command_round_trips_bytes(tmp_path):
    f = tmp_path / "job.env"
    f.write_bytes(b"export X=1\n\xff\x00tail")
    (tmp_path / "link").symlink_to(f)
    out = subprocess.run(["sh", "-c", fix.read_command([str(f), str(tmp_path / "link"), str(tmp_path / "none")])],
                         capture_output=True, text=True).stdout
    got = fix.parse_read(out)
    assert got[str(f)] == b"export X=1\n\xff\x00tail"
    assert got[str(tmp_path / "link")] is None and got[str(tmp_path / "none")] is None
    assert fix.RESERVED in got


def test_scripts_replace_atomically_and_roll_back_byte_for_byte(tmp_path):
    f = tmp_path / "job.env"
    old = b"export GLOO_SOCKET_IFNAME=eth9\n"
    f.write_bytes(old)
    f.chmod(0o640)
    new = fix.edit(old, "GLOO_SOCKET_IFNAME", "eth0")
    plan = fix.NodeFix("n1", [fix.Step("gloo", fix._replace_file(str(f), old, new), fix._replace_file(str(f), new, old))])
    assert subprocess.run(["sh", "-c", plan.script()], capture_output=True).returncode == 0
    assert f.read_bytes() == new and oct(f.stat().st_mode & 0o777) == "0o640"
    assert subprocess.run(["sh", "-c", plan.script(rollback=True)], capture_output=True).returncode == 0
    assert f.read_bytes() == old


def test_a_link_is_never_replaced(tmp_path):
    target = tmp_path / "real.env"
    target.write_bytes(b"export GLOO_SOCKET_IFNAME=eth9\n")
    link = tmp_path / "job.env"
    link.symlink_to(target)
    step = fix._replace_file(str(link), target.read_bytes(), b"x")
    res = subprocess.run(["sh", "-c", step], capture_output=True, text=True)
    assert res.returncode == 1 and "not a regular file; not touched" in res.stderr
    assert link.is_symlink() and target.read_bytes() == b"export GLOO_SOCKET_IFNAME=eth9\n"


def test_become_only_when_needed():
    from preflight.node import Node
    assert fix.wrapped("true", Node("n", "h", user="ops"), root=True).startswith("sudo -n sh -c ")
    assert fix.wrapped("true", Node("n", "h", user="ops"), root=False).startswith("sh -c ")
    assert fix.wrapped("true", Node("n", "h", user="root"), root=True).startswith("sh -c ")
