"""Nagios plugin output: exit codes by Nagios rules, one status line with perfdata, short."""
from __future__ import annotations

import os
import re
import subprocess

import pytest
from click.testing import CliRunner

from preflight.ops import nagios
from preflight.cli import main
from preflight.model import Result, Status
from tests.ops import make_report, optical_metrics

PERF = re.compile(r"^('[^']+'|[^\s=']+)=-?[\d.e+-]+(s|ms|us|%|B|KB|MB|TB|c)?(;[\d.e+-]*){0,4}$")


def test_ok_line_with_perfdata():
    code, text = nagios.output(make_report(metrics={"node01": optical_metrics({(0, 0): 0.5, (1, 0): 0.7})}))
    assert code == nagios.OK
    first = text.splitlines()[0]
    assert first.startswith("PREFLIGHT OK - all 3 nodes ready")
    head, perf = first.split(" | ")
    items = perf.split()
    assert all(PERF.match(i) for i in items), items
    assert "optical_rx_power_min=0.5" in items and "optical_rx_power_max=0.7" in items
    assert "nodes=3;;;0" in items


def test_failure_is_critical_and_names_the_nodes():
    code, text = nagios.output(make_report(fail={"node02": "hccn.link"}))
    assert code == nagios.CRITICAL
    assert text.startswith("PREFLIGHT CRITICAL - 1/3 nodes not usable: node02")
    assert "node02 hccn.link fail: device 5 link DOWN" in text


def test_unreachable_node_is_critical_not_unknown():
    code, text = nagios.output(make_report(unreachable={"node03"}))
    assert code == nagios.CRITICAL
    assert "node03: unreachable: connection refused" in text


def test_warn_and_error_are_warning():
    warn = Result("storage.disk", "node01", Status.WARN, "low", remediation="free it")
    assert nagios.output(make_report(extra=[warn]))[0] == nagios.WARNING
    err = Result("cann.env", "node01", Status.ERROR, "could not read the output")
    code, text = nagios.output(make_report(extra=[err]))
    assert code == nagios.WARNING and "error=1;1;;0" in text


def test_output_stays_short_on_a_big_broken_cluster():
    names = [f"node{i:04d}" for i in range(1000)]
    code, text = nagios.output(make_report(nodes=names, fail={n: "hccn.link" for n in names[::2]},
                                           unreachable=set(names[1::4])))
    assert code == nagios.CRITICAL
    assert len(text.encode()) <= nagios.MAX_BYTES
    assert "more" in text.splitlines()[-1]
    assert "750/1000 nodes not usable" in text.splitlines()[0] and " | " in text.splitlines()[0]


def test_bad_inventory_is_unknown_one_line(tmp_path):
    r = CliRunner().invoke(main, ["nagios", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 3
    assert r.output.startswith("PREFLIGHT UNKNOWN - ") and len(r.output.strip().splitlines()) == 1


@pytest.mark.parametrize("args", [["--bogus"], ["--checks", ""], ["--deadline", "abc"], ["--limit", ","],
                                  ["--checks", "no.such"]])
def test_bad_arguments_are_unknown_exit_3(tmp_path, args):
    """Nagios reads exit 2 as CRITICAL (a claim about the cluster): the plugin's own trouble, bad
    arguments included, must be `UNKNOWN - reason` on stdout and exit 3 (plugin guidelines)."""
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - {name: n1, host: 127.0.0.1}\n")
    r = subprocess.run(["preflight", "nagios", str(inv), *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert r.stdout.startswith("PREFLIGHT UNKNOWN - ") and len(r.stdout.strip().splitlines()) == 1


def test_bad_config_file_is_unknown_exit_3(tmp_path):
    cfg = tmp_path / "preflight" / "config.yaml"
    cfg.parent.mkdir()
    cfg.write_text("forks: [\n")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    r = subprocess.run(["preflight", "nagios", "x.yaml"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 3 and r.stdout.startswith("PREFLIGHT UNKNOWN - ") and "config.yaml:2" in r.stdout
    # the other commands keep SPEC's usage exit
    r = subprocess.run(["preflight", "run", "x.yaml"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 2 and r.stdout == ""


def test_preflights_own_bug_is_unknown_internal_error_exit_3(tmp_path, monkeypatch):
    """An exception in the runner (preflight's own bug, not a finding about the cluster) is
    `PREFLIGHT UNKNOWN - internal error: ...`, one line, exit 3: never CRITICAL, never a traceback."""
    from preflight import runner

    def broken(self):
        raise ZeroDivisionError("a bug in the runner")

    monkeypatch.setattr(runner.Runner, "run", broken)
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - {name: n1, host: 127.0.0.1}\n")
    r = CliRunner().invoke(main, ["nagios", str(inv)])
    assert r.exit_code == 3, (r.output, r.exception)
    assert r.stdout == "PREFLIGHT UNKNOWN - internal error: ZeroDivisionError: a bug in the runner\n", r.stdout
