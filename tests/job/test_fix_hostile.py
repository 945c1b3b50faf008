"""Contract: no inventory or node value reaches a node's shell as shell text in what `preflight fix`
sends (the read command, the fix script, the rollback script), and no free text is in a script.

Each trap of tests/test_probe_quoting.py goes into every value `fix` takes from the inventory (the
env file's path) or from a node (the variable's current value, which env.comm's message and the
step's description quote; the training NIC's name; the env file's other bytes; the sysctl's text).
The three commands then run in a real `sh` over a scratch directory: the test fails when a marker
file appears, when the file is not changed to the quoted value and back byte for byte, or when a
description (it holds the newline trap) appears in a script.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from preflight.checks import env_comm
from preflight.job import fix
from preflight.net.iproute import Address, Interface
from preflight.node import Node
from tests.test_probe_quoting import TRAPS


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", script, "preflight", *args], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("trap", sorted(TRAPS))
def test_fix_scripts_keep_hostile_values_as_data(tmp_path, trap):
    marker = tmp_path / "M"
    t = TRAPS[trap].replace("{M}", str(marker))
    env_file = tmp_path / f"envdir-{t}" / "job.env"  # inventory: the path
    env_file.parent.mkdir(parents=True)
    original = (f"# {t}\n".encode() + b"export GLOO_SOCKET_IFNAME=eth9\n" + t.encode() + b"\n")  # node: the bytes
    env_file.write_bytes(original)
    node = Node("node01", "10.0.0.1", env_files=(str(env_file),))

    read = run(fix.read_command([str(env_file)]))
    files = fix.parse_read(read.stdout, [str(env_file)])
    assert files[str(env_file)] == original
    nic = "eth0" + t.replace("\n", "")  # node: an interface name (one line of `ip addr`)
    facts = env_comm.Facts(env={"GLOO_SOCKET_IFNAME": "eth9" + t},  # node: the launch environment's value
                           interfaces=(Interface(nic, ("UP", "LOWER_UP"), "UP", (Address("10.0.0.1", 24, "inet"),)),))
    plan = fix.plan_node(node, facts, None, files)
    assert len(plan.steps) == 1, plan.manual
    assert t in plan.steps[0].what or "\n" in t  # the description quotes the node's value ...
    for script in (plan.script(), plan.script(rollback=True)):
        assert plan.steps[0].what not in script  # ... and lives beside the script, never inside it
        assert not any(line.lstrip().startswith("#") for line in script.splitlines())  # no comment line

    applied = run(plan.script())
    assert applied.returncode == 0, applied.stderr
    assert fix.applied_steps(applied.stdout) == [0]
    assert env_file.read_bytes() == fix.edit(original, "GLOO_SOCKET_IFNAME", nic)
    back = run(plan.script(rollback=True), "0")
    assert back.returncode == 0, back.stderr
    assert env_file.read_bytes() == original
    assert not marker.exists(), f"a hostile value ran as code ({trap})"
