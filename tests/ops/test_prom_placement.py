"""The .prom file reaches node_exporter's textfile collector atomically: the temp file is written
in the target's own directory (a rename within one filesystem, never a copy across), and its name
never ends in `.prom` (the collector reads every `*.prom` in the directory, so a temp named so
would be scraped half-written)."""
from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from preflight import atomic
from preflight.cli import main

REPLAY = Path(__file__).resolve().parents[1] / "fixtures" / "replay" / "ascend128"


def test_prom_temp_file_is_beside_the_target_and_never_named_prom(tmp_path, monkeypatch, ascend128_recording):
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    renames = []
    real = os.replace

    def spy(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        where = [os.readlink(f"/proc/self/fd/{fd}") for fd in (src_dir_fd, dst_dir_fd) if fd is not None]
        renames.append((src, dst, where))
        assert sorted(os.listdir(textfile)) and not any(n.endswith(".prom") for n in os.listdir(textfile)
                                                         if n != "preflight.prom"), os.listdir(textfile)
        return real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(atomic.os, "replace", spy)
    target = textfile / "preflight.prom"
    r = CliRunner().invoke(main, ["run", str(REPLAY / "inventory.yaml"), "--replay", str(ascend128_recording),
                                  "--limit", "node001", "--checks", "npu.health", "--quiet",
                                  "--prom-output", str(target)])
    assert r.exit_code == 0, r.output
    [(src, dst, where)] = [x for x in renames if x[1] == "preflight.prom"]
    assert where == [str(textfile), str(textfile)]
    assert not src.endswith(".prom") and src.startswith(".")
    assert target.read_text().startswith("# HELP") and sorted(os.listdir(textfile)) == ["preflight.prom"]
