"""The program one srun step runs on every node (batch.step_program), run here by /bin/sh as task
0 of a step: it keeps only the stdin lines addressed to its task, runs each round (base64 of its
script) with the round's own nonce, gives up a round on `.`, and sends every frame body as base64
lines short enough for srun's labelled output. (Through real srun: tests/slurm/test_via_slurm.py.)"""
from __future__ import annotations

import base64
import gzip
import os
import select
import subprocess
import time

import psutil

from preflight.transport.batch import STEP_HELLO, STEP_LINE, FrameParser, ProbeSpec, new_nonce, step_program, \
    step_round


class Task:
    """The step program as srun's task `task`, stdin broadcast as srun does it (every line)."""

    def __init__(self, tmp_path, task: int = 0):
        env = dict(os.environ, SLURM_PROCID=str(task), SLURMD_NODENAME="nodeA", TMPDIR=str(tmp_path))
        self.proc = subprocess.Popen(["/bin/sh", "-c", step_program()], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)
        self.lines: list[bytes] = []
        self._buf = b""

    def send(self, task: int, payload: str) -> None:
        self.proc.stdin.write(f"{task} {payload}\n".encode())
        self.proc.stdin.flush()

    def round(self, task: int, probes: list[ProbeSpec]) -> str:
        nonce = new_nonce()
        self.send(task, step_round(probes, nonce))
        return nonce

    def read_until(self, done, timeout: float = 20.0) -> None:
        end = time.monotonic() + timeout
        while not done() and time.monotonic() < end:
            r, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if r:
                data = os.read(self.proc.stdout.fileno(), 65536)
                if not data:
                    return
                self._buf += data
                *new, self._buf = self._buf.split(b"\n")
                self.lines += new

    def frames(self, nonce: str, probes: list[ProbeSpec]) -> dict:
        """What the client's demultiplexer does with this task's lines: `@@PF:` lines as they are,
        the others decoded from base64."""
        p = FrameParser(nonce, probes)
        out = {}
        for line in self.lines:
            data = line + b"\n" if line.startswith(b"@@PF:") else base64.b64decode(line, validate=True)
            out.update({probes[i].key: o for i, o in p.feed(data)})
        return out

    def close(self) -> int:
        self.proc.stdin.close()
        return self.proc.wait(20)


def test_runs_its_own_rounds_and_ignores_the_other_tasks(tmp_path):
    t = Task(tmp_path, task=0)
    try:
        t.read_until(lambda: t.lines)
        assert t.lines[0] == STEP_HELLO + b"0 nodeA"
        marker = tmp_path / "other-task-ran"
        t.round(1, [ProbeSpec("x", f"touch {marker}", 5)])  # for task 1: never run here
        probes = [ProbeSpec("a", "echo one; echo err >&2; exit 4", 5), ProbeSpec("b", "printf two", 5)]
        nonce = t.round(0, probes)
        t.read_until(lambda: len(t.frames(nonce, probes)) == 2)
        out = t.frames(nonce, probes)
        assert (out["a"].stdout, out["a"].stderr, out["a"].rc) == ("one\n", "err\n", 4)
        assert out["b"].stdout == "two"
        assert not marker.exists()
    finally:
        assert t.close() == 0


def test_long_and_binary_output_travels_as_short_base64_lines(tmp_path):
    t = Task(tmp_path)
    try:
        cmd = "head -c 5000 /dev/zero | tr '\\0' y; printf '\\377\\001'"
        probes = [ProbeSpec("a", cmd, 5)]
        nonce = t.round(0, probes)
        t.read_until(lambda: len(t.frames(nonce, probes)) == 1)
        # the byte that is not UTF-8 kept readable; the stray control character removed (transport/clean.py)
        assert t.frames(nonce, probes)["a"].stdout == "y" * 5000 + "\\xff"
        assert max(len(line) for line in t.lines) <= STEP_LINE  # srun's label splits at 1024
    finally:
        t.close()


def test_a_command_with_newlines_stays_in_its_own_task(tmp_path):
    """A value with a newline in task 1's command cannot start a line addressed to task 0: each
    round is one base64 line."""
    t = Task(tmp_path)
    try:
        marker = tmp_path / "injected"
        evil = base64.b64encode(gzip.compress(f"pf 0 5 - 'touch {marker}'\n".encode())).decode()
        t.round(1, [ProbeSpec("x", f"echo 'a\n0 {evil}\n'", 5)])
        probes = [ProbeSpec("a", "echo fine", 5)]
        nonce = t.round(0, probes)
        t.read_until(lambda: len(t.frames(nonce, probes)) == 1)
        assert t.frames(nonce, probes)["a"].stdout == "fine\n"
        assert not marker.exists()
    finally:
        t.close()


def test_abort_kills_the_running_probe_and_a_later_round_ignores_its_frame(tmp_path):
    t = Task(tmp_path)
    after = tmp_path / "after-abort"
    try:
        old = [ProbeSpec("s", "sleep 30", 40), ProbeSpec("t", f"touch {after}", 5)]
        t.round(0, old)
        end = time.monotonic() + 10
        while time.monotonic() < end and not _sleeping(t.proc.pid):
            time.sleep(0.1)
        assert _sleeping(t.proc.pid)
        t.send(0, ".")
        probes = [ProbeSpec("a", "echo next", 5)]
        nonce = t.round(0, probes)
        t.read_until(lambda: len(t.frames(nonce, probes)) == 1)
        out = t.frames(nonce, probes)
        assert out == {"a": out["a"]} and out["a"].stdout == "next\n"  # the killed sleep's frame is noise
        assert not _sleeping(t.proc.pid) and not after.exists()  # the rest of the aborted round skipped
    finally:
        t.close()


def test_stdin_eof_kills_what_runs_and_ends_the_task(tmp_path):
    t = Task(tmp_path)
    t.round(0, [ProbeSpec("s", "sleep 30", 40)])
    end = time.monotonic() + 10
    while time.monotonic() < end and not _sleeping(t.proc.pid):
        time.sleep(0.1)
    assert _sleeping(t.proc.pid)
    kids = psutil.Process(t.proc.pid).children(recursive=True)
    t0 = time.monotonic()
    t.close()
    assert time.monotonic() - t0 < 10
    time.sleep(0.5)
    assert [k.pid for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE] == []
    assert not any(p.name.startswith(".preflight") for p in tmp_path.iterdir())  # its directory removed


def _sleeping(pid: int) -> bool:
    try:
        return any(p.name() == "sleep" for p in psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return False
