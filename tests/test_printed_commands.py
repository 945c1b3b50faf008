"""Contract: a command preflight prints for the operator to paste (a remediation's `...`, the fix's
manual steps) keeps every node or inventory value one quoted word (issue 29, finding 9).

The remediations that name a node's value (an interface or InfiniBand device name, a data path, a
login user, an interpreter path, a version a node reported, an env file, a master address) are
built here with each trap of tests/test_probe_quoting.py in that value; every backticked command in
them then runs in a real `sh` in a scratch directory whose PATH holds only a stub for each tool
(they do nothing) and `touch`. The test fails when the marker file appears: a value ran as code.
"""
from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from preflight.checks import (env_comm, hccn_health, hccn_link, hccn_optical, sw_consistency, storage_consistency,
                              storage_data)
from preflight.net.iproute import Address, Interface
from preflight.node import Node
from tests.test_probe_quoting import TRAPS




def ticked(text: str) -> list[str]:
    """The `...` commands of a text; a backtick inside a command's single or double quotes (a
    quoted value holding one) is part of the command, not its end."""
    out, cur, quote, inside = [], [], "", False
    for c in text:
        if not inside:
            inside = c == "`"
            continue
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "`":
            out.append("".join(cur))
            cur, inside = [], False
            continue
        cur.append(c)
    return out

TOOLS = ("ip", "ibstat", "rsync", "chmod", "setfacl", "find", "ls", "ln", "git", "bash", "pip", "cat", "dmesg", "grep")
# what a printed command begins with: a tool, a shell builtin, or a quoted interpreter path
PRINTED = set(TOOLS) | {"export", "source", "for"}


def remediations(t: str, scratch: Path) -> dict[str, str]:
    """label -> remediation text, each built with the trap `t` in the value it names."""
    node = Node("n1", "h", python=f"{scratch}/py{t}/python3", ascend_home=f"{scratch}/asc{t}")
    down = Interface(f"eth{t}", ("BROADCAST",), "DOWN", (Address("10.0.0.5", 24, "inet"),))
    up = Interface(f"ib{t}", ("UP", "LOWER_UP"), "UP", (Address("10.0.1.5", 24, "inet"),))
    out = {}
    facts = env_comm.Facts(env={"HCCL_IF_IP": "10.0.0.5"}, interfaces=(down, up))
    out["env.comm if_ip down"] = env_comm.rule_if_ip(facts, env_comm.DEFAULTS, node)[0].remediation
    gloo = env_comm.Facts(env={"GLOO_SOCKET_IFNAME": down.name}, interfaces=(down, up))
    out["env.comm gloo down"] = env_comm.rule_gloo(gloo, env_comm.DEFAULTS, node)[0].remediation
    out["storage.consistency copy"] = storage_consistency._fix(f"{scratch}/data{t}", [f"node{t}"])
    for state in ("missing", "broken_link"):
        (what, fix), = storage_data._problems(storage_data.DataPath(f"{scratch}/d{t}", state=state), "u")
        out[f"storage.data {state}"] = fix
    unreadable = storage_data.DataPath(f"{scratch}/d{t}", kind="dir", readable=False, unreadable=("x",))
    out.update({f"storage.data access {i}": fix for i, (_, fix) in
                enumerate(storage_data._problems(unreadable, f"user{t}"))})
    out["sw.consistency pip"] = sw_consistency._fix("torch", f"2.1{t}", node.python)
    # the hccn_tool path comes from the inventory's ascend_home
    link = hccn_link.Facts(None, None, {0: hccn_link.DeviceLink("DOWN")}, {0: (0, 0)})
    out["hccn.link down"] = hccn_link.evaluate(link, hccn_link.DEFAULTS, node)[0].remediation
    health = hccn_health.Facts(None, None, {0: hccn_health.DeviceHealth("Socket failed")}, {0: (0, 0)})
    out["hccn.health"] = hccn_health.evaluate(health, hccn_health.DEFAULTS, node)[0].remediation
    optical = hccn_optical.Facts(None, None, devices={0: hccn_optical.DeviceOptical(None, error="x")}, chips={0: (0, 0)})
    out["hccn.optical"] = hccn_optical.evaluate(optical, hccn_optical.DEFAULTS, node)[0].remediation
    return out


@pytest.mark.parametrize("trap", sorted(TRAPS))
def test_printed_commands_keep_hostile_values_one_word(tmp_path, trap):
    marker = tmp_path / "M"
    t = TRAPS[trap].replace("{M}", str(marker))
    scratch = tmp_path / "s"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in TOOLS:
        (bindir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bindir / tool).chmod(0o755)
    (bindir / "touch").symlink_to("/usr/bin/touch")
    found = 0
    for label, text in remediations(t, scratch).items():
        for command in ticked(text or ""):
            if command.split(" ", 1)[0] not in PRINTED and not command.startswith("'"):
                continue  # a value's own backticks in the prose around a command (not a command)
            found += 1
            subprocess.run(["/bin/sh", "-c", command], cwd=tmp_path, env={"PATH": str(bindir)}, capture_output=True,
                           timeout=20)
            assert not marker.exists(), f"{label}: a value ran as code in the printed command {command!r}"
    assert found >= 10


def test_a_quoted_interface_name_reads_back_as_itself():
    """The quoting is the shell's own: the printed word splits back into the value."""
    down = Interface("eth0 $(x)", ("BROADCAST",), "DOWN", (Address("10.0.0.5", 24, "inet"),))
    fix = env_comm.rule_if_ip(env_comm.Facts(env={"HCCL_IF_IP": "10.0.0.5"}, interfaces=(down,)),
                              env_comm.DEFAULTS, Node("n1", "h"))[0].remediation
    assert shlex.split(ticked(fix)[0]) == ["ip", "link", "set", "eth0 $(x)", "up"]
