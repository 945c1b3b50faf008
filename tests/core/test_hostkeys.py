"""accept-new records a key in a regular known_hosts file only (transport/hostkeys.py).

`UserKnownHostsFile /dev/null` is a common ssh_config line; as root, replacing it would turn the
system's /dev/null into a regular file. The device here is a private one (mknod in a temp dir,
the same numbers as /dev/null), never the real one.
"""
from __future__ import annotations

import os
import stat
import threading

import paramiko
import pytest

from preflight.transport.hostkeys import KnownHosts



@pytest.fixture
def host_key() -> paramiko.PKey:
    return paramiko.RSAKey.generate(1024)


def accept(path, key) -> None:
    KnownHosts.forget_all()
    KnownHosts.get(str(path)).verify("10.9.8.7", 22, key, "accept-new")


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_character_device_is_never_replaced(tmp_path, host_key):
    dev = tmp_path / "null"
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    accept(dev, host_key)  # trusted for this run, not raised
    st = os.lstat(dev)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    assert not list(tmp_path.glob(".null.*")), "temp file left behind"


def test_fifo_is_never_replaced_nor_written(tmp_path, host_key):
    fifo = tmp_path / "known_hosts"
    os.mkfifo(fifo)
    th = threading.Thread(target=accept, args=(fifo, host_key), daemon=True)
    th.start()
    th.join(10)
    assert not th.is_alive(), "blocked writing into a FIFO"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_symlink_stays_a_link_and_its_target_gets_the_line(tmp_path, host_key):
    real = tmp_path / "real_known_hosts"
    real.write_text("old.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
    os.chmod(real, 0o644)
    link = tmp_path / "known_hosts"
    link.symlink_to(real)
    accept(link, host_key)
    assert link.is_symlink() and os.readlink(link) == str(real)
    lines = real.read_text().splitlines()
    assert len(lines) == 2 and lines[1].startswith("10.9.8.7 ssh-rsa ")
    assert stat.S_IMODE(real.stat().st_mode) == 0o644


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_symlink_to_a_device_leaves_both_alone(tmp_path, host_key):
    dev = tmp_path / "null"
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    link = tmp_path / "known_hosts"
    link.symlink_to(dev)
    accept(link, host_key)
    assert link.is_symlink() and stat.S_ISCHR(os.lstat(dev).st_mode)


def test_regular_file_is_created_0600(tmp_path, host_key):
    kh = tmp_path / "sub" / "known_hosts"
    accept(kh, host_key)
    assert kh.read_text().startswith("10.9.8.7 ssh-rsa ") and stat.S_IMODE(kh.stat().st_mode) == 0o600
