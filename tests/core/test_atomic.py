"""Reports are written atomically, and writing to a device (/dev/null, /dev/stdout) never replaces it."""
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
