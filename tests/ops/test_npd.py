"""node-problem-detector's custom plugin protocol: the example config in docs/ is run exactly as NPD
runs a rule (kubernetes/node-problem-detector, pkg/custompluginmonitor/plugin/plugin.go: its path
and args, the smaller of the rule's and the global timeout, at most 4 KiB of stdout, trimmed, cut
to max_output_length, exit 0 OK / 1 NonOK / other Unknown), and the one line is held to that shape."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from preflight.model import NodeState, NodeStateKind, Report, Result, Status
from preflight.report import npd, render

CONFIG = Path(__file__).resolve().parents[2] / "docs/npd/preflight-plugin-monitor.json"
NPD_STDOUT_CAP = 4 * 1024  # maxCustomPluginBufferBytes


def seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+)s", text)
    assert m, f"a duration NPD's config reads: {text}"
    return float(m.group(1))


def run_like_npd(rule: dict, plugin: dict, env: dict | None = None) -> tuple[str, str]:
    """(status, message) as NPD derives them from one run of the rule's command (on its timeout
    NPD kills the plugin: here its whole process group, so no probe outlives the test)."""
    import os
    import signal

    path = rule["path"]
    if path == "/usr/local/bin/preflight" and not Path(path).exists():  # installed elsewhere here
        path = shutil.which("preflight")
    timeout = min(seconds(rule.get("timeout", plugin["timeout"])), seconds(plugin["timeout"]))
    p = subprocess.Popen([path, *rule.get("args", [])], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env, start_new_session=True)
    try:
        stdout, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return "Unknown", "timeout"
    out = stdout[:NPD_STDOUT_CAP].decode(errors="replace").strip()[: plugin["max_output_length"]]
    return {0: "OK", 1: "NonOK"}.get(p.returncode, "Unknown"), out


def test_the_example_config_runs_as_npd_runs_it():
    cfg = json.loads(CONFIG.read_text())
    assert cfg["plugin"] == "custom" and cfg["pluginConfig"]["max_output_length"] == 80
    conditions = {c["type"] for c in cfg["conditions"]}
    [rule] = cfg["rules"]
    assert rule["type"] == "permanent" and rule["condition"] in conditions
    assert seconds(rule["timeout"]) > float(rule["args"][rule["args"].index("--deadline") + 1]), \
        "the gate's deadline must end before NPD kills it"
    # The rule as written, on this host whatever it has (an NPU or not): the NPD shape for any exit.
    status, message = run_like_npd(rule, cfg["pluginConfig"])
    assert status in ("OK", "NonOK", "Unknown") and message and "\n" not in message and len(message) <= 80, message
    assert message.startswith({"OK": "preflight ready: ", "NonOK": "NOT READY: ", "Unknown": "could not tell: "}[status])


def stub_node(tmp_path: Path, npu_smi_hangs: bool = False) -> dict:
    """This host made an 8-NPU Ascend node whatever it has: the simulator's tree (npu-smi,
    hccn_tool, set_env.sh, the driver and toolkit version files) under tmp_path, first on PATH, and
    a minimal inventory naming it (config `inventory`: the rule's args name none). The environment
    to run the rule in."""
    import os

    from preflight.sim.spec import NodeSpec
    from preflight.sim.state import build_state, device_ip_count
    from preflight.sim.tree import write_tree

    node = tmp_path / "node"
    spec = NodeSpec(name="npu01", index=1, backend="ascend")
    state = build_state(spec, "127.0.0.1", [f"198.18.8.{i + 1}" for i in range(device_ip_count(spec))],
                        "255.255.255.0", "lo", "lo")
    write_tree(node, state, str(node / "ascend"))
    if npu_smi_hangs:  # a driver call that never returns
        (node / "bin" / "npu-smi").write_text("#!/bin/sh\nexec sleep 60\n")
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"defaults:\n  backend: ascend\n  ascend_home: {node / 'ascend'}\n"
                   f"  env_files: [{node / 'ascend' / 'ascend-toolkit' / 'set_env.sh'}]\n"
                   "nodes:\n  - {name: elsewhere, host: 192.0.2.1}\n")
    home = tmp_path / "cfg"
    (home / "preflight").mkdir(parents=True)
    return {**os.environ, "PATH": f"{node / 'bin'}:{os.environ['PATH']}", "PREFLIGHT_INVENTORY": str(inv),
            "XDG_CONFIG_HOME": str(home), "XDG_STATE_HOME": str(tmp_path / "state")}


def test_ok_problem_and_unknown_as_npd_runs_the_rule(tmp_path):
    """The docs/npd rule, as NPD runs it, on a stub Ascend node (deterministic with or without an
    NPU here): healthy is OK with `preflight ready`; the toolkit gone is NonOK naming cann.env; a
    hung npu-smi past NPD's timeout is Unknown."""
    cfg = json.loads(CONFIG.read_text())
    [rule] = cfg["rules"]
    rule = {**rule, "path": preflight_path(tmp_path)}
    plugin = cfg["pluginConfig"]
    env = stub_node(tmp_path / "healthy")
    report = subprocess.run([rule["path"], "gate", "--local", "--format", "json", "--deadline", "30"],
                            capture_output=True, env=env, timeout=60)
    doc = json.loads(report.stdout)
    host_bound = [r for r in doc["results"] if r["status"] == "fail" and r["check"] in ("env.comm", "net.ports")]
    if host_bound:  # what these judge is the host's own network, which no stub replaces
        pytest.skip(f"this host's network fails {host_bound[0]['check']}: {host_bound[0]['summary'][:120]}")
    status, message = run_like_npd(rule, plugin, env)
    assert (status, message) == ("OK", message) and message.startswith("preflight ready: "), message

    env = stub_node(tmp_path / "no-toolkit")
    (tmp_path / "no-toolkit" / "node" / "ascend" / "ascend-toolkit" / "set_env.sh").unlink()
    status, message = run_like_npd(rule, plugin, env)
    assert status == "NonOK" and message.startswith("NOT READY: cann.env ") and len(message) <= 80, message

    env = stub_node(tmp_path / "hung", npu_smi_hangs=True)
    status, message = run_like_npd({**rule, "timeout": "3s"}, plugin, env)
    assert (status, message) == ("Unknown", "timeout")


def report(results, nodes=None, **kw) -> Report:
    return Report(started_at="2026-12-04T00:00:00Z", finished_at="2026-12-04T00:00:01Z", inventory_path="inv.yaml",
                  inventory_sha256="0" * 64, nodes=tuple(nodes or [NodeState("n1", "10.0.0.1")]),
                  results=tuple(results), cluster="c", **kw)


def test_the_line_by_verdict():
    ok = report([Result("npu.health", "n1", Status.PASS, "8 chips OK")])
    assert npd.line(ok) == "preflight ready: 1 checks passed" and ok.exit_code == 0
    bad = report([Result("npu.health", "n1", Status.FAIL, "device 3 health Alarm, expected OK; " + "x" * 80),
                  Result("hccn.link", "n1", Status.FAIL, "device 5 link DOWN")])
    text = npd.line(bad)
    assert text.startswith("NOT READY: npu.health device 3 health Alarm") and len(text) == 80
    assert text.endswith("...")
    down = report([], nodes=[NodeState("n1", "10.0.0.1", NodeStateKind.TIMEOUT, "no answer in 10 s")])
    assert npd.line(down) == "could not tell: n1 timeout: no answer in 10 s" and down.exit_code == 3


def test_node_text_cannot_break_the_line():
    hostile = report([Result("gpu.idle", "n1", Status.FAIL, "pid 7 \x1b[31mevil\nsecond line\r\x07 holds 8 GiB")])
    out = render(hostile, "npd")
    assert out.count("\n") == 1 and "\x1b" not in out and "\r" not in out and "\x07" not in out
    assert out == "NOT READY: gpu.idle pid 7 evil second line holds 8 GiB\n"


def preflight_path(tmp_path: Path) -> str:
    """An executable that runs this checkout's preflight, for a rule's `path` (NPD runs a path)."""
    import sys

    exe = tmp_path / "preflight"
    root = Path(__file__).resolve().parents[2]
    exe.write_text(f"#!/bin/sh\nPYTHONPATH={root} exec {sys.executable} -m preflight.cli \"$@\"\n")
    exe.chmod(0o755)
    return str(exe)


def test_a_refusal_before_the_run_is_one_unknown_line(tmp_path):
    """`gate --format npd` that refuses to start (a bad option or value, an empty --checks, a
    missing inventory) still answers NPD: one line on stdout, `could not tell: reason`, at most 80
    characters, and an exit code NPD reads as Unknown (the refusal's own 2), never an empty message."""
    cfg = json.loads(CONFIG.read_text())
    [rule] = cfg["rules"]
    for extra in (["--bogus"], ["--deadline", "0"], ["--checks", ""], ["--limit", ","],
                  ["--dry-run"], [str(tmp_path / "no-such-inventory.yaml")],
                  ["--exclude-out", str(tmp_path / "no-dir" / "bad.txt")]):
        args = [a for a in rule["args"] if a != "--local"] if extra[0].endswith(".yaml") else list(rule["args"])
        raw = subprocess.run([preflight_path(tmp_path), *args, *extra], capture_output=True, timeout=30)
        assert raw.returncode not in (0, 1), (extra, raw)
        assert raw.stdout.count(b"\n") == 1 and len(raw.stdout) <= 81, (extra, raw.stdout)
        status, message = run_like_npd({**rule, "path": preflight_path(tmp_path), "args": args + extra},
                                       cfg["pluginConfig"])
        assert status == "Unknown" and message.startswith("could not tell: ") and len(message) <= 80, (extra, message)
    # the same refusal without --format npd leaves stdout alone (the line is on stderr)
    plain = subprocess.run([preflight_path(tmp_path), "gate", "--local", "--bogus"], capture_output=True, timeout=30)
    assert plain.returncode == 2 and plain.stdout == b""
