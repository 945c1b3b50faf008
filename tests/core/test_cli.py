"""The command line as users and scripts see it: real processes, real exit codes, no tracebacks."""
from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from preflight import __version__
from preflight.registry import discover

TIMEOUT = 60


def pf(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PREFLIGHT_DEBUG", None)
    return subprocess.run(["preflight", *args], capture_output=True, text=True, timeout=TIMEOUT, cwd=cwd,
                          env=full_env)


def cli(*args: str):
    """In-process (click's CliRunner): enough where the exit code comes from sys.exit/click itself."""
    from click.testing import CliRunner

    from preflight.cli import main
    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    res.returncode = res.exit_code
    return res


def one_line_error(res) -> str:
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def refused_inventory(tmp_path) -> Path:
    p = tmp_path / "inv.yaml"
    p.write_text(f"nodes:\n  - name: n1\n    host: 127.0.0.1\n    port: {free_port()}\n    connect_timeout: 1\n")
    return p


def no_cfg(tmp_path: Path) -> list[str]:
    return ["--ssh-config", str(tmp_path / "no-ssh-config")]


# ---------------------------------------------------------------- informational commands

def test_version():
    res = cli("--version")
    assert res.returncode == 0 and __version__ in res.stdout


def test_help():
    res = cli("--help")
    assert res.returncode == 0 and "run" in res.stdout and "list-checks" in res.stdout


def test_list_checks_lists_every_check():
    res = cli("list-checks")
    assert res.returncode == 0, res.stderr
    listed = [ln.split()[0] for ln in res.stdout.splitlines() if ln.strip()]
    assert listed == list(discover())
    for line in res.stdout.splitlines():
        parts = line.split()
        assert parts[1] in ("node", "cluster") and len(parts) > 2, line


def test_explain_prints_the_docstring():
    res = cli("explain", "npu.health")
    assert res.returncode == 0
    doc = discover()["npu.health"].doc
    assert doc.splitlines()[0] in res.stdout
    assert doc.splitlines()[-1].strip() in res.stdout


def test_explain_unknown_check():
    res = cli("explain", "nope")
    assert res.returncode == 2
    assert "nope" in one_line_error(res) and res.stdout == ""


# ---------------------------------------------------------------- usage and inventory errors: exit 2

def test_run_missing_inventory(tmp_path):
    res = pf("run", str(tmp_path / "missing.yaml"))
    assert res.returncode == 2
    line = one_line_error(res)
    assert "missing.yaml" in line and "No such file" in line
    assert res.stdout == ""


def test_run_bad_inventory(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("nodes:\n  - name: a\n    host: h\n    prot: 22\n")
    res = cli("run", str(p), *no_cfg(tmp_path))
    assert res.returncode == 2
    line = one_line_error(res)
    assert f"{p}:4: prot:" in line and "port" in line


def test_run_yaml_trap(tmp_path):
    p = tmp_path / "trap.yaml"
    p.write_text("nodes:\n  - name: a\n    host: h\n    env: {HCCL_SOCKET_IFNAME: no}\n")
    res = cli("run", str(p), *no_cfg(tmp_path))
    assert res.returncode == 2 and "quote" in one_line_error(res)


def test_run_unknown_check_id(refused_inventory, tmp_path):
    res = pf("run", str(refused_inventory), "--checks", "npu.health,nope", *no_cfg(tmp_path))
    assert res.returncode == 2
    assert "nope" in one_line_error(res) and res.stdout == ""


def test_run_unknown_skip_id(refused_inventory, tmp_path):
    res = cli("run", str(refused_inventory), "--skip", "zzz", *no_cfg(tmp_path))
    assert res.returncode == 2 and "zzz" in one_line_error(res)


def test_run_limit_matching_nothing(refused_inventory, tmp_path):
    res = cli("run", str(refused_inventory), "--limit", "gpu[1-2]", *no_cfg(tmp_path))
    assert res.returncode == 2 and "no nodes selected" in one_line_error(res)


@pytest.mark.parametrize("cmd", ["run", "gate"])
@pytest.mark.parametrize("option", ["--limit", "--checks", "--skip"])
@pytest.mark.parametrize("value", ["", " ", ","])
def test_empty_selection_refused(refused_inventory, tmp_path, cmd, option, value):
    """`--limit "$SLURM_JOB_NODELIST"` with the variable empty must not mean the whole inventory."""
    res = cli(cmd, str(refused_inventory), option, value, *no_cfg(tmp_path))
    assert res.returncode == 2 and f"{option} {value!r} names no" in one_line_error(res)


def test_run_bad_option_is_usage_error(refused_inventory):
    res = cli("run", str(refused_inventory), "--format", "xml")
    assert res.returncode == 2 and "Traceback" not in res.stderr


# ---------------------------------------------------------------- inventory show

def test_inventory_show(tmp_path):
    p = tmp_path / "inv.yaml"
    p.write_text("cluster: demo\ndefaults: {user: ops, port: 2200}\n"
                 "nodes:\n  - name: node[01-03]\n    host: 10.0.0.[1-3]\n  - {name: login, host: 10.0.1.1, port: 22}\n")
    res = cli("inventory", "show", str(p), *no_cfg(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "4 nodes" in res.stdout and "demo" in res.stdout
    for i in (1, 2, 3):
        assert any(ln.startswith(f"node0{i} ") and f"ops@10.0.0.{i}:2200" in ln for ln in res.stdout.splitlines())
    assert any(ln.startswith("login ") and "ops@10.0.1.1:22" in ln for ln in res.stdout.splitlines())
    res = cli("inventory", "show", str(p), "--limit", "node02", *no_cfg(tmp_path))
    assert res.returncode == 0 and "1 nodes" in res.stdout and "node02" in res.stdout and "node01" not in res.stdout


def test_inventory_show_bad(tmp_path):
    p = tmp_path / "inv.yaml"
    p.write_text("nodes:\n  - name: a\n    host: 'a;b'\n")
    res = cli("inventory", "show", str(p), *no_cfg(tmp_path))
    assert res.returncode == 2 and f"{p}:3: host:" in one_line_error(res)


# ---------------------------------------------------------------- a run against a refused port

def test_refused_node_report(refused_inventory, tmp_path):
    res = pf("run", str(refused_inventory), "--format", "json", *no_cfg(tmp_path))
    assert res.returncode == 3, res.stderr
    assert "Traceback" not in res.stderr
    d = json.loads(res.stdout)
    assert (d["verdict"], d["exit_code"]) == ("incomplete", 3)
    assert d["nodes"] == [{"name": "n1", "host": "127.0.0.1", "state": "unreachable", "error": d["nodes"][0]["error"]}]
    assert "refused" in d["nodes"][0]["error"]
    by_check = {r["check"]: r for r in d["results"] if r["node"] == "n1"}
    conn = by_check.pop("ssh.connect")
    assert conn["status"] == "error" and "refused" in conn["summary"] and conn["remediation"]
    node_checks = {c for c, i in discover().items() if i.scope == "node" and c != "ssh.connect"}
    assert set(by_check) == node_checks
    for r in by_check.values():
        assert (r["status"], r["summary"]) == ("skip", "node unreachable"), r
    for r in d["results"]:
        assert r["node"] in ("n1", None)
        assert r["node"] is not None or r["status"] != "fail", "a cluster check blamed nobody for an unreachable node"


def test_run_selected_checks_only(refused_inventory, tmp_path):
    res = cli("run", str(refused_inventory), "--format", "json", "--checks", "npu", *no_cfg(tmp_path))
    d = json.loads(res.stdout)
    checks = {r["check"] for r in d["results"]}
    assert checks == {"ssh.connect"} | {c for c in discover() if c.startswith("npu.")}


def test_output_file_is_0600_json(refused_inventory, tmp_path):
    out = tmp_path / "report.json"
    res = pf("run", str(refused_inventory), "--format", "json", "--output", str(out), *no_cfg(tmp_path))
    assert res.returncode == 3
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    d = json.loads(out.read_text())
    assert d["schema"] == "preflight.report/1" and d["exit_code"] == 3
    assert "INCOMPLETE" in res.stdout  # the human summary on stdout
    assert not list(tmp_path.glob(".report.json.*")), "temp file of the atomic write left behind"


def test_output_quiet_prints_nothing(refused_inventory, tmp_path):
    out = tmp_path / "report.xml"
    res = pf("run", str(refused_inventory), "--format", "junit", "--output", str(out), "--quiet", *no_cfg(tmp_path))
    assert res.returncode == 3 and res.stdout == "" and res.stderr == ""
    import xml.etree.ElementTree as ET
    assert ET.parse(out).getroot().tag == "testsuites"


@pytest.mark.parametrize("cmd, option", [("run", "--output"), ("run", "--prom-output"), ("gate", "--output"),
                                         ("gate", "--exclude-out"), ("gate", "--good-out")])
@pytest.mark.parametrize("target", ["missing-dir", "below-a-file", "read-only-fs"])
def test_unwritable_targets_refused_before_any_connection(tmp_path, cmd, option, target):
    """Exit 2 at once, naming the option and the target (never the temp file), and no node is
    reached: the inventory's only node listens on a port that would answer (and log) a connection."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    contacted, stop = [], threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                contacted.append(server.accept()[0])
            except OSError:
                continue

    worker = threading.Thread(target=accept, daemon=True)
    worker.start()
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"nodes:\n  - {{name: a, host: 127.0.0.1, port: {server.getsockname()[1]}}}\n")
    (tmp_path / "file").write_text("")
    dest = {"missing-dir": tmp_path / "no" / "r.out", "below-a-file": tmp_path / "file" / "r.out",
            "read-only-fs": Path("/proc/r.out")}[target]
    fmt = ["--format", "json"] if option == "--output" else []
    try:
        res = pf(cmd, str(inv), *fmt, option, str(dest), *no_cfg(tmp_path))
    finally:
        stop.set()
        worker.join(timeout=5)
        server.close()
    line = one_line_error(res)
    assert res.returncode == 2 and f"{option} {dest}: cannot write there" in line, line
    assert ".r.out." not in line, "names the target, not the temp file beside it"
    assert not contacted, "a node was reached before the target was checked"


def test_no_ansi_when_not_a_tty(refused_inventory, tmp_path):
    """stdout (table), stderr and the --output file carry no escape byte even with a colour TERM."""
    out = tmp_path / "r.md"
    res = pf("run", str(refused_inventory), "--format", "markdown", "--output", str(out), *no_cfg(tmp_path),
             env={"TERM": "xterm-256color"})
    assert res.returncode == 3
    assert "INCOMPLETE" in res.stdout and "INCOMPLETE" in out.read_text()
    assert "\x1b" not in res.stdout and "\x1b" not in res.stderr and b"\x1b" not in out.read_bytes()


def test_closed_pipe_no_traceback(refused_inventory, tmp_path):
    fmt = "json"
    proc = subprocess.Popen(["preflight", "run", str(refused_inventory), "--format", fmt, *no_cfg(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before preflight writes anything
    try:
        err = proc.stderr.read()
        rc = proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err
    assert rc == 3, rc  # the report's code (incomplete), never 0 because nobody read it


def test_pipe_into_head(refused_inventory, tmp_path):
    cmd = f"preflight run {refused_inventory} --ssh-config {tmp_path / 'none'} | head -1; echo rc=${{PIPESTATUS[0]}}"
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=TIMEOUT)
    assert "Traceback" not in res.stderr and "rc=3" in res.stdout
    assert res.stdout.splitlines()[0].startswith("preflight")


# ---------------------------------------------------------------- the command table

BROKEN_COMMAND = """
import sys
import preflight.cli as cli
cli.COMMANDS["gate"] = ("preflight.ops.no_such_module", "gate", "broken on purpose")
sys.argv = ["preflight", *sys.argv[1:]]
cli.entry()
"""


@pytest.mark.parametrize("argv", [["gate", "inv.yaml"], ["gate", "--help"]])
def test_a_command_whose_module_fails_to_import_exits_4_with_the_message(argv):
    """An import error is a bug to see, never a command that silently goes missing."""
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PREFLIGHT_DEBUG"}
    res = subprocess.run([sys.executable, "-c", BROKEN_COMMAND, *argv], capture_output=True, text=True,
                         timeout=TIMEOUT, env=env)
    assert res.returncode == 4, res.stderr
    line = one_line_error(res)
    assert "internal error" in line and "No module named 'preflight.ops.no_such_module'" in line
    assert "No such command" not in res.stderr


def test_every_registered_command_imports_and_is_listed():
    from preflight.cli import COMMANDS, main

    res = pf("--help")
    assert res.returncode == 0
    for name in COMMANDS:
        assert main.get_command(None, name) is not None
        assert f"  {name} " in res.stdout


def test_no_import_circle_between_the_cli_and_the_rest():
    """The CLI imports the core; nothing below it imports the CLI back."""
    import ast

    root = Path(__file__).resolve().parents[2] / "preflight"
    offenders = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if rel.parts[0] in ("cli", "checks"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            mod = node.module if isinstance(node, ast.ImportFrom) else None
            names = [a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            level = getattr(node, "level", 0) or 0
            if isinstance(node, ast.ImportFrom):
                absolute = mod or ""
                if level:  # resolve a relative import against the module's package
                    pkg = list(("preflight", *rel.parts[:-1]))[: max(0, len(rel.parts) - level + 1)]
                    absolute = ".".join(pkg + ([mod] if mod else []))
                targets = [absolute] + [f"{absolute}.{n}" for n in names]
            else:
                targets = names
            if any(t == "preflight.cli" or t.startswith("preflight.cli.") for t in targets):
                offenders.append(f"preflight/{rel}:{node.lineno}")
    assert not offenders, offenders
