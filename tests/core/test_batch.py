"""The framed batch (preflight.transport.batch) run for real by /bin/sh, locally.

What a check relies on: each probe's stdout, stderr, rc and duration come back separately whatever
the probe prints; a hung probe is timed out and gone; huge output is capped, never a deadlock;
cancelling leaves nothing running and no temp dir behind.
"""
from __future__ import annotations

import glob
import os
import subprocess
import threading
import time

import pytest

from preflight.model import CommandOutput
from preflight.node import Node
from preflight.transport.batch import (DEFAULT_CAP, TRUNCATED_MARK, FrameParser, ProbeSpec, driver_script,
                                       new_nonce, remote_command)
from preflight.transport.local import LocalTransport

MiB = 1 << 20


def run_driver(specs: list[ProbeSpec], cap: int = DEFAULT_CAP, limit_s: float = 30.0,
               nonce: str | None = None) -> tuple[dict[str, CommandOutput], bytes, FrameParser]:
    """Run the driver script with /bin/sh -c, stdin held open like an SSH channel until the driver
    says it is ready for another round (then EOF ends it), bounded by limit_s."""
    nonce = nonce or new_nonce()
    proc = subprocess.Popen(["/bin/sh", "-c", driver_script(specs, nonce, cap)], stdin=subprocess.PIPE,  # $TMPDIR: fixture
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    killer = threading.Timer(limit_s, proc.kill)
    killer.start()
    ready = f"@@PF:{nonce}:R\n".encode()
    raw = b""
    try:
        while ready not in raw and (chunk := proc.stdout.read1(65536)):
            raw += chunk
        proc.stdin.close()
        raw += proc.stdout.read()
    finally:
        killer.cancel()
        proc.stdin.close()
        proc.wait(timeout=10)
        proc.stdout.close()
        proc.stderr.close()
    parser = FrameParser(nonce, specs, cap)
    outputs = {specs[i].key: out for i, out in parser.feed(raw)}
    return outputs, raw, parser


def local_run(specs: list[ProbeSpec], cancel: threading.Event | None = None) -> dict[str, CommandOutput]:
    cancel = cancel or threading.Event()
    session = LocalTransport().connect(Node("n1", "localhost"), cancel)
    try:
        return session.run(specs, cancel)
    finally:
        session.close()


def processes_matching(marker: str) -> list[str]:
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, timeout=10).stdout
    return [line for line in ps.splitlines() if marker in line and "ps -eo" not in line]


def wait_gone(marker: str, within_s: float = 10.0) -> list[str]:
    end = time.monotonic() + within_s
    while True:
        left = processes_matching(marker)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def no_tempdir_left(tmp_path, monkeypatch):
    """The driver makes its dir under $TMPDIR: point it at this test's own folder (other runs on the
    machine use /tmp too) and check that nothing named .preflight.* is left there."""
    tmp = tmp_path / "remote-tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    yield tmp
    end = time.monotonic() + 2
    while glob.glob(str(tmp / ".preflight.*")) and time.monotonic() < end:
        time.sleep(0.05)
    assert glob.glob(str(tmp / ".preflight.*")) == [], "the batch left its temp dir behind"


# ---------------------------------------------------------------- separation

def test_stdout_stderr_rc_duration_are_separate(no_tempdir_left):
    specs = [ProbeSpec("a", "echo out-a; echo err-a >&2; exit 3", 10),
             ProbeSpec("b", "printf 'no newline'", 10),
             ProbeSpec("c", "sleep 0.3; echo late", 10),
             ProbeSpec("d", "echo only-err >&2", 10),
             ProbeSpec("tmp", 'ls -a "$TMPDIR"', 10)]
    out, _, _ = run_driver(specs)
    assert ".preflight." in out["tmp"].stdout, "the driver's temp dir is not where the fixture looks"
    assert set(out) == {"a", "b", "c", "d", "tmp"}
    a, b, c, d = out["a"], out["b"], out["c"], out["d"]
    assert (a.stdout, a.stderr, a.rc, a.error, a.timed_out) == ("out-a\n", "err-a\n", 3, None, False)
    assert (b.stdout, b.stderr, b.rc) == ("no newline", "", 0)
    assert (c.stdout, c.rc) == ("late\n", 0) and 0.25 <= c.duration_s < 5
    assert (d.stdout, d.stderr, d.rc) == ("", "only-err\n", 0)
    assert a.duration_s < 5 and not any(o.truncated for o in out.values())


def test_same_through_local_transport(no_tempdir_left):
    out = local_run([ProbeSpec("x", "echo hi; echo ho >&2; exit 7", 10), ProbeSpec("y", "true", 10)])
    assert (out["x"].stdout, out["x"].stderr, out["x"].rc) == ("hi\n", "ho\n", 7)
    assert out["y"].ok and out["y"].stdout == ""


def test_quoting_reaches_the_probe_literally():
    cmd = """printf '%s|' "it's" '$(id)' '`id`' "a  b"; printf '\\n'"""
    out, _, _ = run_driver([ProbeSpec("q", cmd, 10)])
    assert out["q"].stdout == "it's|$(id)|`id`|a  b|\n"


def test_probe_reading_stdin_gets_eof_not_the_batch():
    out, _, _ = run_driver([ProbeSpec("cat", "cat; echo done", 5), ProbeSpec("after", "echo still-here", 5)])
    assert out["cat"].stdout == "done\n" and out["cat"].rc == 0
    assert out["after"].stdout == "still-here\n"


def test_forged_frame_header_does_not_break_framing():
    """Header look-alikes inside a probe's output (other nonce, near-miss nonce, none) stay its output."""
    nonce = new_nonce()
    forged = (f"printf '@@PF:{'0' * 16}:B 1 0 1 2\\nXYZ\\n@@PF:{'0' * 16}:E\\n@@PF:{'0' * 16}:Z\\n'; "
              f"printf '@@PF:{nonce[:-1]}x:B 1 0 1 2\\nXYZ\\n@@PF:{nonce[:-1]}x:Z\\n'; "
              "printf '@@PF::B 1 0 1 2\\n@@PF::E\\n'; echo tail")
    specs = [ProbeSpec("forger", forged, 10), ProbeSpec("victim", "echo victim-out; exit 5", 10)]
    out, _, _ = run_driver(specs, nonce=nonce)
    assert out["forger"].stdout.endswith("tail\n") and "@@PF:" in out["forger"].stdout
    assert out["forger"].rc == 0
    assert (out["victim"].stdout, out["victim"].rc) == ("victim-out\n", 5)


def test_noise_outside_frames_is_kept_apart():
    nonce = new_nonce()
    specs = [ProbeSpec("a", "echo A", 5)]
    parser = FrameParser(nonce, specs)
    script_out = b"Welcome to node01 (motd)\n" + _frame(nonce, 0, 0, b"A\n", b"")
    got = list(parser.feed(script_out))
    assert [(i, o.stdout) for i, o in got] == [(0, "A\n")]
    assert b"motd" in parser.noise


# ---------------------------------------------------------------- timeouts and signals

def test_timeout_marks_timed_out_and_kills_the_probe(no_tempdir_left):
    marker = "sleep 37.125"
    t0 = time.monotonic()
    out, _, _ = run_driver([ProbeSpec("hang", marker, 1), ProbeSpec("next", "echo next", 5)], limit_s=20)
    assert time.monotonic() - t0 < 10
    h = out["hang"]
    assert h.timed_out and not h.ok and h.rc == 124 and "timed out" in (h.error or "")
    assert 0.9 <= h.duration_s < 4
    assert out["next"].stdout == "next\n", "a timed-out probe must not stop the ones after it"
    assert wait_gone(marker) == []


def test_timeout_kills_a_probe_that_ignores_sigterm(no_tempdir_left):
    marker = "sleep 38.25"
    out, _, _ = run_driver([ProbeSpec("stubborn", f"trap '' TERM; {marker}; echo survived", 1)], limit_s=20)
    s = out["stubborn"]
    assert s.timed_out and "survived" not in s.stdout
    assert wait_gone(marker) == []


def test_killed_by_signal_is_not_an_exit_code():
    out, _, _ = run_driver([ProbeSpec("k9", "kill -9 $$", 10), ProbeSpec("k15", "kill -TERM $$", 10),
                            ProbeSpec("ok", "exit 1", 10)])
    assert out["k9"].error == "killed by signal 9" and not out["k9"].timed_out
    assert out["k15"].error == "killed by signal 15" and not out["k15"].timed_out
    assert out["ok"].error is None and out["ok"].rc == 1


def test_plain_exit_above_128_is_not_a_signal():
    out, _, _ = run_driver([ProbeSpec("x", "exit 200", 10)])
    assert out["x"].rc == 200 and out["x"].error is None


# ---------------------------------------------------------------- size and bytes

def test_ten_mib_on_each_stream_is_capped_quickly(no_tempdir_left):
    cmd = "head -c 10485760 /dev/zero | tr '\\0' o; head -c 10485760 /dev/zero | tr '\\0' e >&2"
    t0 = time.monotonic()
    out = local_run([ProbeSpec("big", cmd, 30), ProbeSpec("after", "echo after", 5)])
    assert time.monotonic() - t0 < 20
    big = out["big"]
    assert big.truncated and big.rc == 0
    mark = TRUNCATED_MARK.format(cap=DEFAULT_CAP)
    assert big.stdout == "o" * DEFAULT_CAP + mark
    assert big.stderr == "e" * DEFAULT_CAP + mark
    assert out["after"].stdout == "after\n"


def test_small_cap():
    out, _, _ = run_driver([ProbeSpec("x", "printf 0123456789", 5), ProbeSpec("y", "printf ab", 5)], cap=4)
    assert out["x"].stdout == "0123" + TRUNCATED_MARK.format(cap=4) and out["x"].truncated
    assert out["y"].stdout == "ab" and not out["y"].truncated


def test_non_utf8_is_kept_readable_not_fatal():
    out, _, _ = run_driver([ProbeSpec("bin", "printf 'ok \\377\\376 \\344\\270 end'; printf '\\377' >&2", 5)])
    b = out["bin"]
    assert b.stdout == "ok \\xff\\xfe \\xe4\\xb8 end"  # each byte that is not UTF-8 kept readable, never U+FFFD
    assert b.stderr == "\\xff"


# ---------------------------------------------------------------- cancel

def test_cancel_returns_quickly_and_leaves_nothing_running(no_tempdir_left):
    marker = "sleep 41.375"
    cancel = threading.Event()
    timer = threading.Timer(0.5, cancel.set)
    timer.start()
    t0 = time.monotonic()
    try:
        out = local_run([ProbeSpec("first", "echo first", 5), ProbeSpec("hang", marker, 60),
                         ProbeSpec("never", "echo never", 5)], cancel)
    finally:
        timer.cancel()
    assert time.monotonic() - t0 < 10
    assert out["first"].stdout == "first\n" and out["first"].ok
    for key in ("hang", "never"):
        assert out[key].rc is None and out[key].error and "cancel" in out[key].error
    assert wait_gone(marker) == []


def test_client_gone_kills_the_batch(no_tempdir_left):
    """Closing stdin (what a dropped SSH channel does) makes the watcher kill the running probe."""
    marker = "sleep 43.5"
    proc = subprocess.Popen(["/bin/sh", "-c", driver_script([ProbeSpec("h", marker, 60)], new_nonce())],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 5
        while not processes_matching(marker) and time.monotonic() < end:
            time.sleep(0.05)
        assert processes_matching(marker), "probe never started"
        proc.stdin.close()
        proc.wait(timeout=10)
        assert wait_gone(marker) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------- frames held over SSH

def timed_chunks(specs: list[ProbeSpec], limit_s: float = 30.0) -> list[tuple[float, bytes]]:
    """The driver under bash (as remote_command starts it over SSH), read as the channel would be:
    each chunk that arrived and when (seconds from the start), up to the end of the round."""
    nonce = "n0nce"
    proc = subprocess.Popen(["/bin/bash", "--norc", "--noprofile", "-c", driver_script(specs, nonce)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    killer = threading.Timer(limit_s, proc.kill)
    killer.start()
    t0, chunks = time.monotonic(), []
    try:
        while not (chunks and chunks[-1][1].endswith(b"@@PF:n0nce:R\n")) and (chunk := proc.stdout.read1(65536)):
            chunks.append((time.monotonic() - t0, chunk))
    finally:
        killer.cancel()
        proc.stdin.close()
        proc.wait(timeout=10)
        proc.stdout.close()
    parsed = dict(FrameParser(nonce, specs).feed(b"".join(c for _, c in chunks)))
    assert sorted(parsed) == list(range(len(specs))), "a frame went missing"
    return chunks


def test_frames_that_finish_together_leave_in_one_write():
    """Each write is an SSH packet, and each packet costs the client ~0.3 ms of CPU in paramiko:
    ten quick probes must not cost ten packets."""
    chunks = timed_chunks([ProbeSpec(f"p{i}", f"sleep 0.02; echo {i}", 10) for i in range(10)])
    assert len(chunks) <= 2, f"{len(chunks)} writes for 10 quick probes"


def test_a_held_frame_leaves_while_the_next_probe_still_runs():
    """Holding is bounded: the probe after a finished one hangs, and the finished one's frame still
    reaches the client within the hold (a --deadline cut then keeps it), not when the hang ends."""
    chunks = timed_chunks([ProbeSpec("a", "echo a", 10), ProbeSpec("slow", "sleep 3", 10),
                           ProbeSpec("c", "echo c", 10)])
    first = next(t for t, c in chunks if b"@@PF:n0nce:B 0 0 " in c)
    assert first < 1.5, f"the finished probe's frame waited {first:.1f}s behind the slow one"
    assert chunks[-1][0] >= 2.9


def test_a_held_frame_keeps_the_clock_offset_to_the_transit_time():
    """env.consistency reads a node's clock offset as (probe end on the node) - (arrival here): a
    frame held 0.2 s on the node must not look 0.2 s behind. Same host, same clock: the offset is
    the pipe's transit, milliseconds."""
    specs = [ProbeSpec("clock", "date +%s.%N", 10), ProbeSpec("slow", "sleep 1", 10)]
    proc = subprocess.Popen(["/bin/bash", "--norc", "--noprofile", "-c", driver_script(specs, "n0nce")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    killer = threading.Timer(30, proc.kill)
    killer.start()
    parser, got = FrameParser("n0nce", specs), {}
    try:
        while len(got) < 2 and (chunk := proc.stdout.read1(65536)):
            got.update(parser.feed(chunk))  # parsed as it arrives, as collect() does
    finally:
        killer.cancel()
        proc.stdin.close()
        proc.wait(timeout=10)
        proc.stdout.close()
    out = got[0]
    offset = out.node_started_at + out.duration_s - out.received_at
    assert abs(offset) < 0.1, f"clock offset {offset:+.3f}s from a held frame"


# ---------------------------------------------------------------- the parser alone

def _frame(nonce: str, idx: int, rc: int, out: bytes, err: bytes, t0: int = 1_000_000,
           t1: int = 1_250_000) -> bytes:
    """One probe's frame as the driver prints it (times in microseconds)."""
    return (f"@@PF:{nonce}:B {idx} {rc} {t0} {t1}\n".encode() + out + f"@@PF:{nonce}:E\n".encode() + err
            + f"@@PF:{nonce}:Z\n".encode())


def _essence(o: CommandOutput) -> tuple:
    """What a check reads (received_at is the controller's clock at parse time)."""
    return (o.stdout, o.stderr, o.rc, o.duration_s, o.timed_out, o.truncated, o.error)


def test_parser_byte_by_byte_equals_all_at_once():
    specs = [ProbeSpec("a", "x", 5), ProbeSpec("b", "y", 5), ProbeSpec("c", "z", 5)]
    nonce = new_nonce()
    out, raw, _ = run_driver([ProbeSpec("a", "echo A; echo EA >&2", 5),
                              ProbeSpec("b", "printf '@@PF:fake:B 0 0 0 0\\n@@PF:fake:Z\\n'; exit 2", 5),
                              ProbeSpec("c", "printf '\\377tail'", 5)], nonce=nonce)
    at_once = dict(FrameParser(nonce, specs).feed(raw))
    p = FrameParser(nonce, specs)
    one_by_one = {}
    for i in range(len(raw)):
        one_by_one.update(dict(p.feed(raw[i:i + 1])))
    assert len(at_once) == 3
    assert {i: _essence(o) for i, o in one_by_one.items()} == {i: _essence(o) for i, o in at_once.items()}


def test_parser_on_synthetic_frames():
    nonce = "abc123"
    specs = [ProbeSpec("a", "x", 5), ProbeSpec("b", "y", 0.5)]
    data = b"chatter" + _frame(nonce, 0, 0, b"foo", b"er") + _frame(nonce, 1, 124, b"", b"", t1=1_600_000)
    got = dict(FrameParser(nonce, specs).feed(data))
    assert _essence(got[0]) == ("foo", "er", 0, 0.25, False, False, None)
    assert got[1].timed_out and got[1].rc == 124


def test_parser_ignores_frames_of_another_nonce_and_unknown_index():
    specs = [ProbeSpec("a", "x", 5)]
    data = _frame("other", 0, 0, b"bad", b"") + _frame("mine", 5, 0, b"idx", b"") + _frame("mine", 0, 0, b"good", b"")
    got = list(FrameParser("mine", specs).feed(data))
    assert [(i, o.stdout) for i, o in got] == [(0, "good")]


def test_remote_command_hands_the_script_over_intact():
    """The driver travels on stdin, never as an argument (argv is world-readable in /proc), and the
    boot reads exactly its bytes: what follows on stdin (the next rounds) is left for the driver."""
    script = driver_script([ProbeSpec("a", "echo 'hi' TOKEN=s3cret", 5)], "n0nce")
    cmd, data = remote_command(script)
    assert "s3cret" not in cmd and data == script.encode()
    shown = cmd.replace('eval "$(', 'printf %s "$(').replace(')"\'', ')"; printf @@; cat\'')
    res = subprocess.run(["sh", "-c", shown], input=data + b"pf next round\n", capture_output=True, timeout=10)
    assert res.stdout == script.rstrip("\n").encode() + b"@@pf next round\n"


def test_remote_command_runs_under_sh_when_bash_is_absent(tmp_path):
    script = driver_script([ProbeSpec("a", "echo hi", 5)], "n0nce")
    cmd, data = remote_command(script)
    cmd = cmd.replace("/bin/bash", str(tmp_path / "no-bash"))
    proc = subprocess.Popen(["sh", "-c", cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # stdin open: no cancel
    proc.stdin.write(data)
    proc.stdin.flush()
    out = b""
    while b"@@PF:n0nce:R\n" not in out and (chunk := proc.stdout.read1(4096)):
        out += chunk
    proc.stdin.close()  # the driver waits for another round until its stdin closes
    assert proc.wait(10) == 0
    assert b"@@PF:n0nce:B 0 0 " in out and out.endswith(b"hi\n@@PF:n0nce:E\n@@PF:n0nce:Z\n@@PF:n0nce:R\n")


def test_probe_timeout_is_at_least_one_second_and_integer():
    script = driver_script([ProbeSpec("a", "true", 0.2), ProbeSpec("b", "true", 7.9)], "n")
    assert "pf 0 1 - true" in script and "pf 1 7 - true" in script


def test_terminal_escapes_and_stray_controls_never_reach_a_parser():
    # A real H200's `topo -m` underlines its header (ESC[4m ... ESC[0m) into a pipe; hostile output
    # may set the title (OSC), ring (BEL) or backspace over text. TAB, CR, LF and NUL (`env -0`) stay.
    printf = r"printf 'a\033[4mGPU0\033[0m\tb\033]0;title\007c\033]8;;x\033\\d\010e\007\r\n\000z'"
    got = local_run([ProbeSpec("p", printf + "; printf '\\033[31merr\\033[0m' >&2", 10)])["p"]
    assert got.stdout == "aGPU0\tbcde\r\n\x00z" and got.stderr == "err"


@pytest.mark.parametrize("trap", ["$(touch {M})", "`touch {M}`", "; touch {M}; ", "' ; touch {M}; '",
                                  "\" ; touch {M}; \"", "\ntouch {M}\n", "\x1b[31m\x07\r"])
def test_the_driver_keeps_hostile_probe_text_and_become_user_as_data(tmp_path, trap):
    """Issue 29 finding 1, at the transport: a value quoted into a probe by sh() (a node's or the
    inventory's), and a hostile become user, pass through the real driver (stdin boot, pf line,
    the probe's file, sudo's argv) as data: the probe prints the value back, nothing else runs."""
    from preflight.checkapi import sh
    marker = tmp_path / "M"
    t = trap.replace("{M}", str(marker))
    specs = [ProbeSpec("v", sh("printf %s {v}", v=t), 10),
             ProbeSpec("r", sh("printf %s {v}", v=t), 10, root=True, become=f"u{t}")]
    command, data = remote_command(driver_script(specs, "n0nce"))
    proc = subprocess.Popen(["sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    proc.stdin.write(data)
    proc.stdin.flush()  # stdin stays open for the round (its EOF means the client went away)
    out = b""
    while b"@@PF:n0nce:R\n" not in out and (chunk := proc.stdout.read1(65536)):
        out += chunk
    proc.stdin.close()
    assert proc.wait(10) == 0
    got = dict(FrameParser("n0nce", specs).feed(out))
    assert 0 in got and b"B 0 0 " in out and t.encode() + b"@@PF:n0nce:E\n" in out  # the value, byte for byte
    assert not marker.exists()
