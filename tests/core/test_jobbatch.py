"""A node's job-side probes of one round as one runtime call (preflight.transport.jobbatch), run
for real by /bin/sh through the local transport. The "runtime" here is a shell prefix that runs the
argv it is given on this host and logs each call: what is tested is the framing, the count of calls,
timeouts and clean-up; the container itself is tested on real podman (tests/integration/test_container.py).
"""
from __future__ import annotations

import shlex
import subprocess
import threading
import time
from pathlib import Path

from preflight.container import INNER_KILL_S, START_SLACK_S
from preflight.node import Node
from preflight.transport import jobbatch
from preflight.transport.batch import ProbeSpec
from preflight.transport.local import LocalTransport
from tests.core.test_batch import local_run as run


def runtime(log: Path, refuse: bool = False) -> str:
    """A prefix as container.job_prefix gives one: logs the call, then runs (or refuses) the argv."""
    body = 'echo call >>"$0"; ' + ('echo "Error: no container with name or ID \\"job\\" found" >&2; exit 125'
                                   if refuse else 'exec "$@"')
    return f"sh -c {shlex.quote(body)} {shlex.quote(str(log))}"


def job(key: str, inner: str, rt: str, timeout: float = 5) -> ProbeSpec:
    return ProbeSpec(key, f"one-probe form of {key}", timeout + 15, job=True, inner=inner, inner_timeout=timeout,
                     runtime=rt)


def calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_every_job_probe_gets_its_own_output_from_one_call(tmp_path):
    log = tmp_path / "calls"
    rt = runtime(log)
    out = run([ProbeSpec("h", "echo host", 5),
               job("a", "echo out-a; echo err-a >&2; exit 3", rt),
               job("b", "printf 'bin\\377\\000end'", rt),
               job("slow", "sleep 30", rt, timeout=1),
               job("after", "echo after", rt)])
    assert calls(log) == 1
    assert (out["h"].stdout, out["h"].rc) == ("host\n", 0)
    assert (out["a"].stdout, out["a"].stderr, out["a"].rc) == ("out-a\n", "err-a\n", 3)
    assert out["b"].stdout == "bin\\xff\x00end" and out["b"].rc == 0
    assert out["slow"].timed_out and out["slow"].duration_s < 5  # its own timeout, not the batch's
    assert out["after"].stdout == "after\n"


def test_two_containers_are_two_calls_and_a_second_round_another(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    s = LocalTransport().connect(Node("n1", "localhost"), threading.Event())
    try:
        out = s.run([job("a", "echo a", runtime(one)), job("b", "echo b", runtime(two)),
                     job("c", "echo c", runtime(one))], threading.Event())
        assert (out["a"].stdout, out["b"].stdout, out["c"].stdout) == ("a\n", "b\n", "c\n")
        assert (calls(one), calls(two)) == (1, 1)
        assert s.run([job("d", "echo d", runtime(one))], threading.Event())["d"].stdout == "d\n"
        assert calls(one) == 2
    finally:
        s.close()


def test_a_refusing_runtime_is_every_probes_answer(tmp_path):
    rt = runtime(tmp_path / "calls", refuse=True)
    out = run([job("a", "echo a", rt), job("b", "echo b", rt), job("c", "echo c", rt)])
    for o in out.values():  # what wrapping.runtime_refused reads: the runtime's exit and words, each time
        assert o.rc == 125 and o.stdout == "" and 'no container with name or ID "job"' in o.stderr


def test_a_cut_kills_the_probe_inside_and_leaves_no_fifo(tmp_path):
    mark = f"sleep {317 + int(time.time()) % 50}"
    cancel = threading.Event()
    done: dict = {}
    t = threading.Thread(target=lambda: done.update(run([job("a", mark, runtime(tmp_path / "calls"), 60)], cancel)))
    t.start()
    end = time.monotonic() + 10
    while subprocess.run(["pgrep", "-f", mark], capture_output=True).returncode and time.monotonic() < end:
        time.sleep(0.1)
    cancel.set()
    t.join(15)
    assert not t.is_alive() and done["a"].rc is None
    end = time.monotonic() + 10
    while subprocess.run(["pgrep", "-f", mark], capture_output=True).returncode == 0 and time.monotonic() < end:
        time.sleep(0.1)
    assert subprocess.run(["pgrep", "-f", mark], capture_output=True).returncode == 1  # gone


def test_the_one_call_outlives_every_probe_inside():
    """The host call's timeout is the members' own timeouts summed (each with the kill grace) plus
    the runtime's start-up slack: a job-side probe allowed 110 s (an all-reduce rank) is never cut
    by the batch around it. It was 19 s whatever the members were allowed."""
    members = [job("rank", "true", "rt", timeout=110), job("env", "true", "rt", timeout=60),
               ProbeSpec("h", "echo host", 5)]
    plain, (batch,) = jobbatch.split(members)
    assert [m.timeout for m in batch.members] == [110, 60]
    assert batch.spec.timeout == START_SLACK_S + (110 + INNER_KILL_S + 1) + (60 + INNER_KILL_S + 1)
    assert batch.spec in plain and [p.key for p in plain] == ["h", "job0"]
