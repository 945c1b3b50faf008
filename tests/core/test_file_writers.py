"""Every writer of files against links, FIFOs and directories others control (issue 29, F4/F5).

The list of writers is not kept by hand: `test_every_writer_in_the_code_is_covered` greps
preflight/ for every way of opening a file for writing and fails on a site this file does not
know, so a new writer has to join WRITERS (and face the hostile paths) to pass. preflight/sim is
left out: it writes only inside its own private mkdtemp root (test_sim_private.py).

Each writer is tried against: a symlink to a victim file, a dangling symlink, a FIFO, a directory
writable by others (not sticky) and one owned by another user. The victim never changes, no link
target is created, nothing blocks on the FIFO, nothing is created in the foreign directories, and
what is created is 0600 in directories created 0700 with a umask of 000.
"""
from __future__ import annotations

import os
import re
import stat
import threading
from pathlib import Path
from typing import Callable

import pytest

from preflight.atomic import write_atomic
from preflight.ops import history as hist
from preflight.ops.gate import write_lists
from preflight.ops.lock import RunLock
from preflight.report import prometheus
from preflight.safefile import make_dirs
from preflight.transport.replay import Recorder
from tests.ops import make_report

ROOT = Path(__file__).resolve().parents[2] / "preflight"
FOREIGN_UID = 65534  # nobody

# Every line of preflight/ that opens, creates or replaces a file or directory: (file, text in the
# line) -> the writer below that covers it, or why it is no writer to test.
SITES = {
    ("atomic.py", "os.open(tmp"): "write_atomic",
    ("atomic.py", "os.open(p, os.O_WRONLY"): "write_atomic (/dev streams only)",
    ("atomic.py", "os.fdopen(fd"): "write_atomic (the descriptor opened above)",
    ("safefile.py", "os.mkdir(d"): "make_dirs",
    ("safefile.py", "make_dirs(p)"): "make_dirs",
    ("safefile.py", "os.open(p.name"): "lock, history",
    ("safefile.py", "os.open(p, os.O_RDONLY"): "open_dir (reads a directory)",
    ("safefile.py", "os.open(path, os.O_RDONLY"): "no: trusted_read reads a file for trust (F5 below)",
    ("ops/lock.py", "open_private"): "lock",
    ("ops/history.py", "open_private(path"): "history",
    ("ops/history.py", "sqlite3.connect"): "history (file made by open_private first)",
    ("ops/gate.py", "write_atomic(exclude_out"): "node lists",
    ("ops/gate.py", "write_atomic(good_out"): "node lists",
    ("ops/gate.py", "NamedTemporaryFile"): "no: tempfile's O_EXCL|O_NOFOLLOW 0600 name in $TMPDIR",
    ("report/prometheus.py", "write_atomic(path"): "prometheus",
    ("cli/common.py", "write_atomic(output"): "write_atomic (--output)",
    ("cli/common.py", "mkstemp"): "no: unwritable()'s probe, O_EXCL, removed at once",
    ("cli/common.py", "os.open(os.devnull"): "no: /dev/null for a closed stdout",
    ("cli/__init__.py", "os.open(os.devnull"): "no: /dev/null for a closed stdout",
    ("cli/job.py", "write_atomic(path"): "write_atomic (env files, fix scripts)",
    ("cli/job.py", "make_dirs(path"): "make_dirs (--out-dir)",
    ("cli/job.py", "_make_dirs(out_dir"): "make_dirs (--out-dir)",
    ("transport/replay.py", "make_dirs(folder"): "recorder",
    ("job/fixplan.py", "make_dirs(path"): "make_dirs (fix --out-dir; fixplan.ensure_dir's own trust rule, tests/job)",
    ("job/fixplan.py", "os.open(path, os.O_RDONLY"): "no: reads a plan, O_NOFOLLOW, checked (tests/job)",
    ("job/fixplan.py", "write_atomic(p["): "write_atomic (fix scripts)",
    ("job/fixplan.py", "write_atomic(paths("): "write_atomic (plan record)",
    ("transport/replay.py", "write_atomic(_file"): "recorder",
    ("transport/hostkeys.py", "make_dirs(p.parent"): "known_hosts",
    ("transport/hostkeys.py", "write_atomic(p"): "known_hosts",
}
WRITER = re.compile(r"""open\([^)]*["'][wax]b?["']|write_text|write_bytes|sqlite3\.connect|os\.open\(|\.mkdir\(|"""
                    r"""makedirs|mkstemp|mkdtemp|NamedTemporaryFile|write_atomic\(|make_dirs\(|open_private\(""")


def test_every_writer_in_the_code_is_covered():
    unknown = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("sim/"):
            continue
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if not WRITER.search(code) or code.lstrip().startswith(("def ", "from ", "import ", '"""')):
                continue
            if not any(rel == f and text in code for f, text in SITES):
                unknown.append(f"preflight/{rel}:{no}: {line.strip()}")
    assert not unknown, "writers not covered by this test (add them to SITES and WRITERS):\n" + "\n".join(unknown)


# ---------------------------------------------------------------- the writers, each as f(target)

def _known_hosts(target: Path) -> None:
    import paramiko
    from preflight.transport.hostkeys import KnownHosts
    KnownHosts.forget_all()
    KnownHosts.get(str(target)).verify("10.9.8.7", 22, paramiko.Ed25519Key(data=ED25519), "accept-new")


ED25519 = bytes.fromhex("0000000b7373682d65643235353139000000206" + "3" * 63)


def _lists(target: Path) -> None:
    write_lists(make_report(fail={"node01": "hccn.link"}), str(target), None)


def _record(target: Path) -> None:
    r = Recorder(str(target.parent))
    r.state(target.stem, __import__("preflight.model", fromlist=["x"]).NodeStateKind.OK, "")
    r.write()


def _db(target: Path) -> None:
    hist.open_db(target).close()


def _lock(target: Path) -> None:
    RunLock(target.with_name(target.name.removesuffix(".lock"))).acquire().release()


WRITERS: dict[str, Callable[[Path], None]] = {
    "write_atomic": lambda t: write_atomic(t, "report\n"),
    "prometheus": lambda t: prometheus.write(make_report(), str(t)),
    "node lists": _lists,
    "recorder": _record,
    "history": _db,
    "lock": _lock,
    "known_hosts": _known_hosts,
}
NAMES = {"recorder": "node01.json", "lock": "h.sqlite.lock", "history": "h.sqlite"}


def _target(tmp: Path, writer: str) -> Path:
    return tmp / NAMES.get(writer, "out.txt")


def _refused(writer: str, target: Path) -> BaseException | None:
    try:
        WRITERS[writer](target)
    except (OSError, hist.HistoryError, Exception) as exc:  # each writer's own one-line error
        assert "\n" not in str(exc)
        return exc
    return None


@pytest.fixture(autouse=True)
def _no_umask():
    old = os.umask(0)
    yield
    os.umask(old)


def _make_hostile(path: Path, hostile: str, modes: dict[str, int]) -> None:
    """chmod to modes[hostile], or (foreign-owned) chown to nobody with a mode only its owner writes."""
    if hostile in modes:
        os.chmod(path, modes[hostile])
        return
    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    os.chown(path, FOREIGN_UID, FOREIGN_UID)
    os.chmod(path, 0o755 if path.is_dir() else 0o644)


@pytest.mark.parametrize("writer", WRITERS)
def test_symlink_to_a_victim_never_changes_the_victim(tmp_path, writer):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    os.chmod(victim, 0o644)
    d = tmp_path / "d"
    d.mkdir(mode=0o700)
    target = _target(d, writer)
    target.symlink_to(victim)
    if writer == "known_hosts":  # the user's own known_hosts is often a dotfiles link: its target is written
        _refused(writer, target)
        assert victim.read_text().startswith("precious\n10.9.8.7 ")
        return
    exc = _refused(writer, target)
    assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert exc is not None and "link" in str(exc), f"{writer} wrote through a link without a word"


@pytest.mark.parametrize("writer", WRITERS)
def test_dangling_symlink_never_creates_its_target(tmp_path, writer):
    d = tmp_path / "d"
    d.mkdir(mode=0o700)
    target = _target(d, writer)
    target.symlink_to(tmp_path / "created-through-link")
    _refused(writer, target)
    assert not (tmp_path / "created-through-link").exists(), f"{writer} created a link's target"


@pytest.mark.parametrize("writer", WRITERS)
def test_fifo_is_neither_written_nor_waited_on(tmp_path, writer):
    target = _target(tmp_path, writer)
    os.mkfifo(target)
    th = threading.Thread(target=_refused, args=(writer, target), daemon=True)
    th.start()
    th.join(10)
    if th.is_alive():  # unblock the writer before failing
        os.close(os.open(target, os.O_RDONLY | os.O_NONBLOCK))
    assert not th.is_alive(), f"{writer} blocked on a FIFO"
    assert stat.S_ISFIFO(os.lstat(target).st_mode)


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("hostile", ["others-writable", "foreign-owned"])
def test_a_directory_another_user_controls_gets_nothing(tmp_path, writer, hostile):
    d = tmp_path / "shared"
    d.mkdir()
    _make_hostile(d, hostile, {"others-writable": 0o777})
    exc = _refused(writer, _target(d, writer))
    assert list(d.iterdir()) == [], f"{writer} wrote into a {hostile} directory"
    if writer != "known_hosts":  # a key it cannot record is trusted for this run, as with /dev/null
        assert exc is not None and "directory" in str(exc)


@pytest.mark.parametrize("writer", WRITERS)
def test_created_files_are_0600_in_directories_created_0700(tmp_path, writer):
    target = _target(tmp_path / "new" / "sub", writer)
    if writer not in ("history", "lock", "known_hosts", "recorder"):
        make_dirs(target.parent)  # write_atomic writes into an existing directory (cli checks it first)
    WRITERS[writer](target)
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(target.parent).st_mode) == 0o700
    want = prometheus.PROM_MODE if writer == "prometheus" else 0o600
    assert stat.S_IMODE(os.stat(target).st_mode) == want


def test_lock_never_truncates_another_users_file(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    lock = tmp_path / "h.sqlite.lock"
    lock.write_text("theirs\n")
    os.chown(lock, FOREIGN_UID, FOREIGN_UID)
    assert _refused("lock", lock) is not None
    assert lock.read_text() == "theirs\n"


def test_system_streams_are_still_written_in_place():
    write_atomic("/dev/null", "discarded")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


# ---------------------------------------------------------------- F5: files read for trust

def _hostile_file(path: Path, hostile: str) -> None:
    _make_hostile(path, hostile, {"group-writable": 0o664, "others-writable": 0o646})


@pytest.mark.parametrize("hostile", ["group-writable", "others-writable", "foreign-owned"])
def test_a_config_file_another_user_can_change_is_refused_in_one_line(tmp_path, monkeypatch, hostile):
    import subprocess
    import sys
    cfg = tmp_path / "preflight" / "config.yaml"
    cfg.parent.mkdir(mode=0o700)
    cfg.write_text(f"history: {tmp_path / 'theirs.sqlite'}\n")
    _hostile_file(cfg, hostile)
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "PYTHONPATH": str(ROOT.parent)}
    res = subprocess.run([sys.executable, "-m", "preflight.cli", "config", "show"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1 and f"{cfg}: refusing to trust this config file" in res.stderr


def test_a_config_file_in_a_directory_others_can_write_is_refused(tmp_path):
    """Another user who can write the directory can replace a root-owned 0600 file in it (rename):
    refused unless the directory is sticky (/tmp), as OpenSSH's StrictModes does."""
    from preflight.safefile import UnsafePath, trusted_read
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    cfg = shared / "config.yaml"
    cfg.write_text("forks: 8\n")
    cfg.chmod(0o600)
    assert trusted_read(cfg, "config file") == "forks: 8\n"
    shared.chmod(0o777)
    with pytest.raises(UnsafePath, match=f"others can replace it in {shared}"):
        trusted_read(cfg, "config file")
    shared.chmod(0o1777)  # sticky: only the file's owner may rename or remove it
    assert trusted_read(cfg, "config file") == "forks: 8\n"
    link = tmp_path / "link.yaml"  # a link is followed: its target's directory is the one judged
    link.symlink_to(cfg)
    shared.chmod(0o777)
    with pytest.raises(UnsafePath, match="others can replace it"):
        trusted_read(link, "config file")


def test_a_config_path_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    from preflight.safefile import UnsafePath, trusted_read
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo, 0o600)
    result: list = []
    t = threading.Thread(target=lambda: result.append(pytest.raises(UnsafePath, trusted_read, fifo, "config file")),
                         daemon=True)
    t.start()
    t.join(10)
    assert result and "not a regular file" in str(result[0].value)


@pytest.mark.parametrize("hostile", ["group-writable", "others-writable", "foreign-owned"])
def test_an_acks_database_another_user_can_change_is_refused(tmp_path, hostile):
    db = tmp_path / "h.sqlite"
    hist.open_db(db).close()
    _hostile_file(db, hostile)
    with pytest.raises(hist.HistoryError, match=r"cannot open history database .*: (refusing to trust|it belongs)"):
        hist.open_db(db, create=False)


def test_an_acks_author_is_the_real_user_not_logname(tmp_path, monkeypatch):
    import pwd
    from preflight.ops import acks
    monkeypatch.setenv("LOGNAME", "someone-else")
    monkeypatch.setenv("USER", "someone-else")
    db = hist.open_db(tmp_path / "h.sqlite")
    ack = acks.add(db, "node01", "hccn.link", "2099-01-01", "cable on order")
    assert ack.by == pwd.getpwuid(os.getuid()).pw_name
