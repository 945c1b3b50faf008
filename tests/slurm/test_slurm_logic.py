"""Pure parts of preflight.slurm, on Slurm's real output and hand-built reports (no daemons):
sinfo parsing, NHC's drain/resume rule, --need's choice, and the bad-input exit codes."""
from __future__ import annotations

import dataclasses

import os
import shutil
import subprocess
import sys

import pytest

from preflight.model import Result, Status
from preflight.slurm import drain
from preflight.slurm.parse import SlurmNode, parse_sinfo_states
from preflight.slurm.select import choose
from tests.ops import make_report
from tests.support import fixture_body

PREFLIGHT = [sys.executable, "-m", "preflight.cli"]


def test_sinfo_states_from_real_slurm():
    nodes = parse_sinfo_states(fixture_body("sinfo_states.txt"))
    assert nodes["node01"] == SlurmNode("node01", "down*", "preflight: ssh.connect unreachable")
    assert nodes["node01"].base == "down" and nodes["node01"].offline and not nodes["node01"].responding
    assert nodes["node02"].offline and drain.ours(nodes["node02"].reason)
    assert nodes["node03"].reason == "bad dimm, ticket 4411" and not drain.ours(nodes["node03"].reason)
    assert parse_sinfo_states("node09 idle none\nnode09 idle none\n") == {"node09": SlurmNode("node09", "idle", None)}
    assert not parse_sinfo_states("node09 mix- none\n")["node09"].offline


def _slurm(**states):
    return {n: SlurmNode(n, s, r) for n, (s, r) in states.items()}


def test_plan_follows_nhcs_rule():
    report = make_report(nodes=["node01", "node02", "node03", "node04"], fail={"node02": "hccn.link", "node03": "hccn.link"},
                         unreachable={"node04"})
    slurm = _slurm(node01=("drain", "preflight: hccn.link old finding"), node02=("idle", None),
                   node03=("down*", "power supply"), node04=("idle", None))
    acts = {a.node: a for a in drain.decide(report, slurm, drain=True, resume=False)}
    assert acts["node01"].verb == "resume" and acts["node01"].line == "scontrol update NodeName=node01 State=RESUME"
    assert acts["node02"].verb == "drain"
    assert acts["node02"].line == "scontrol update NodeName=node02 State=DRAIN 'Reason=preflight: hccn.link device 5 link DOWN'"
    assert acts["node03"].verb == "none" and "not ours" in acts["node03"].note
    assert acts["node04"].verb == "none" and "--drain-unreachable" in acts["node04"].note
    acts = {a.node: a for a in drain.decide(report, slurm, drain=True, resume=False, drain_unreachable=True)}
    assert acts["node04"].verb == "drain" and acts["node04"].reason.startswith("preflight: ssh.connect unreachable")
    # --resume alone drains nothing; without either flag nothing at all is done
    assert {a.verb for a in drain.decide(report, slurm, drain=False, resume=True)} == {"resume", "none"}
    assert {a.verb for a in drain.decide(report, slurm, drain=False, resume=False)} == {"none"}


def test_plan_leaves_a_node_already_drained_with_the_same_reason():
    report = make_report(nodes=["node01"], fail={"node01": "hccn.link"})
    same = _slurm(node01=("drain", "preflight: hccn.link device 5 link DOWN"))
    assert [a.verb for a in drain.decide(report, same, drain=True, resume=False)] == ["none"]
    newer = _slurm(node01=("drain", "preflight: npu.health old"))
    assert [a.verb for a in drain.decide(report, newer, drain=True, resume=False)] == ["drain"]
    assert [a.verb for a in drain.decide(report, {}, drain=True, resume=False)] == ["none"]  # not a Slurm node


def test_a_node_is_resumed_only_when_the_checks_that_drained_it_passed_again():
    """Issue 29 finding 8: a node drained for npu.idle was resumed by a gate that ran only ssh.connect."""
    from preflight.model import Result
    only_connect = make_report(nodes=["node01"])
    only_connect = dataclasses.replace(only_connect, results=tuple(r for r in only_connect.results if r.check == "ssh.connect"))
    idle = _slurm(node01=("drain", "preflight: npu.idle device 2 runs pid 4411"))
    act, = drain.decide(only_connect, idle, drain=True, resume=True)
    assert act.verb == "none" and "npu.idle did not run again and pass" in act.note
    both = _slurm(node01=("drain", "preflight: hccn.link,npu.idle device 5 link DOWN"))
    act, = drain.decide(make_report(nodes=["node01"]), both, drain=True, resume=True)  # hccn.link passed, npu.idle absent
    assert act.verb == "none" and act.note.endswith("npu.idle did not run again and pass")
    passed = make_report(nodes=["node01"], extra=[Result("npu.idle", "node01", Status.PASS, "no process")])
    assert [a.verb for a in drain.decide(passed, both, drain=True, resume=True)] == ["resume"]
    skipped = make_report(nodes=["node01"], extra=[Result("npu.idle", "node01", Status.SKIP, "busy")])
    assert [a.verb for a in drain.decide(skipped, both, drain=True, resume=True)] == ["none"]
    by_hand = _slurm(node01=("drain", "preflight: an older finding"))
    act, = drain.decide(passed, by_hand, drain=True, resume=True)
    assert act.verb == "none" and "resume it by hand" in act.note


def test_the_reason_names_every_failed_check_and_an_acknowledged_failure_drains_nothing():
    from preflight.model import Result
    report = make_report(nodes=["node01", "node02"], fail={"node01": "hccn.link"},
                         extra=[Result("npu.idle", "node01", Status.FAIL, "pid 7", remediation="x"),
                                Result("npu.idle", "node02", Status.FAIL, "pid 8", remediation="x", ack={"by": "ops"})])
    acts = {a.node: a for a in drain.decide(report, _slurm(node01=("idle", None), node02=("idle", None)), True, False)}
    assert acts["node01"].reason == "preflight: hccn.link,npu.idle device 5 link DOWN"
    assert drain.drained_by(acts["node01"].reason) == ["hccn.link", "npu.idle"]
    assert "node02" not in acts  # its only failure is acknowledged: the gate says READY for it; no action
    strict = {a.node: a for a in drain.decide(report, _slurm(node01=("idle", None), node02=("idle", None)), True, False,
                                            strict=True)}
    assert strict["node02"].verb == "drain"


def test_reason_is_one_bounded_line():
    text = drain.reason_text("npu.health", "device 3\nAlarm\x1b[31m " + "x" * 300)
    assert text.startswith("preflight: npu.health device 3 Alarm") and "\n" not in text and "\x1b" not in text
    assert len(text) == drain.REASON_MAX and text.endswith("...")


def test_apply_stops_at_the_first_refusal():
    from preflight.slurm.commands import EXIT_SLURM_DENIED, SlurmError
    report = make_report(nodes=["node01", "node02"], fail={"node01": "hccn.link", "node02": "hccn.link"})
    acts = drain.decide(report, _slurm(node01=("idle", None), node02=("idle", None)), drain=True, resume=False)
    ran = []

    def refuse(argv):
        ran.append(argv[2])
        raise SlurmError("scontrol refused", EXIT_SLURM_DENIED)
    try:
        drain.apply(acts, False, lambda s: None, update=refuse)
    except SlurmError as exc:
        assert exc.code == 8
    assert ran == ["NodeName=node01"]


def test_choose_passing_first_then_fewest_warnings_stable():
    warn = [Result("npu.idle", "node01", Status.WARN, "w"), Result("npu.idle", "node03", Status.WARN, "w"),
            Result("cann.env", "node03", Status.WARN, "w")]
    report = make_report(nodes=["node01", "node02", "node03", "node04", "node05"], fail={"node04": "hccn.link"},
                         extra=warn)
    assert choose(report, 2) == ["node02", "node05"]
    assert choose(report, 3) == ["node02", "node05", "node01"]
    assert choose(report, 5) == ["node02", "node05", "node01", "node03"]  # only 4 usable
    assert choose(report, 3, strict=True) == ["node02", "node05"]


def _gate(tmp_path, *args, env_extra=None, drop=("SLURM_JOB_NODELIST",)):
    inv = tmp_path / "inv.yaml"
    inv.write_text("defaults: {port: 1, connect_timeout: 2}\nnodes:\n  - {name: 'node[01-04]', host: '127.0.0.[1-4]'}\n")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_extra or {})
    return subprocess.run([*PREFLIGHT, "gate", str(inv), *args], capture_output=True, text=True, timeout=60, env=env)


def _one_line(cp):
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("preflight: ") and "Traceback" not in cp.stderr, cp.stderr
    assert cp.stdout == ""  # found before any node was checked
    return lines[0]


def test_no_slurm_on_path_is_exit_5(tmp_path):
    empty = tmp_path / "nobin"
    empty.mkdir()
    cp = _gate(tmp_path, "--drain", env_extra={"PATH": str(empty)})
    assert cp.returncode == 5 and "sinfo not found on PATH" in _one_line(cp)


def test_need_without_an_allocation_is_exit_6(tmp_path):
    cp = _gate(tmp_path, "--need", "2")
    assert cp.returncode == 6 and "no Slurm allocation" in _one_line(cp)


def test_need_larger_than_the_allocation_is_exit_7(tmp_path):
    cp = _gate(tmp_path, "--need", "5", env_extra={"SLURM_JOB_NODELIST": "node[01-04]"})
    assert cp.returncode == 7 and "--need 5 is more than the allocation's 4 node(s) (node[01-04])" in _one_line(cp)
    cp = _gate(tmp_path, "--need", "3", "--limit", "node[01-02]")
    assert cp.returncode == 7


def test_dry_run_alone_is_a_usage_error(tmp_path):
    cp = _gate(tmp_path, "--dry-run")
    assert cp.returncode == 2 and "--drain or --resume" in _one_line(cp)


def test_run_via_slurm_without_srun_is_exit_5(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - {name: node01, host: 127.0.0.1}\n")
    empty = tmp_path / "nobin"
    empty.mkdir()
    cp = subprocess.run([*PREFLIGHT, "run", str(inv), "--via", "slurm"], capture_output=True, text=True,
                        timeout=60, env=dict(os.environ, PATH=str(empty)))
    assert cp.returncode == 5 and "srun not found on PATH" in _one_line(cp)


@pytest.mark.skipif(shutil.which("sinfo") is None or shutil.which("srun") is None, reason="slurm-client not installed")
def test_run_via_slurm_when_slurm_cannot_be_asked_is_exit_5(tmp_path):
    """sinfo failing (a broken slurm.conf, slurmctld down) stops `run --via slurm` before any node:
    one line with sinfo's own words, exit 5."""
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - {name: node01, host: 127.0.0.1}\n")
    conf = tmp_path / "slurm.conf"
    conf.write_text("")  # sinfo: s_p_parse_file: file ... is empty; fatal: Unable to process configuration file
    cp = subprocess.run([*PREFLIGHT, "run", str(inv), "--via", "slurm"], capture_output=True, text=True,
                        timeout=60, env=dict(os.environ, SLURM_CONF=str(conf)))
    assert cp.returncode == 5, cp.stderr
    assert _one_line(cp).startswith("preflight: sinfo failed") and "configuration file" in cp.stderr


SINFO_THEN_N2_DOWN = """#!/bin/sh
c=$(cat "$0.n" 2>/dev/null || echo 0); c=$((c+1)); echo $c >"$0.n"
if [ $c = 1 ]; then printf 'n1 idle none\\nn2 idle none\\n'; else printf 'n1 idle none\\nn2 down* Not responding\\n'; fi
"""
# The first step fails (n2's launch, and srun names n1's task as killed); the retry runs n1's task
# for real: the step program in a plain shell, its output labelled as `srun --label` does.
SRUN_FAILS_ONCE = """#!/bin/bash
c=$(cat "$0.n" 2>/dev/null || echo 0); c=$((c+1)); echo $c >"$0.n"
if [ $c = 1 ]; then
  echo "srun: error: Task launch for StepId=5.0 failed on node n2: Communication connection failure" >&2
  echo "srun: error: n1: task 0: Killed" >&2
  exit 1
fi
prog="${@: -1}"
echo "srun: launching StepId=5.1 on host n1, 1 tasks: 0" >&2
SLURM_PROCID=0 SLURMD_NODENAME=n1 /bin/sh -c "$prog" | sed -u 's/^/0: /'
"""


def _fake_step(tmp_path, monkeypatch, sinfo: str, srun: str):
    """An SrunTransport for n1 and n2 whose sinfo and srun are these scripts (first on PATH)."""
    from preflight.node import Node
    from preflight.transport.slurm import SrunTransport
    for name, body in (("sinfo", sinfo), ("srun", srun)):
        (tmp_path / name).write_text(body)
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    return SrunTransport([Node("n1", "n1", connect_timeout=5), Node("n2", "n2", connect_timeout=5)])


def test_a_relaunched_node_is_not_judged_by_the_failed_attempts_words(tmp_path, monkeypatch):
    """run --via slurm retries the step once without the nodes that went down meanwhile: a node
    srun spoke of in the failed attempt ("task 0: Killed") answers in the retry like any other."""
    import threading

    from preflight.transport.batch import ProbeSpec

    t = _fake_step(tmp_path, monkeypatch, SINFO_THEN_N2_DOWN, SRUN_FAILS_ONCE)
    cancel = threading.Event()
    try:
        out = t.connect(t.step.nodes["n1"], cancel).run([ProbeSpec("k", "echo hi", 10)], cancel)
        assert (out["k"].stdout, out["k"].rc, out["k"].error) == ("hi\n", 0, None)
    finally:
        t.close()


def test_job_side_probes_travel_through_srun_as_one_runtime_call(tmp_path, monkeypatch):
    """Through srun as over SSH: a node's job-side probes of a round are ONE runtime call (the
    "runtime" here is a shell prefix that logs each call and runs the argv on this host), and each
    probe still gets its own output."""
    import shlex
    import threading

    from preflight.node import Node
    from preflight.transport.batch import ProbeSpec
    from preflight.transport.slurm import SrunTransport

    (tmp_path / "sinfo").write_text("#!/bin/sh\nprintf 'n1 idle none\\n'\n")
    (tmp_path / "srun").write_text(SRUN_FAILS_ONCE.replace('c=$(cat "$0.n" 2>/dev/null || echo 0)', "c=1"))
    for name in ("sinfo", "srun"):
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    log = tmp_path / "calls"
    body = 'echo call >>"$0"; exec "$@"'
    rt = f"sh -c {shlex.quote(body)} {shlex.quote(str(log))}"

    def job(key, inner):
        return ProbeSpec(key, f"one-probe form of {key}", 20, job=True, inner=inner, inner_timeout=5, runtime=rt)

    t = SrunTransport([Node("n1", "n1", connect_timeout=5)])
    cancel = threading.Event()
    try:
        out = t.connect(t.step.nodes["n1"], cancel).run(
            [ProbeSpec("h", "echo host", 10), job("a", "echo in-a"), job("b", "echo in-b >&2; exit 3")], cancel)
    finally:
        t.close()
    assert (out["h"].stdout, out["a"].stdout, out["b"].stderr, out["b"].rc) == ("host\n", "in-a\n", "in-b\n", 3)
    assert log.read_text().splitlines() == ["call"]


SRUN_TMPDIR_GONE = """#!/bin/bash
prog="${@: -1}"
echo "srun: launching StepId=5.0 on host n1, 1 tasks: 0" >&2
SLURM_PROCID=0 SLURMD_NODENAME=n1 TMPDIR=/nonexistent/x /bin/sh -c "$prog" 2> >(sed -u 's/^/0: /' >&2) | sed -u 's/^/0: /'
rc=${PIPESTATUS[0]}
sleep 0.2
echo "srun: error: n1: task 0: Exited with exit code $rc" >&2
sleep 1
"""


def test_the_step_programs_own_failure_before_it_answered_is_said(tmp_path, monkeypatch):
    """A task that fails before its hello line (here: no writable TMPDIR for its FIFO) is
    unreachable with the program's own words, not only srun's exit code."""
    import threading

    from preflight.node import Node
    from preflight.transport import ConnectError
    from preflight.transport.slurm import SrunTransport

    (tmp_path / "sinfo").write_text("#!/bin/sh\nprintf 'n1 idle none\\n'\n")
    (tmp_path / "srun").write_text(SRUN_TMPDIR_GONE)
    for name in ("sinfo", "srun"):
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    t = SrunTransport([Node("n1", "n1", connect_timeout=5)])
    try:
        with pytest.raises(ConnectError) as exc:
            t.connect(t.step.nodes["n1"], threading.Event())
    finally:
        t.close()
    assert "mktemp failed" in exc.value.reason and "exit code 97" in exc.value.reason, exc.value.reason


# Two tasks, as srun -v lays them out (task 0 on n1, task 1 on n2); task 1 says hello first, in n1's
# name (a node lying about its identity), task 0 a moment later as itself.
SRUN_A_LIAR = """#!/bin/bash
prog="${@: -1}"
echo "srun: launching StepId=7.0 on host n1, 1 tasks: 0" >&2
echo "srun: launching StepId=7.0 on host n2, 1 tasks: 1" >&2
exec 3>&1
tee >(SLURM_PROCID=1 SLURMD_NODENAME=n1 /bin/sh -c "$prog" | sed -u 's/^/1: /' >&3) |
  (sleep 0.5; SLURM_PROCID=0 SLURMD_NODENAME=n1 /bin/sh -c "$prog" | sed -u 's/^/0: /')
"""


def test_a_task_cannot_report_under_another_nodes_name(tmp_path, monkeypatch):
    """Issue 29 finding 10: the first hello naming a node won it. Now the name must be the node srun's
    own layout put the task on: n1 answers from its own task, n2 (whose task lied) is unreachable."""
    import threading

    from preflight.transport import ConnectError
    from preflight.transport.batch import ProbeSpec

    t = _fake_step(tmp_path, monkeypatch, "#!/bin/sh\nprintf 'n1 idle none\\nn2 idle none\\n'\n", SRUN_A_LIAR)
    cancel = threading.Event()
    try:
        out = t.connect(t.step.nodes["n1"], cancel).run([ProbeSpec("k", "echo $SLURM_PROCID", 10)], cancel)
        assert out["k"].stdout == "0\n"  # n1's own task, not the liar
        with pytest.raises(ConnectError, match="reported itself as 'n1'"):
            t.connect(t.step.nodes["n2"], cancel)
    finally:
        t.close()


def test_a_redrain_keeps_the_checks_that_have_not_passed_since():
    """Drained for npu.idle; a later gate that runs only hccn.link finds it failing: the new Reason
    still names npu.idle (it never ran again), so passing hccn.link alone cannot resume the node."""
    report = make_report(nodes=["node01"], fail={"node01": "hccn.link"})
    act, = drain.decide(report, _slurm(node01=("drain", "preflight: npu.idle pid 7")), drain=True, resume=False)
    assert act.verb == "drain" and drain.drained_by(act.reason) == ["hccn.link", "npu.idle"]
