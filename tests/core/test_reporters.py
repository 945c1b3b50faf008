"""Reporters on a hand-built Report, compared with golden files (UPDATE_GOLDEN=1 regenerates them).

The report exercises every status, a cluster summary row (node None) with a blamed node, an
unreachable node, node names with <&" and unicode, summaries with [brackets] and U+FFFD.
"""
from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from preflight.report import render
from preflight.model import CommandOutput, NodeState, NodeStateKind, Report, Result, Status

GOLDEN = Path(__file__).parent / "golden"
ANSI = re.compile(rb"\x1b[\[\]()#;?]*[0-9;]*[A-Za-z@-~]?")
WEIRD = 'node<&"04>'
UNI = "nœud-05"


def sample_report(weird: str = WEIRD) -> Report:
    """`weird` names node 4. Table and markdown goldens use a foldable name (see the xfail below)."""
    nodes = (
        NodeState("node01", "10.0.0.1"),
        NodeState("node02", "10.0.0.2"),
        NodeState("node03", "10.0.0.3"),
        NodeState(weird, "10.0.0.4"),
        NodeState(UNI, "10.0.0.5"),
        NodeState("node06", "10.0.0.6", NodeStateKind.UNREACHABLE,
                  "10.0.0.6:22: connection refused (is sshd running on that port?)"),
    )
    fix_link = "bring the port up: hccn_tool -i 5 -cfg recovery"
    results = [Result("ssh.connect", n.name, Status.PASS, f"connected to root@{n.host}:22", duration_s=0.05)
               for n in nodes[:5]]
    results.append(Result("ssh.connect", "node06", Status.ERROR,
                          "unreachable: 10.0.0.6:22: connection refused (is sshd running on that port?)",
                          remediation="start sshd: systemctl start ssh"))
    for n in ("node01", "node02", "node03"):  # identical across three nodes: folded
        results.append(Result("hccn.link", n, Status.FAIL, "device 5 link DOWN, expected UP",
                              {"failed_devices": [5], "metrics": [{"name": "link_up_count", "value": 7,
                                                                    "unit": "", "labels": {}}]},
                              fix_link, 0.125, "replace_hardware"))
    results.append(Result("hccn.link", weird, Status.PASS, "8 links UP", duration_s=0.1))
    results.append(Result("hccn.link", UNI, Status.WARN, "device 2 link flapped 3 times [last 10 min]",
                          {"failed_devices": [2]}, "check the cable of device 2 (hccn_tool -i 2 -link_stat -g)", 0.1,
                          "monitor"))
    results.append(Result("hccn.link", "node06", Status.SKIP, "node unreachable"))
    results.append(Result("npu.health", "node01", Status.ERROR,
                          "could not read the output: unexpected line 'Chip \ufffd\ufffd [0] Alarm'",
                          {"output": "NPU  Chip \ufffd\ufffd [0]"}, None, 0.5))
    for n in ("node02", "node03", weird, UNI):
        results.append(Result("npu.health", n, Status.PASS, "8 chips Health OK", duration_s=0.2))
    results.append(Result("npu.health", "node06", Status.SKIP, "node unreachable"))
    results.append(Result("sw.consistency", None, Status.FAIL, "CANN toolkit differs: 8.0.RC1 on 4 nodes, "
                          "8.0.RC2 on node[02]", {"values": {"8.0.RC1": 4, "8.0.RC2": 1}},
                          "install the same CANN toolkit everywhere", 0.01, "fix_config"))
    results.append(Result("sw.consistency", "node02", Status.FAIL, "CANN toolkit 8.0.RC2, expected 8.0.RC1",
                          {}, "install CANN toolkit 8.0.RC1 on node02", 0.0, "fix_config"))
    results.append(Result("plan.parallel", None, Status.SKIP, "no job: section in the inventory"))
    return Report(started_at="2026-12-01T04:00:00Z", finished_at="2026-12-01T04:00:07Z",
                  inventory_path="inventory.yaml", inventory_sha256="ab" * 32, nodes=nodes,
                  results=tuple(results), cluster="demo", tool_version="0.1.0",
                  run_id="0f8c1e2a-5b6d-4c7e-9f01-23456789abcd")


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(encoding="utf-8"), f"{name} differs from the golden file (UPDATE_GOLDEN=1 to accept)"


# ---------------------------------------------------------------- JSON

def test_json_golden():
    golden("report.json", render(sample_report(), "json"))


def test_json_fields_and_types_per_spec():
    rep = sample_report()
    d = json.loads(render(rep, "json"))
    for key, typ in [("schema", str), ("run_id", str), ("tool_version", str), ("started_at", str), ("finished_at", str),
                     ("inventory", dict), ("verdict", str), ("exit_code", int), ("nodes", list),
                     ("results", list), ("summary", dict)]:
        assert isinstance(d[key], typ), key
    assert d["schema"] == "preflight.report/1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", d["started_at"])
    assert d["inventory"] == {"path": "inventory.yaml", "sha256": "ab" * 32}
    assert (d["verdict"], d["exit_code"]) == ("not_ready", 1)
    assert set(d["summary"]) == {"pass", "warn", "fail", "skip", "error"}
    assert all(isinstance(v, int) for v in d["summary"].values())
    assert sum(d["summary"].values()) == len(d["results"])
    for n in d["nodes"]:
        assert set(n) == {"name", "host", "state", "error"}
        assert n["state"] in {"ok", "unreachable", "auth_failed", "hostkey_rejected", "timeout"}
        assert (n["error"] is None) == (n["state"] == "ok")
    for r in d["results"]:
        assert set(r) == {"check", "node", "status", "summary", "details", "remediation", "action", "duration_s"}
        assert r["status"] in {"pass", "warn", "fail", "skip", "error"}
        assert isinstance(r["details"], dict) and isinstance(r["duration_s"], (int, float))
        assert r["node"] is None or isinstance(r["node"], str)
        if r["status"] in ("fail", "warn"):
            assert r["remediation"] and r["action"], r
    assert [n["name"] for n in d["nodes"]][3:5] == [WEIRD, UNI]
    assert {r["node"] for r in d["results"] if r["check"] == "sw.consistency"} == {None, "node02"}


def test_json_is_utf8_and_keeps_replacement_chars():
    text = render(sample_report(), "json")
    assert "\ufffd" in text and UNI in text
    text.encode("utf-8")


# ---------------------------------------------------------------- JUnit

def test_junit_golden(monkeypatch):
    from preflight.report import junit
    monkeypatch.setattr(junit, "hostname", lambda: "controller")  # where preflight ran: not the golden's business
    golden("report.junit.xml", render(sample_report(), "junit"))


def test_junit_structure():
    rep = sample_report()
    root = ET.fromstring(render(rep, "junit").encode("utf-8"))
    cases = root.findall(".//testcase")
    assert len(cases) == len(rep.results)
    seen = set()
    for case, r in zip(cases, rep.results):
        assert case.get("classname") == f"preflight.{r.check}"
        assert case.get("name") == (r.node if r.node is not None else "_cluster")
        float(case.get("time"))
        key = (case.get("classname"), case.get("name"))
        assert key not in seen, f"duplicate testcase {key}"
        seen.add(key)
        tags = {c.tag for c in case}
        expected = {Status.FAIL: {"failure"}, Status.ERROR: {"error"}, Status.SKIP: {"skipped"}}.get(r.status)
        if expected:
            assert expected <= tags and not ({"failure", "error", "skipped"} - expected) & tags, (r, tags)
        else:
            assert not {"failure", "error", "skipped"} & tags, (r, tags)
    suite = root.find("testsuite")
    counts = rep.counts()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == \
        (str(len(rep.results)), str(counts["fail"]), str(counts["error"]), str(counts["skip"]))
    names = {c.get("name") for c in cases}
    assert WEIRD in names and UNI in names


def test_junit_strips_xml_illegal_characters():
    rep = sample_report()
    bad = Result("npu.health", "node01", Status.FAIL, "ansi \x1b[31mred\x1b[0m nul \x00 end", remediation="r\x07")
    rep = Report(**{**rep.__dict__, "results": rep.results + (bad,)})
    text = render(rep, "junit")
    ET.fromstring(text.encode("utf-8"))
    assert "\x00" not in text and "\x1b" not in text and "\x07" not in text


# ---------------------------------------------------------------- markdown and table

HUMAN = "node-04"  # until fold() keeps names with NodeSet operators (& ! ^ ,)


def test_markdown_golden():
    golden("report.md", render(sample_report(HUMAN), "markdown"))


def test_table_golden():
    golden("report.table.txt", render(sample_report(HUMAN), "table"))


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_human_formats_never_lose_a_node_name(fmt):
    text = render(sample_report(), fmt)
    line = next(ln for ln in text.splitlines() if "8 links UP" in ln)
    assert WEIRD in line
    line = next(ln for ln in text.splitlines() if "8 chips Health OK" in ln)
    assert WEIRD in line


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_identical_results_are_folded(fmt):
    text = render(sample_report(), fmt)
    assert "node[01-03]" in text
    line = next(ln for ln in text.splitlines() if "link DOWN" in ln)
    assert "node[01-03]" in line, line
    assert text.count("device 5 link DOWN") == 1


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_human_formats_show_verdict_unreachable_and_brackets(fmt):
    text = render(sample_report(HUMAN), fmt)
    assert "NOT READY" in text and "exit 1" in text
    assert "node06" in text and "unreachable" in text
    assert "[last 10 min]" in text and "\ufffd" in text  # brackets are not markup
    assert "8.0.RC2 on node[02]" in text
    assert UNI in text


def test_failures_come_first_in_the_table():
    lines = render(sample_report(), "table").splitlines()
    first_fail = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("FAIL"))
    first_pass = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("PASS"))
    assert first_fail < first_pass


def test_markdown_escapes_pipes():
    rep = sample_report()
    rep = Report(**{**rep.__dict__, "results": rep.results + (
        Result("npu.idle", "node01", Status.FAIL, "a | b", remediation="kill 1 | true", action="restart_process"),)})
    line = next(ln for ln in render(rep, "markdown").splitlines() if "a \\| b" in ln)
    assert len(re.findall(r"(?<!\\)\|", line)) == 7  # 6 columns: the cells' own pipes are escaped


@pytest.mark.parametrize("fmt", ["table", "json", "junit", "markdown"])
def test_no_ansi_escapes_when_not_a_tty(fmt):
    data = render(sample_report(), fmt).encode("utf-8")
    assert b"\x1b" not in data


def test_table_ready_report():
    rep = Report("2026-12-01T04:00:00Z", "2026-12-01T04:00:01Z", "i.yaml", "0" * 64,
                 (NodeState("n1", "h"),), (Result("ssh.connect", "n1", Status.PASS, "connected"),))
    text = render(rep, "table")
    assert "READY" in text and "NOT READY" not in text and "exit 0" in text


def test_junit_names_unique_and_stable_on_a_runner_report(tmp_path):
    """A real run: storage.data over a ScriptedTransport whose probes run in a local shell reports one
    finding per missing path, several on one node. Each (classname, name) is unique, the first keeps
    the bare node name, and a second run gives the same names."""
    import subprocess

    from preflight.inventory import load
    from preflight.runner import Options, Runner
    from tests.ops import ScriptedTransport

    def shell(cmd: str) -> CommandOutput:
        p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=30)
        return CommandOutput(p.stdout, p.stderr, p.returncode)

    missing = [str(tmp_path / f"gone{i}") for i in range(3)]
    inv = tmp_path / "inv.yaml"
    inv.write_text("defaults:\n  paths:\n    data: [" + ", ".join(missing) + "]\n"
                   "nodes:\n  - {name: n1, host: 10.0.0.1}\n  - {name: n2, host: 10.0.0.2}\n")

    def run() -> list[tuple[str, str]]:
        report = Runner(load(inv), ScriptedTransport({"n1": shell, "n2": shell}), Options(checks=["storage.data"])).run()
        per_node = [r for r in report.results if r.check == "storage.data" and r.node == "n1"]
        assert len(per_node) == 3 and all(r.status is Status.FAIL for r in per_node)  # several on one node
        root = ET.fromstring(render(report, "junit").encode("utf-8"))
        return [(c.get("classname"), c.get("name")) for c in root.iter("testcase")]

    first = run()
    assert len(first) == len(set(first)), f"duplicate testcases: {first}"
    data = [n for c, n in first if c == "preflight.storage.data"]
    assert data[:3] == ["n1", "n1 #2", "n1 #3"] and data[3:] == ["n2", "n2 #2", "n2 #3"]
    assert run() == first


def test_table_matrix_folds_identical_rows_and_keeps_the_odd_ones():
    """Past a handful of nodes the checklist adds a node x check matrix; nodes whose rows are the
    same (state and marks) share one line with their node range, so 1,000 healthy nodes are one
    line and a failing or unreachable node keeps a line of its own."""
    names = [f"n{i:03d}" for i in range(1, 13)]
    nodes = tuple(NodeState(n, f"10.0.0.{i}") for i, n in enumerate(names, 1)) + (
        NodeState("n013", "10.0.0.13", NodeStateKind.UNREACHABLE, "connection refused"),)
    results = [Result("ssh.connect", n, Status.PASS, "connected") for n in names]
    results.append(Result("ssh.connect", "n013", Status.ERROR, "unreachable"))
    results += [Result("npu.health", n, Status.FAIL if n == "n005" else Status.PASS, "x") for n in names]
    rep = Report(started_at="2026-12-01T04:00:00Z", finished_at="2026-12-01T04:00:07Z", inventory_path="i.yaml",
                 inventory_sha256="ab" * 32, nodes=nodes, results=tuple(results), cluster="c", tool_version="0.1.0")
    text = render(rep, "table")
    rows = text[text.index("\nnode ") + 1:].split("\n\n")[0].splitlines()[1:]
    assert [r.split()[0] for r in rows] == ["n[001-004,006-012]", "n005", "n013"], text
    assert rows[0].split()[1:] == ["✓", "✓"] and rows[1].split()[1:] == ["✓", "✗"] and rows[2].split()[1:] == ["?"]
