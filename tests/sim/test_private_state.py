"""`preflight sim` as root keeps its state where no other user can prepare it (issue 29, F15).

Its fixed names under /tmp (the subnet lock, the host-dir registry, the default cluster directory
/tmp/preflight-sim) are refused when another user owns them, group or others can write them, or
they are links: root would otherwise lock, read and rmdir through what a local user planted, or
tear down what a planted record lists. Nothing here brings a cluster up.
"""
from __future__ import annotations

import json
import os
import stat

import pytest

from preflight.sim import cluster, netns, record
from preflight.sim.procs import SimError

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def test_the_lock_refuses_a_link_and_takes_its_own_file(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "net.lock"
    link.symlink_to(victim)
    with pytest.raises(OSError, match="symbolic link"):
        with netns.NetLock(str(link)):
            pass
    assert victim.read_text() == "precious\n"
    own = tmp_path / "own.lock"
    with netns.NetLock(str(own)):
        assert stat.S_IMODE(own.stat().st_mode) == 0o600


@needs_root
def test_the_lock_refuses_another_users_file(tmp_path):
    planted = tmp_path / "net.lock"
    planted.write_text("")
    os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(OSError, match="belongs to user"):
        with netns.NetLock(str(planted)):
            pass


def test_the_host_dir_registry_is_never_read_through_a_link(tmp_path, monkeypatch):
    """Root rmdirs what the registry lists: a planted link to a list of its choosing is refused."""
    listing = tmp_path / "list"
    listing.write_text(f"{tmp_path / 'keep-me'}\n")
    (tmp_path / "keep-me").mkdir()
    reg = tmp_path / "registry"
    reg.symlink_to(listing)
    monkeypatch.setattr(cluster, "HOST_DIR_REGISTRY", str(reg))
    with pytest.raises(OSError, match="symbolic link"):
        cluster._registry()


@pytest.mark.parametrize("hostile", ["link", "others-writable", "foreign-owned"])
def test_a_cluster_directory_another_user_prepared_is_refused(tmp_path, hostile):
    d = tmp_path / "preflight-sim"
    if hostile == "link":
        (tmp_path / "elsewhere").mkdir()
        d.symlink_to(tmp_path / "elsewhere")
    else:
        d.mkdir()
        if hostile == "others-writable":
            os.chmod(d, 0o777)
        else:
            if os.geteuid() != 0:
                pytest.skip("chown needs root")
            os.chown(d, NOBODY, NOBODY)
    (tmp_path / ("elsewhere" if hostile == "link" else "preflight-sim") / record.RECORD).write_text(
        json.dumps({"version": 1, "procs": [{"pid": 1}], "host_dirs": ["/etc"]}))
    for call in (lambda: cluster.Cluster.up({"nodes": 1}, dir=str(d)), lambda: cluster.Cluster.down_dir(str(d))):
        with pytest.raises(SimError, match="cluster directory .*(link|others can write|belongs to)"):
            call()


def test_a_missing_cluster_directory_is_made_0700(tmp_path):
    old = os.umask(0)
    try:
        got = record.directory(tmp_path / "a" / "sim", create=True)
    finally:
        os.umask(old)
    assert stat.S_IMODE(got.stat().st_mode) == 0o700 and stat.S_IMODE(got.parent.stat().st_mode) == 0o700


@needs_root
def test_a_record_another_user_wrote_is_never_acted_on(tmp_path):
    (tmp_path / record.RECORD).write_text(json.dumps({"version": 1, "host_dirs": ["/etc"]}))
    os.chown(tmp_path / record.RECORD, NOBODY, NOBODY)
    with pytest.raises(SimError, match="refusing to trust this cluster record"):
        record.load(tmp_path)
