"""Reports are written atomically (a rename onto a new inode: a concurrent reader sees the old or the new file
whole, never part of one), and writing to a device (/dev/null, /dev/stdout) never replaces it."""
from __future__ import annotations

import os
import stat

from preflight.atomic import write_atomic


def test_regular_file_is_replaced_whole_with_mode_0600(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old")
    write_atomic(target, "new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_device_target_is_written_not_replaced():
    write_atomic(os.devnull, "discarded")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def _plain_write_would_be_seen(target, contents, writer, rounds=20):
    """Run `writer(target, text)` over alternating contents while a reader thread reads the file in a
    loop; return the reads that were neither whole old nor whole new content (bounded: `rounds` writes)."""
    import threading

    whole = set(contents)
    bad: list[int] = []
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            with open(target, "rb") as f:
                got = f.read()
            if got not in whole:
                bad.append(len(got))

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        for i in range(rounds):
            writer(target, contents[i % len(contents)])
    finally:
        stop.set()
        t.join(10)
    return bad


def test_a_concurrent_reader_never_sees_a_partial_report(tmp_path):
    """Large reports rewritten while a reader reads in a loop: every read is one whole version. (A plain
    open-truncate-write shows the reader empty and half-written files: see the control below.)"""
    target = tmp_path / "report.json"
    contents = [b"A" * (2 << 20), b"B" * (3 << 19) + b"\n"]
    target.write_bytes(contents[1])
    assert _plain_write_would_be_seen(target, contents, lambda p, d: write_atomic(p, d)) == []

    def plain(p, d):  # the control: what the tests must be able to tell apart
        with open(p, "wb") as f:
            f.write(d)
    assert _plain_write_would_be_seen(target, contents, plain), "the reader could not see a plain write's partial file"


def test_the_target_is_a_new_inode_and_an_old_hard_link_keeps_the_old_report(tmp_path):
    """A rename, not an overwrite in place: a reader that opened (or hard-linked) the old file keeps it."""
    target = tmp_path / "report.json"
    target.write_text("old report\n")
    keep = tmp_path / "yesterday.json"
    os.link(target, keep)
    before = os.stat(target).st_ino
    with open(target, "rb") as opened:
        write_atomic(target, "new report\n")
        assert opened.read() == b"old report\n"
    assert os.stat(target).st_ino != before and target.read_text() == "new report\n"
    assert keep.read_text() == "old report\n"


def test_run_output_replaces_the_report_by_rename(tmp_path):
    """`preflight run --output` (a real process): the report file is a new inode, mode 0600."""
    import socket
    import subprocess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"nodes:\n  - {{name: n1, host: 127.0.0.1, port: {port}, connect_timeout: 1}}\n")
    out = tmp_path / "report.json"
    out.write_text("previous report\n")
    before = os.stat(out).st_ino
    env = {k: v for k, v in os.environ.items() if k != "PREFLIGHT_DEBUG"}
    res = subprocess.run(["preflight", "run", str(inv), "--checks", "ssh.connect", "--format", "json", "--output",
                          str(out), "--ssh-config", str(tmp_path / "none")], capture_output=True, text=True,
                         timeout=60, env=env)
    assert res.returncode == 3, res.stderr
    assert os.stat(out).st_ino != before and '"n1"' in out.read_text()
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inv.yaml", "report.json"]
