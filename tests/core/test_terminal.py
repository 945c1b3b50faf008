"""What a person at a terminal sees, byte by byte (issue 12, item 9): colour and escape codes only
when wanted, Ctrl-C at any moment, and a warning for a paramiko open to CVE-2023-48795.

stdout and stderr each get their own pty (python's pty module), so every byte the process writes
to either is read back exactly as a terminal would receive it.
"""
from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import loopback_listener

from .test_cli import free_port, refused_inventory  # noqa: F401 - a fixture, shared

TIMEOUT = 60


def env_with(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "PREFLIGHT_DEBUG")}
    env.update(TERM="xterm-256color", COLUMNS="120")
    env.update(extra)
    return env


def on_ptys(args: list[str], env: dict[str, str], stdout_tty: bool = True) -> tuple[int, bytes, bytes]:
    """Run preflight with stderr (and stdout unless told) on a pty; every byte of both, and rc."""
    masters, slaves = [], []
    for _ in range(2 if stdout_tty else 1):
        m, s = pty.openpty()
        masters.append(m)
        slaves.append(s)
    out_target = slaves[0] if stdout_tty else subprocess.PIPE
    err_target = slaves[-1]
    proc = subprocess.Popen([sys.executable, "-m", "preflight.cli", *args], stdin=subprocess.DEVNULL,
                            stdout=out_target, stderr=err_target, env=env)
    for s in slaves:
        os.close(s)
    got = {m: b"" for m in masters}
    open_fds = set(masters)
    deadline = time.monotonic() + TIMEOUT
    piped = b""
    while open_fds and time.monotonic() < deadline:
        ready, _, _ = select.select(list(open_fds), [], [], 0.5)
        for m in ready:
            try:
                chunk = os.read(m, 65536)
            except OSError:  # EIO: the child closed its side
                chunk = b""
            if chunk:
                got[m] += chunk
            else:
                open_fds.discard(m)
    if not stdout_tty:
        piped = proc.stdout.read()
    rc = proc.wait(timeout=TIMEOUT)
    for m in masters:
        os.close(m)
    out = got[masters[0]] if stdout_tty else piped
    return rc, out, got[masters[-1]]


RUN = ["run", "--ssh-config", "/nonexistent-ssh-config"]


def test_a_colour_terminal_gets_escape_codes(refused_inventory):
    """The control: what the other cases must not contain is really written by default."""
    rc, out, err = on_ptys([*RUN, str(refused_inventory)], env_with())
    assert rc == 3 and b"INCOMPLETE" in out
    assert b"\x1b[1" in out  # bold
    assert b"\r\x1b[Kpreflight: 1/1 nodes done" in err


@pytest.mark.parametrize("how", ["NO_COLOR=1", "TERM=dumb", "--no-color"])
def test_no_escape_code_at_all_when_colour_is_off(refused_inventory, how):
    extra, args = ({}, ["--no-color"]) if how == "--no-color" else (dict([how.split("=")]), [])
    rc, out, err = on_ptys([*RUN, str(refused_inventory), *args], env_with(**extra))
    assert rc == 3 and b"INCOMPLETE" in out and b"n1" in out
    assert b"\x1b" not in out, out
    assert b"\x1b" not in err and b"\rpreflight: 1/1 nodes done, 1 failing" in err, err


def test_force_color_colours_even_a_pipe(refused_inventory):
    rc, out, _ = on_ptys([*RUN, str(refused_inventory)], env_with(FORCE_COLOR="1"), stdout_tty=False)
    assert rc == 3 and b"\x1b[1" in out and b"INCOMPLETE" in out


def test_no_color_never_reaches_an_output_file(refused_inventory, tmp_path):
    out_file = tmp_path / "r.txt"
    rc, _, _ = on_ptys([*RUN, str(refused_inventory), "--output", str(out_file)], env_with(FORCE_COLOR="1"))
    assert rc == 3 and b"\x1b" not in out_file.read_bytes()


OPENAT = {"x86_64": "257", "aarch64": "56"}
WRITE = {"x86_64": "1", "aarch64": "64"}


def blocked_in(pid: int, syscall: dict[str, str]) -> bool:
    """The process sits in that system call, three times in a row 0.2 s apart (not a passing call)."""
    nr = syscall.get(os.uname().machine)
    for _ in range(3):
        try:
            call = Path(f"/proc/{pid}/syscall").read_text().split()[0]
        except (OSError, IndexError):
            return False
        if call != nr:
            return False
        time.sleep(0.2)
    return True


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="syscall number table")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_while_the_inventory_loads_exits_130(tmp_path, signum):
    """A FIFO as the inventory: the load blocks in open() until Ctrl-C (or SIGTERM) comes; either is
    SPEC's 130 with the line, never click's "Aborted!" or a silent 143."""
    fifo = tmp_path / "inv.yaml"
    os.mkfifo(fifo)
    proc = subprocess.Popen([sys.executable, "-m", "preflight.cli", *RUN, str(fifo)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_with())
    try:
        t_end = time.monotonic() + TIMEOUT
        while not blocked_in(proc.pid, OPENAT) and time.monotonic() < t_end and proc.poll() is None:
            time.sleep(0.1)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (proc.returncode, err)
    assert b"Aborted" not in err and b"Traceback" not in err and b"interrupted" in err


@pytest.fixture
def silent_port():
    """A loopback port that accepts and never speaks (a hung sshd); the event is set once a client came."""
    with loopback_listener(hold=True) as found:
        yield found


def many_nodes(tmp_path: Path, silent: int) -> Path:
    """300 refused nodes (a report several pipe buffers long) and one silent one (a run that lasts)."""
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n" + "".join(f"  - name: n{i}\n    host: 127.0.0.1\n    port: {free_port()}\n"
                                         for i in range(300))
                   + f"  - name: silent\n    host: 127.0.0.1\n    port: {silent}\n    banner_timeout: 300\n")
    return inv


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="syscall number table")
def test_second_ctrl_c_forces_the_exit(tmp_path, silent_port):
    """Ctrl-C during the run stops it and writes the partial report; its reader has stopped reading
    (a paused pager), so the write blocks: the second Ctrl-C ends the process now."""
    port, connected = silent_port
    proc = subprocess.Popen([sys.executable, "-m", "preflight.cli", *RUN, str(many_nodes(tmp_path, port)),
                             "--format", "json", "--forks", "301"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_with())
    try:
        assert connected.wait(TIMEOUT), "preflight never reached the silent node"
        proc.send_signal(signal.SIGINT)  # the run ends, the report's write blocks on the full pipe
        t_end = time.monotonic() + TIMEOUT
        while not blocked_in(proc.pid, WRITE) and time.monotonic() < t_end:
            time.sleep(0.1)
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=10)  # ended without anyone reading its stdout
        proc.stdout.close()
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 130 and b"interrupted twice" in err and b"Traceback" not in err, (rc, err)


def test_ctrl_c_while_the_report_is_written_exits_130_at_once(tmp_path):
    """Outside a run (here: writing the report into a pipe nobody reads) one Ctrl-C is enough."""
    proc = subprocess.Popen([sys.executable, "-m", "preflight.cli", *RUN, str(many_nodes(tmp_path, free_port())),
                             "--format", "json", "--forks", "301"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_with())
    try:
        t_end = time.monotonic() + TIMEOUT
        while not blocked_in(proc.pid, WRITE) and time.monotonic() < t_end:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=10)
        proc.stdout.close()
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 130 and b"interrupted" in err and b"Traceback" not in err, (rc, err)


def run_with_paramiko_version(version: str, inventory: Path) -> subprocess.CompletedProcess:
    code = ("import sys, paramiko; paramiko.__version__ = sys.argv[1]; sys.argv = ['preflight', *sys.argv[2:]]; "
            "from preflight.cli import entry; entry()")
    return subprocess.run([sys.executable, "-c", code, version, *RUN, str(inventory), "--format", "json"],
                          capture_output=True, text=True, timeout=TIMEOUT, env=env_with())


def test_paramiko_older_than_3_4_is_warned_about_naming_the_cve(refused_inventory):
    old = run_with_paramiko_version("3.3.1", refused_inventory)
    assert old.returncode == 3
    assert "CVE-2023-48795" in old.stderr and "paramiko 3.3.1" in old.stderr
    assert "CVE" not in run_with_paramiko_version("3.4.0", refused_inventory).stderr
