"""The pure parts of `preflight fix`: editing an assignment, reading files back, the scripts' shape."""
from __future__ import annotations

import subprocess

import pytest

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
    paths = [str(f), str(tmp_path / "link"), str(tmp_path / "none")]
    out = subprocess.run(["sh", "-c", fix.read_command(paths)], capture_output=True, text=True).stdout
    got = fix.parse_read(out, paths)
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
    assert f.read_bytes() == new  # no step named as applied: the rollback undoes nothing
    res = subprocess.run(["sh", "-c", plan.script(rollback=True), "rollback", "0"], capture_output=True, text=True)
    assert res.returncode == 0 and fix.applied_steps(res.stdout) == [0]
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


def test_privilege_is_the_steps_declared_need_never_the_text():
    from preflight.checkapi import Probe, sh
    from preflight.job.remote import spec
    from preflight.node import Node
    sudo = Node("n", "h", user="ops", become="sudo")
    assert spec(sudo, Probe(sh("echo sysctl"), None, False), 9).root is False  # the word is not the need
    declared = spec(sudo, Probe(sh("true"), None, True), 9)
    assert declared.root and declared.become == "root"
    assert spec(Node("n", "h", user="ops"), Probe(sh("true"), None, True), 9).become == ""  # no become: not run
    with pytest.raises(TypeError):
        spec(sudo, Probe("echo plain text", None, True), 9)  # shell text not built by sh() is refused


def _facts(env, *ifaces):
    from preflight.checks import env_comm
    from preflight.net.iproute import Address, Interface
    return env_comm.Facts(env=env, interfaces=tuple(
        Interface(name, ("UP", "LOWER_UP") if up else ("BROADCAST",), "UP" if up else "DOWN", (Address(ip, 24, "inet"),))
        for name, ip, up in ifaces))


def test_a_value_is_never_corrected_to_itself():
    """A wrong HCCL_IF_IP: HCCL's choice asked with it set is that same address (the old fix wrote it
    again); asked with it unset, the node's usable NIC, or nothing when it has none."""
    from preflight.node import Node
    node = Node("n1", "h", env_files=("/job.env",))
    content = {"/job.env": b"export HCCL_IF_IP=10.9.9.9\n"}
    foreign = fix.plan_node(node, _facts({"HCCL_IF_IP": "10.9.9.9"}, ("eth0", "10.0.0.5", True)), None, content)
    assert [s.what.split(" (")[0] for s in foreign.steps] == ["/job.env: HCCL_IF_IP=10.0.0.5"]
    down = fix.plan_node(node, _facts({"HCCL_IF_IP": "10.9.9.9"}, ("eth1", "10.0.0.5", False)), None, content)
    assert down.steps == [] and "no usable interface" in down.manual[0], down.manual


def test_one_nodes_address_is_never_written_into_a_file_other_nodes_list():
    from preflight.node import Node
    node = Node("n1", "h", env_files=("/shared/job.env",))
    facts = _facts({"HCCL_IF_IP": "10.9.9.9"}, ("eth0", "10.0.0.5", True))
    content = {"/shared/job.env": b"export HCCL_IF_IP=10.9.9.9\n"}
    alone = fix.plan_node(node, facts, None, content)
    assert [s.what.split(":")[0] for s in alone.steps] == ["/shared/job.env"]  # its own file: corrected
    shared = fix.plan_node(node, facts, None, content, {"/shared/job.env": ("n2", "n3")})
    assert shared.steps == [] and "also an env file of n2, n3" in shared.manual[0]


def test_plan_files_are_refused_through_links_or_foreign_hands(tmp_path):
    import os
    from preflight.job import fixplan
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(fixplan.Untrusted, match="a link is refused"):
        fixplan.ensure_dir(str(tmp_path / "link"))
    fixplan.ensure_dir(str(real))
    plan = fix.NodeFix("n1", [fix.Step("x", fix._sysctl("1"), fix._sysctl(""), root=True)])
    rec = fixplan.write(str(real), plan)
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in real.iterdir()} == \
        {"n1.fix.sh": "0o600", "n1.rollback.sh": "0o600", "n1.plan.json": "0o600"}
    assert fixplan.load(str(real), "n1") == rec and rec.needs_root([0]) and not rec.needs_root([])
    os.replace(real / "n1.rollback.sh", real / "elsewhere.sh")
    (real / "n1.rollback.sh").symlink_to(real / "elsewhere.sh")
    with pytest.raises(fixplan.Untrusted, match="a link is refused"):
        fixplan.verified_rollback(str(real), rec)
    (real / "n1.plan.json").chmod(0o620)
    with pytest.raises(fixplan.Untrusted, match="writable by group or others"):
        fixplan.load(str(real), "n1")
