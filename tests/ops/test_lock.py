"""One run per history database: a second concurrent run exits 75 at once; a crash leaves no lock."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from preflight.transport import factory
from preflight.cli import main
from preflight.ops.lock import EXIT_LOCKED, Locked, RunLock, lock_path
from tests.ops import ScriptedTransport

HOLD = ("import sys, time; from preflight.ops.lock import RunLock; l = RunLock(sys.argv[1]).acquire(); "
        "print('held', flush=True); time.sleep(60)")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def holder(tmp_path):
    db = tmp_path / "h.sqlite"
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert p.stdout.readline().strip() == "held"
    yield db, p
    if p.poll() is None:
        p.kill()
    p.wait()


def test_second_lock_refused_at_once_naming_the_holder(holder):
    db, p = holder
    t0 = time.monotonic()
    with pytest.raises(Locked, match=rf"held by pid {p.pid}"):
        RunLock(db).acquire()
    assert time.monotonic() - t0 < 1.0
    assert stat.S_IMODE(os.stat(lock_path(db)).st_mode) == 0o600


def test_crashed_holder_never_blocks_the_next_run(holder):
    db, p = holder
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert lock_path(db).exists()  # the file stays; the kernel lock went with the process
    with RunLock(db):
        pass


def test_concurrent_run_exits_75_and_runs_nothing(holder, tmp_path, monkeypatch):
    db, _ = holder
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - {name: n1, host: 10.0.0.1}\n")
    transport = ScriptedTransport({})
    monkeypatch.setattr(factory, "make_transport", lambda replay=None, local=False: transport)
    r = CliRunner().invoke(main, ["run", str(inv), "--history", str(db), "-q"])
    assert r.exit_code == EXIT_LOCKED == 75
    assert "another preflight run" in r.output and "nothing was run" in r.output
    assert transport.connects == [] and not db.exists()


def test_usage_error_wins_over_the_lock(holder, tmp_path):
    db, _ = holder
    r = CliRunner().invoke(main, ["run", str(tmp_path / "missing.yaml"), "--history", str(db)])
    assert r.exit_code == 2


def test_lock_released_after_a_run(tmp_path, monkeypatch):
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - {name: n1, host: 10.0.0.1}\n")
    monkeypatch.setattr(factory, "make_transport", lambda replay=None, local=False: ScriptedTransport({}))
    db = tmp_path / "h.sqlite"
    for _ in range(2):
        r = CliRunner().invoke(main, ["run", str(inv), "--checks", "ssh.connect", "--history", str(db), "-q"])
        assert r.exit_code == 0, r.output
    with RunLock(db):
        pass
