"""No secret of the inventory's `env:` in any process's command line on a node (issue 29, finding 3).

/proc/PID/cmdline is readable by every user of a node: the driver script, with every `export
NAME='value'`, was an argument of `bash -c` for the whole run, and each probe's text one of `sh -c`.
Here a real `preflight run` over the simulated cluster (sshd per node; its processes are this
host's) carries secrets of several shapes (a token, an AWS key pair, a URL with a password, a value
with quotes and spaces, one with a newline) through the checks that build the launch environment,
as the login user and through `sudo -n`, while a thread reads every process's cmdline as fast as it
can. Each secret carries a random fragment no quoting changes; none may appear.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import threading
from pathlib import Path

import yaml

from tests.simfixtures import requires_netns

pytestmark = requires_netns
SIM_SPEC = {"cluster": "secrets", "nodes": [{"name": "rootnode"},
                                            {"name": "opnode", "login_user": "pfsec", "sudo": "nopasswd"}]}
SIM_MODE = "netns"


def shapes(tag: str) -> dict[str, str]:
    return {"HF_TOKEN": f"hf_{tag}a", "AWS_ACCESS_KEY_ID": f"AKIA{tag.upper()[:16]}",
            "AWS_SECRET_ACCESS_KEY": f"wJalr/{tag}b+K7MDENG", "DATA_URL": f"https://user:{tag}c@data.example/x",
            "DB_PASSWORD": f"p@ss w'rd \"{tag}d\" $(x)", "MULTI_LINE_KEY": f"line1\n{tag}e\nline3"}


def poll_cmdlines(stop: threading.Event, seen: list[bytes]) -> None:
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        seen.append(f.read())
                except OSError:
                    continue


@contextlib.contextmanager
def cmdlines_seen():
    """Every process's command line read as fast as a thread can while the block runs."""
    stop, seen = threading.Event(), []
    poller = threading.Thread(target=poll_cmdlines, args=(stop, seen), daemon=True)
    poller.start()
    try:
        yield seen
    finally:
        stop.set()
        poller.join(10)


def with_secrets(inventory_path: str, tmp_path: Path, tag: str) -> Path:
    """A copy of the inventory whose defaults' env carries every secret shape, marked by `tag`."""
    doc = yaml.safe_load(Path(inventory_path).read_text())
    doc.setdefault("defaults", {}).setdefault("env", {}).update(shapes(tag))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(doc, sort_keys=False))
    return inv


def test_no_secret_in_any_command_line_during_a_run(sim_cluster, tmp_path):
    tag = secrets.token_hex(10)
    inv = with_secrets(sim_cluster.inventory_path, tmp_path, tag)
    with cmdlines_seen() as seen:
        env = {k: v for k, v in os.environ.items() if k != "PREFLIGHT_DEBUG"}
        res = subprocess.run(["preflight", "run", str(inv), "--checks", "env,sw,cann.env,npu.health,storage.disk",
                              "--format", "json"], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode in (0, 1), res.stderr
    assert any(c.startswith(b"timeout\0-k\0") for c in seen), "the poller saw no probe of the nodes"
    leaked = sorted({c.replace(b"\0", b" ")[:160].decode(errors="replace") for c in seen if tag.encode() in c
                     or tag.upper()[:16].encode() in c})
    assert not leaked, f"a secret in {len(leaked)} command line(s), e.g. {leaked[0]!r}"
    assert tag not in res.stdout  # and redacted in the report


def test_no_secret_in_any_command_line_during_env_fix_and_gate(sim_cluster, tmp_path):
    """The other commands that reach nodes with the inventory's env: `env` (reads the launch
    environment), `fix` (its checks and plan) and `gate`, polled the same way."""
    tag = secrets.token_hex(10)
    inv = with_secrets(sim_cluster.inventory_path, tmp_path, tag)
    env = {k: v for k, v in os.environ.items() if k != "PREFLIGHT_DEBUG"}
    runs = (["env", str(inv), "--format", "json"], ["fix", str(inv), "--out-dir", str(tmp_path / "fix")],
            ["gate", str(inv), "-q"])
    with cmdlines_seen() as seen:
        results = [subprocess.run(["preflight", *argv], capture_output=True, text=True, timeout=300, env=env)
                   for argv in runs]
    for argv, res in zip(runs, results):
        assert "Traceback" not in res.stderr and res.returncode in (0, 1), (argv[0], res.stderr)
    assert any(c.startswith(b"timeout\0-k\0") for c in seen), "the poller saw no probe of the nodes"
    leaked = sorted({c.replace(b"\0", b" ")[:160].decode(errors="replace") for c in seen if tag.encode() in c
                     or tag.upper()[:16].encode() in c})
    assert not leaked, f"a secret in {len(leaked)} command line(s), e.g. {leaked[0]!r}"
