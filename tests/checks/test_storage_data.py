"""storage.data: existence, read/traverse permission, broken links, .bin/.idx pairs, bounded probes.

Probe outputs are what the probe printed on a Linux host with GNU findutils (captured by running
the command storage_data builds on a test tree), then trimmed per case; the probe itself is also
run here on a real temporary tree."""
from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from preflight.checks import storage_data as check
from preflight.checkapi import CommandOutput, ParseError, Status
from preflight.node import Node

NODE = Node("node01", "10.0.0.1", user="train", paths={"data": ["/data/gpt"]})


def _out(*lines: str, rc: int = 0) -> CommandOutput:
    return CommandOutput(stdout="".join(line + "\n" for line in lines), rc=rc)


HEAD = ("path=/data/gpt", "limit=20001", "kind=dir", "read=yes", "exec=yes")
GOOD = _out(*HEAD, "entry\tf\ta.bin", "entry\tf\ta.idx", "entry\tf\tsub/b.idx", "entry\tf\tsub/b.bin")


def _eval(out: CommandOutput):
    facts = check.parse({"data_0": out})
    return facts, check.evaluate(facts, check.DEFAULTS, NODE)


def test_probe_is_bounded_and_quoted():
    node = Node("n", "h", paths={"data": ["/d a", "/e"]})
    p = check.probes(node, check.DEFAULTS)
    assert set(p) == {"data_0", "data_1"}
    assert "p='/d a'" in p["data_0"].cmd and "-maxdepth 3" in p["data_0"].cmd and "head -n 20001" in p["data_0"].cmd
    assert p["data_0"].timeout == 30


def test_complete_dataset_passes():
    facts, [f] = _eval(GOOD)
    assert f.status is Status.PASS and facts.paths[0].bins == ("a.bin", "sub/b.bin")


def test_bin_without_idx_fails_naming_both():
    _, [f] = _eval(_out(*HEAD, "entry\tf\ta.bin", "entry\tf\ta.idx", "entry\tf\tsub/b.bin"))
    assert f.status is Status.FAIL and "sub/b.bin without sub/b.idx" in f.summary
    assert f.details["unpaired"] == [["sub/b.bin", "sub/b.idx"]] and "rsync" in f.remediation


def test_idx_without_bin_fails():
    _, [f] = _eval(_out(*HEAD, "entry\tf\ta.idx"))
    assert f.status is Status.FAIL and "a.idx without a.bin" in f.summary


def test_symlinked_bin_counts_as_file():
    _, [f] = _eval(_out(*HEAD, "entry\tf\tc.bin", "entry\tf\tc.idx"))  # %Y of a link to a file is f
    assert f.status is Status.PASS


def test_broken_link_fails():
    _, [f] = _eval(_out(*HEAD, "entry\tN\tdead", "entry\tf\ta.bin", "entry\tf\ta.idx"))
    assert f.status is Status.FAIL and "broken symbolic links under /data/gpt: dead" in f.summary


def test_missing_path_fails():
    _, [f] = _eval(_out("path=/data/gpt", "limit=20001", "state=missing"))
    assert f.status is Status.FAIL and "does not exist" in f.summary


def test_path_itself_broken_link_fails():
    _, [f] = _eval(_out("path=/data/gpt", "limit=20001", "state=broken_link"))
    assert f.status is Status.FAIL and "broken symbolic link" in f.summary


def test_unreadable_dir_fails_naming_user():
    _, [f] = _eval(_out("path=/data/gpt", "limit=20001", "kind=dir", "read=no", "exec=no"))
    assert f.status is Status.FAIL and "not readable by train" in f.summary and "u:train:rX" in f.remediation


def test_untraversable_dir_fails():
    _, [f] = _eval(_out("path=/data/gpt", "limit=20001", "kind=dir", "read=yes", "exec=no"))
    assert f.status is Status.FAIL and "traverse" in f.summary


def test_unreadable_entry_below_fails():
    _, [f] = _eval(_out(*HEAD, "entry\tf\ta.bin", "entry\tf\ta.idx", "unreadable\td\tsecret"))
    assert f.status is Status.FAIL and "1 entries under /data/gpt not readable by train: secret" in f.summary


def test_megatron_prefix_complete_and_incomplete():
    good = _out("path=/data/pre_text_document", "limit=20001", "kind=prefix",
                "entry\tf\tpre_text_document.bin", "entry\tf\tpre_text_document.idx")
    bad = _out("path=/data/pre_text_document", "limit=20001", "kind=prefix", "entry\tf\tpre_text_document.bin")
    assert _eval(good)[1][0].status is Status.PASS
    assert "pre_text_document.bin without pre_text_document.idx" in _eval(bad)[1][0].summary


def test_truncated_listing_is_noted():
    facts, [f] = _eval(_out("path=/data/gpt", "limit=2", "kind=dir", "read=yes", "exec=yes",
                            "entry\tf\ta.bin", "entry\tf\ta.idx"))
    assert facts.paths[0].truncated and "truncated" in f.summary


def test_stale_mount_timeout_is_parse_error():
    with pytest.raises(ParseError, match="timed out"):
        check.parse({"data_0": CommandOutput(stdout="path=/data/gpt\nlimit=20001\n", rc=124, timed_out=True, duration_s=30)})


def test_garbage_is_parse_error():
    with pytest.raises(ParseError):
        check.parse({"data_0": _out("hello")})


def test_no_data_paths_skips():
    [f] = check.evaluate(check.parse({}), check.DEFAULTS, Node("n", "h"))
    assert f.status is Status.SKIP


def _run_probe(path, as_nobody=False):
    pre = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if as_nobody else []
    cmd = check.probes(Node("n", "h", paths={"data": [str(path)]}), check.DEFAULTS)["data_0"].cmd
    r = subprocess.run(pre + ["sh", "-c", cmd], capture_output=True, text=True)
    return check.parse({"data_0": CommandOutput(r.stdout, r.stderr, r.returncode)}).paths[0]


def test_probe_on_a_real_tree(tmp_path):
    (tmp_path / "sub").mkdir()
    for f in ("a.bin", "a.idx", "sub/b.bin"):
        (tmp_path / f).write_text("x")
    (tmp_path / "dead").symlink_to("/nonexistent/target")
    d = _run_probe(tmp_path)
    assert d.kind == "dir" and d.broken_links == ("dead",) and d.unreadable == ()
    assert check.unpaired(d) == [("sub/b.bin", "sub/b.idx")]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to an unprivileged user")
def test_probe_as_unprivileged_user():
    # pytest's tmp_path sits under a 0700 directory; nobody must be able to reach the tree
    with tempfile.TemporaryDirectory() as top:
        root = Path(top)
        os.chmod(root, 0o755)
        secret = root / "secret"
        secret.mkdir(mode=0o700)
        d = _run_probe(root, as_nobody=True)
        assert d.state == "ok" and d.unreadable == ("secret",)
        assert not _run_probe(secret, as_nobody=True).readable
