"""accept-new records a key in a regular known_hosts file only (transport/hostkeys.py).

`UserKnownHostsFile /dev/null` is a common ssh_config line; as root, replacing it would turn the
system's /dev/null into a regular file. The device here is a private one (mknod in a temp dir,
the same numbers as /dev/null), never the real one.
"""
from __future__ import annotations

import os
import stat
import subprocess
import threading

import paramiko
import pytest

from preflight.transport.hostkeys import HostKeyRejected, KnownHosts



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


def test_lookups_answer_as_paramiko_does_on_plain_hashed_marker_and_broken_lines(tmp_path):
    """The index gives the answers paramiko's own scan gives, line kinds mixed as real files mix
    them (`HashKnownHosts yes` lines, [host]:port, a comma list), and verify() accepts each
    recorded key and rejects a changed one. A @cert-authority line (common where host
    certificates are used) or a broken line is skipped alone: paramiko raises InvalidHostKey on
    both, which used to end the run."""
    ed = [paramiko.Ed25519Key.from_private_key_file(_ed25519(tmp_path, i)) for i in range(4)]
    rsa = paramiko.RSAKey.generate(1024)
    lines = [f"10.0.0.1 {ed[0].get_name()} {ed[0].get_base64()}",
             f"{paramiko.HostKeys.hash_host('10.0.0.2')} {ed[1].get_name()} {ed[1].get_base64()}",
             f"[10.0.0.3]:2222,n3 {ed[2].get_name()} {ed[2].get_base64()}",
             f"{paramiko.HostKeys.hash_host('10.0.0.1')} {rsa.get_name()} {rsa.get_base64()}",
             f"10.0.0.1 {ed[3].get_name()} {ed[3].get_base64()}",  # a second key of one type: the first wins
             f"@cert-authority *.example {ed[3].get_name()} {ed[3].get_base64()}",
             "10.0.0.4 ssh-ed25519 !!!not-base64!!!",
             "# a comment", ""]
    path = tmp_path / "known_hosts"
    path.write_text("\n".join(lines) + "\n")
    clean = tmp_path / "clean"  # paramiko itself raises on the marker and the broken line
    clean.write_text("\n".join(line for line in lines if not line.startswith(("@", "10.0.0.4"))) + "\n")
    theirs = paramiko.HostKeys(str(clean))
    KnownHosts.forget_all()
    ours = KnownHosts.get(str(path))
    for name in ("10.0.0.1", "10.0.0.2", "[10.0.0.3]:2222", "n3", "10.0.0.3", "10.0.0.4", "*.example", "x"):
        expect = theirs.lookup(name)
        expect = {t: expect[t].asbytes() for t in expect.keys()} if expect else {}
        assert {t: k.asbytes() for t, k in ours.lookup(name).items()} == expect, name
    ours.verify("10.0.0.1", 22, ed[0], "strict")
    ours.verify("10.0.0.1", 22, rsa, "strict")
    ours.verify("10.0.0.2", 22, ed[1], "strict")
    ours.verify("10.0.0.3", 2222, ed[2], "strict")
    with pytest.raises(HostKeyRejected, match="CHANGED"):
        ours.verify("10.0.0.2", 22, ed[0], "strict")
    with pytest.raises(HostKeyRejected, match="unknown host key"):
        ours.verify("10.0.0.4", 22, ed[0], "strict")


def test_a_key_accepted_new_is_known_to_the_next_lookup(tmp_path, host_key):
    path = tmp_path / "known_hosts"
    KnownHosts.forget_all()
    known = KnownHosts.get(str(path))
    assert known.key_types("10.9.8.7", 22) == []
    known.verify("10.9.8.7", 22, host_key, "accept-new")
    assert known.key_types("10.9.8.7", 22) == [host_key.get_name()]
    known.verify("10.9.8.7", 22, host_key, "strict")


def _ed25519(folder, i: int) -> str:
    path = folder / f"host{i}"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, timeout=30)
    return str(path)


@pytest.mark.parametrize("salt_len", [0, 1, 20, 64, 65, 200])
def test_precomputed_hmac_states_give_hmac_sha1(salt_len):
    """The lookup's HMAC (inner and outer SHA-1 states made once per salt) is RFC 2104's, for
    OpenSSH's 20-byte salts and for any other length a hand-made line may carry."""
    import hashlib
    import hmac

    from preflight.transport.hostkeys import _pads

    salt = os.urandom(salt_len)
    inner, outer = _pads(salt)
    for name in (b"10.9.8.7", b"[node01]:2222", b""):
        h = inner.copy()
        h.update(name)
        o = outer.copy()
        o.update(h.digest())
        assert o.digest() == hmac.new(salt, name, hashlib.sha1).digest()
