"""Secrets never leave in an output: `--record` recordings (meant for bug reports), inventory
error messages and reports all redact secret-named values with one rule (preflight.redact)."""
from __future__ import annotations

import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from preflight import redact
from preflight.inventory import InventoryError, load
from preflight.runner import Options, Runner
from preflight.transport.local import LocalTransport
from preflight.transport.replay import Recorder, ReplayTransport
from tests.core.test_cli import pf
from tests.core.test_local_runner import checks  # noqa: F401 - fixture

INV_SECRET = "inv-s3cr3t-'quoted' value"
FILE_SECRET = "envfile-s3cr3t-9f8e7d"
CHECKS = ["env.comm", "sw.consistency", "cann.env"]  # all three read the launch environment


@pytest.fixture
def secret_inventory(tmp_path: Path) -> Path:
    env_file = tmp_path / "secrets.sh"
    env_file.write_text(f"export DB_PASSWORD={FILE_SECRET}\n")
    inv = tmp_path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        nodes:
          - name: n1
            host: localhost
            python: {sys.executable}
            env_files: [{env_file}]
            env:
              HF_TOKEN: "{INV_SECRET.replace('"', '')}"
              PLAIN_SETTING: visible-value
        """))
    return inv


def _summaries(report) -> list[tuple]:
    return sorted((r.check, r.node, r.status.value, r.summary) for r in report.results)


def test_recording_is_redacted_private_and_replays(secret_inventory: Path, tmp_path: Path):
    inv = load(secret_inventory, ssh_config=str(tmp_path / "no-ssh-config"))
    folder = tmp_path / "rec"
    rec = Recorder(str(folder))
    live = Runner(inv, LocalTransport(), Options(checks=CHECKS), recorder=rec).run()
    rec.write()

    files = sorted(folder.iterdir())
    assert [f.name for f in files] == ["n1.json"]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    text = files[0].read_text()
    assert INV_SECRET.replace('"', "").split("'")[0] not in text and FILE_SECRET not in text
    assert "export HF_TOKEN=********" in text, "the launch script's export is redacted, not dropped"
    assert "DB_PASSWORD=********" in text and "HF_TOKEN=********" in text  # the env -0 records
    assert "visible-value" in text, "only secret-named values are redacted"

    replayed = Runner(inv, ReplayTransport(str(folder)), Options(checks=CHECKS)).run()
    assert "not in the recording" not in repr(replayed)
    assert _summaries(replayed) == _summaries(live)


def test_recording_folder_is_0700_whatever_the_umask(tmp_path: Path):
    old = os.umask(0)
    try:
        Recorder(str(tmp_path / "deep" / "rec"))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "deep" / "rec").stat().st_mode) == 0o700


def test_redact_command_at_every_quoting_depth():
    import shlex

    env = {"API_TOKEN": "it's secret", "HOME_DIR": "/home/x"}
    plain = f"export API_TOKEN={shlex.quote(env['API_TOKEN'])}; export HOME_DIR=/home/x"
    for text in (plain, f"bash -c {shlex.quote(plain)}", f"sh -c {shlex.quote('bash -c ' + shlex.quote(plain))}"):
        out = redact.command(text, env)
        assert "secret" not in out and "export API_TOKEN=********" in out and "/home/x" in out


@pytest.mark.parametrize("body", [
    "env: {API_TOKEN: 0x5ec7e7}",            # YAML 1.1 trap message
    "env: {DB_PASSWORD: [hunter2x]}",        # wrong type message
    "env: {AWS_SECRET_ACCESS_KEY: {a: hunter2x}}",
])
def test_inventory_errors_never_echo_a_secret_value(tmp_path: Path, body: str):
    p = tmp_path / "inv.yaml"
    p.write_text(f"nodes:\n  - name: a\n    host: h\n    {body}\n")
    with pytest.raises(InventoryError) as exc:
        load(p, ssh_config=str(tmp_path / "none"))
    msg = str(exc.value)
    assert f"{p}:4" in msg and "hunter2x" not in msg and "5ec7e7" not in msg, msg
    res = pf("run", str(p))
    assert res.returncode == 2 and "hunter2x" not in res.stderr + res.stdout and "5ec7e7" not in res.stderr


def test_a_plain_key_error_still_shows_its_value(tmp_path: Path):
    p = tmp_path / "inv.yaml"
    p.write_text("nodes:\n  - name: a\n    host: h\n    env: {HCCL_BUFFSIZE: 0x1A}\n")
    with pytest.raises(InventoryError, match="0x1A"):
        load(p, ssh_config=str(tmp_path / "none"))


def test_reports_redact_what_a_check_echoed(checks, tmp_path: Path):
    """A check that echoes the launch command or a secret value into a finding: every reporter
    reads the Report, and the Report holds the marker instead of the value."""
    from preflight import launchenv
    from preflight.checkapi import Finding, Status, cmd
    from preflight.report.json_report import render
    from tests.core.test_local_runner import node_check

    def evaluate(facts, params, node):
        return [Finding(Status.FAIL, f"saw {node.env['HF_TOKEN']}", {"env": dict(node.env), "out": facts},
                        remediation=f"run `{launchenv.command(node, 'env')}`")]

    checks(node_check("fake.leaky", probes=lambda n, p: {"e": cmd("printf '%s' \"$HF_TOKEN\"")},
                      evaluate=evaluate))
    p = tmp_path / "inv.yaml"
    p.write_text('nodes:\n  - name: n1\n    host: localhost\n    env: {HF_TOKEN: "hf_abcdef123456", MODE: "x"}\n')
    rep = Runner(load(p, ssh_config=str(tmp_path / "none")), LocalTransport(), Options()).run()
    text = render(rep)
    assert "hf_abcdef123456" not in text and "hf_abcdef123456" not in repr(rep)
    r = next(x for x in rep.results if x.check == "fake.leaky")
    assert "export HF_TOKEN=********" in r.remediation and r.details["env"]["MODE"] == "x"


def test_secret_name_answers_each_name_for_itself():
    """is_secret: a name asked again gets its own answer back, whatever was asked in between."""
    from preflight import redact

    assert redact.is_secret("HF_TOKEN") and not redact.is_secret("HF_HOME")
    assert redact.is_secret("HF_TOKEN") and not redact.is_secret("HF_HOME")
    assert redact.is_secret("API_KEY") and not redact.is_secret("KEYBOARD")
    assert not redact.is_secret("PATH") and redact.is_secret("DB_PASSWORD") and not redact.is_secret("PATH")
    assert redact.is_secret("X_TOKEN") and not redact.is_secret(42)  # anything, as its text


# Secret shapes whose names say nothing (AWS_ACCESS_KEY_ID ends in _ID, PIP_INDEX_URL is a URL):
# each is what a real credential of that kind looks like (AWS's documented example key id).
SHAPED = {
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
    "PIP_INDEX_URL": "https://alice:Zq8-pass-w0rd@pypi.internal.example/simple",
    "DB_PWD": "pwd-4e3c2b1a",
    "CI_NOTE": "ghp_" + "a1B2c3D4e5" * 4,
    "HOOK": "xoxb-1234567890-abcdefghijkl",
    "SESSION": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXNpZ25hdHVyZQ",
}
LEAKS = ["AKIAIOSFODNN7EXAMPLE", "Zq8-pass-w0rd", "pwd-4e3c2b1a", "a1B2c3D4e5a1B2c3D4e5", "abcdefghijkl",
         "c2lnbmF0dXJlLXNpZ25hdHVyZQ", "node-said-s3cretvalue"]


def test_secret_shapes_are_redacted_in_recording_json_and_history(checks, tmp_path: Path):
    """By value shape, whatever the name: the inventory's env (sent to the node), what the node
    printed (a URL with a password, `password=` in a config), in --record, the JSON report and
    the history database."""
    import sqlite3

    from preflight.checkapi import Finding, Status, cmd
    from preflight.ops import history as hist
    from preflight.report.json_report import render
    from tests.core.test_local_runner import node_check

    printed = "index-url = https://bob:node-said-s3cretvalue@mirror.example/simple\npassword=node-said-s3cretvalue\n"
    checks(node_check("fake.leaky", probes=lambda n, p: {"cfg": cmd("printf '%s' {t}", t=printed),
                                                         "env": cmd("env")},
                      evaluate=lambda facts, params, node: [Finding(Status.FAIL, f"saw {facts['cfg']}",
                                                                    {"out": facts, "env": dict(node.env)},
                                                                    remediation="rotate it")]))
    env = "".join(f"      {k}: \"{v}\"\n" for k, v in SHAPED.items())
    p = tmp_path / "inv.yaml"
    p.write_text(f"nodes:\n  - name: n1\n    host: localhost\n    env:\n{env}")
    folder = tmp_path / "rec"
    rec = Recorder(str(folder))
    rep = Runner(load(p, ssh_config=str(tmp_path / "none")), LocalTransport(), Options(), recorder=rec).run()
    rec.write()
    db_path = tmp_path / "h.sqlite"
    hist.store(hist.open_db(db_path), rep)
    outputs = {"record": (folder / "n1.json").read_text(), "json": render(rep),
               "history": "\n".join(sqlite3.connect(db_path).iterdump())}
    for where, text in outputs.items():
        leaked = [s for s in LEAKS if s in text]
        assert not leaked, f"{where} leaks {leaked}"
    assert "https://bob:********@mirror.example" in outputs["json"]  # what it was stays readable
    assert "AWS_ACCESS_KEY_ID" in outputs["json"], outputs["json"][-1500:]


@pytest.mark.parametrize("text, kept", [
    ("PWD=/home/alice/work", True), ("ssh auth: publickey", True), ("host key ok (ssh-ed25519)", True),
    ("see https://docs.example/x", True), ("max_tokens=4096", True), ("OLDPWD=/tmp/xyzabc", True),
])
def test_ordinary_text_is_not_taken_for_a_secret(text, kept):
    assert (redact.shapes(text) == text) is kept


# Fragments for the secret-shape scan's oracle: each real shape, the same cut short or run into a
# word, long tokens (a JWT whose payload is past any window), and the near misses every report holds.
_FRAGMENTS = [
    *SHAPED.values(), "password=hunter2-x", '"token": "abcdef123"', "api_key: zq9x8c7v", "access-key = qwertyui",
    "Secret='s3cr3t-v'", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE\n-----END OPENSSH PRIVATE KEY-----",
    "eyJhbGciOiJSUzI1NiJ9.eyJ" + "x" * 2000 + ".c2lnbmF0dXJlLXNpZ25hdHVyZQ", "hf_" + "Ab1" * 12,
    "AKIAIOSFODNN7EXAMPL", "xAKIAIOSFODNN7EXAMPLE", "ghp_short", "password=abc", "token=********",
    "connected as root; host key verified", "see https://docs.example/x", "key", "KEY:", "max_tokens=4096",
    "PWD=/home/alice", "eyJ", "://", "passwd", " ", "\n", '\\"', "é", "中", "ß", "K", "=", ":", "'", '"',
]


def test_the_secret_scan_of_a_whole_report_answers_as_the_plain_search(ascend128_recording):
    """redact._shaped, the scan has_shape() runs over a whole report, finds a secret shape exactly
    where the plain search of every shape at once does: on the 128-node recording's real report
    (none, then with one secret planted at its end) and on 3,000 generated texts."""
    import random

    import orjson

    from preflight import runner
    from tests.conftest import ASCEND128

    inv = load(str(ASCEND128 / "inventory.yaml"))
    report = runner.run(inv, ReplayTransport(str(ascend128_recording)), runner.Options())
    text = orjson.dumps([(x.summary, x.details, x.remediation) for x in report.results],
                        option=orjson.OPT_NON_STR_KEYS, default=str).decode()
    assert len(text) > 500_000 and "host key" in text
    plain = lambda t: redact._ANY_SHAPE.search(t) is not None  # noqa: E731
    for t in (text, text + SHAPED["AWS_ACCESS_KEY_ID"], SHAPED["SESSION"] + text, text + "password=hunter2-x"):
        assert redact._shaped(t) == plain(t)
    rnd = random.Random(31)
    found = 0
    for _ in range(3000):
        t = "".join(rnd.choice(_FRAGMENTS) if rnd.random() < 0.6 else rnd.choice("abcAKIA_-:=/@ ")
                    for _ in range(rnd.randint(1, 12)))
        assert redact._shaped(t) == plain(t), t
        found += plain(t)
    assert 300 < found < 2700  # both answers occur often
