"""The kernel-log probe (preflight/nvidia/probes.KERNEL_LOG) through a real shell, in a UTF-8
locale, over a kernel log whose Xid line holds bytes that are not UTF-8 (a driver prints a process
name as it finds it). GNU grep in a UTF-8 locale then prints `grep: (standard input): binary file
matches` instead of the line, and the Xid 79 would be lost; the probe runs under LC_ALL=C with
`grep -a`, so the line arrives and kernlog reads the Xid."""
from __future__ import annotations

import os
import subprocess

import pytest

from preflight.nvidia import kernlog, probes

LOG = (b"[   12.3] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=tr\xff\xfein, GPU has fallen off the bus.\n"
       b"[   13.0] usb 1-1: new device\n")


@pytest.mark.parametrize("tool", ["dmesg", "journalctl"])
def test_an_xid_line_with_a_non_utf8_byte_arrives_whole(tmp_path, tool):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "log").write_bytes(LOG)
    if tool == "dmesg":
        (bin_dir / "dmesg").write_text(f"#!/bin/sh\ncat {tmp_path / 'log'}\n")
    else:  # dmesg refused (kernel.dmesg_restrict=1), journalctl readable
        (bin_dir / "dmesg").write_text("#!/bin/sh\necho 'dmesg: read kernel buffer failed: Operation not permitted' >&2\nexit 1\n")
        (bin_dir / "journalctl").write_text(f"#!/bin/sh\ncat {tmp_path / 'log'}\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}", "LC_ALL": "C.UTF-8",
           "LANG": "C.UTF-8"}
    p = subprocess.run(["sh", "-c", probes.KERNEL_LOG], capture_output=True, env=env, timeout=30)
    assert p.returncode == 0, p.stderr
    assert b"binary file matches" not in p.stdout + p.stderr
    head, _, rest = p.stdout.decode("utf-8", "surrogateescape").partition("\n")
    assert head.startswith("@@source " + tool)
    assert "\udcff\udcfe" in rest and "usb" not in rest  # the line itself, byte kept; the filter still filters
    [event] = kernlog.parse(rest)
    assert event.kind == "xid" and event.code == 79 and event.pci == "0000:3b:00"
