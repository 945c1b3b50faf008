"""Node-supplied text is data in every output format (issue 29, F9; report/nodetext.py).

One report carries hostile node text everywhere a node's words can land: a summary, a
remediation, details (a process name, evidence, a metric's label), an unreachable node's error,
the cluster row; the text holds a newline, CR, ESC sequences (CSI colour, OSC retitle ended by
BEL), an 8-bit CSI, DEL, NUL, a bidi override, `<script>`, an HTML entity, `|`, quotes and a
backtick. It is rendered through EVERY format of preflight.report.FORMATS (and npd, Nagios and the
terminal table) and each output is checked as its consumer reads it: JUnit parsed as XML, JSON
parsed back to the exact text, Prometheus parsed by prometheus_client, Nagios' `|` counted,
markdown's cells counted and no raw HTML, the HTML page's scripts unchanged in number and
content, and no raw control character anywhere but JSON's own escapes.
"""
from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest
from prometheus_client.parser import text_string_to_metric_families

from preflight.model import NodeState, NodeStateKind, Report, Result, Status
from preflight.ops import nagios
from preflight.report import FORMATS, console, render, table

HOSTILE = ("evil\n\r\x1b[2J\x1b[31mRED\x1b]0;pwned\x07 \x9b1m \x7f\x00nul \u202egnp.exe "
           "<script>alert(1)</script><img src=x onerror=alert(2)> &amp; | a \"q\" 's' `tick`")
# every character that must not reach a terminal, a parser or a reader raw
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def hostile_report(text: str = HOSTILE) -> Report:
    nodes = (NodeState("node01", "10.0.0.1"), NodeState("node02", "10.0.0.2", NodeStateKind.UNREACHABLE, text))
    results = (
        Result("ssh.connect", "node01", Status.PASS, "connected"),
        Result("npu.idle", "node01", Status.FAIL, f"device 0 busy: process {text}",
               {"processes": [{"name": text, "pid": 7}], "evidence": text,
                "metrics": [{"name": "hbm_used", "value": 3.0, "unit": "MB", "labels": {"device": text}}]},
               f"stop it: kill {text}"),
        Result("ssh.connect", "node02", Status.ERROR, f"unreachable: {text}", remediation=text),
        Result("hccn.link", None, Status.WARN, f"cluster: {text}", {"blamed": "node01"}, text),
    )
    return Report("2026-01-01T00:00:00Z", "2026-01-01T00:00:07Z", "inv.yaml", "ab" * 32, nodes, results,
                  cluster="c1", tool_version="0.1.0", run_id="r1")


def _no_raw_controls(out: str, fmt: str) -> None:
    bad = sorted({f"U+{ord(c):04X}" for c in RAW.findall(out)})
    assert not bad, f"{fmt}: raw control characters {bad}"


def check_table(out: str) -> None:
    _no_raw_controls(out, "table")


def check_json(out: str) -> None:
    _no_raw_controls(out, "json")
    doc = json.loads(out)
    assert doc["nodes"][1]["error"] == HOSTILE  # data, exactly: JSON escapes it, nothing is lost
    assert doc["results"][1]["details"]["processes"][0]["name"] == HOSTILE


def check_jsonl(out: str) -> None:
    _no_raw_controls(out, "jsonl")
    recs = [json.loads(line) for line in out.splitlines()]
    assert len(recs) == 4 and recs[1]["details"]["evidence"] == HOSTILE


def check_junit(out: str) -> None:
    _no_raw_controls(out.replace("\n", ""), "junit")
    root = ET.fromstring(out.encode())  # valid XML whatever the node said
    failure = root.find(".//failure")
    assert failure is not None and "<script>" in failure.get("message")  # as text, escaped in the file
    assert "<script>" not in out


def check_markdown(out: str) -> None:
    _no_raw_controls(out, "markdown")
    assert not re.search(r"<(?!br>)", out), "raw HTML from node text in markdown"
    for line in out.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            assert len(re.findall(r"(?<!\\)\|", line)) == 7, f"a `|` from node text split a row: {line!r}"
        if line.startswith("- "):
            assert "node02" in line  # the unreachable node's error stays on its own list item
    assert "unreachable: evil" in out


def check_prometheus(out: str) -> None:
    _no_raw_controls(out, "prometheus")
    labels = [s.labels for fam in text_string_to_metric_families(out) for s in fam.samples]
    device = [lab["device"] for lab in labels if "device" in lab]
    assert device and "\\x1b[2J" in device[0] and "<script>" in device[0]


class _Scripts(HTMLParser):
    def __init__(self):
        super().__init__()
        self.scripts: list[str] = []
        self.handlers: list[str] = []
        self._in = False

    def handle_starttag(self, tag, attrs):
        self._in = tag == "script"
        if self._in:
            self.scripts.append("")
        self.handlers += [k for k, _ in attrs if k.startswith("on")]

    def handle_endtag(self, tag):
        self._in = False

    def handle_data(self, data):
        if self._in:
            self.scripts[-1] += data


def check_html(out: str) -> None:
    _no_raw_controls(out, "html")
    hostile, benign = _Scripts(), _Scripts()
    hostile.feed(out)
    benign.feed(render(hostile_report("plain words"), "html"))
    assert len(hostile.scripts) == len(benign.scripts), "node text added a <script> element"
    assert not hostile.handlers, f"node text added event handlers {hostile.handlers}"
    assert hostile.scripts[1:] == benign.scripts[1:], "node text changed the page's code"
    data = json.loads(hostile.scripts[0])  # the data block (type application/json) stays one JSON document
    assert "<script>alert(1)</script>" in json.dumps(data, ensure_ascii=False)  # as data, for textContent


def check_npd(out: str) -> None:
    _no_raw_controls(out.rstrip("\n"), "npd")
    assert out.count("\n") <= 1


CHECKS = {"table": check_table, "json": check_json, "jsonl": check_jsonl, "junit": check_junit,
          "markdown": check_markdown, "prometheus": check_prometheus, "html": check_html, "npd": check_npd}


def test_every_format_has_a_consumer_check():
    assert set(FORMATS) <= set(CHECKS), f"formats without a hostile-text check: {set(FORMATS) - set(CHECKS)}"


@pytest.mark.parametrize("fmt", sorted(CHECKS))
def test_hostile_node_text_is_data_in(fmt):
    CHECKS[fmt](render(hostile_report(), fmt))


def test_the_colour_table_on_a_terminal_carries_no_escape_from_node_text():
    """The tty path (cli.common.emit): our own colour codes only, never the node's."""
    buf = io.StringIO()
    table.render(hostile_report(), console(buf, color=True))
    out = buf.getvalue()
    assert "\x1b[" in out  # colour is on
    for seq in ("\x1b[2J", "\x1b]0;", "\x07", "\r", "\x9b", "\x00", "\u202e"):
        assert seq not in out, f"node text reached the terminal raw: {seq!r}"


def test_nagios_perfdata_is_only_on_the_first_line_after_one_bar():
    code, out = nagios.output(hostile_report())
    _no_raw_controls(out.replace("\n", ""), "nagios")
    lines = out.splitlines()
    assert lines[0].count("|") == 1 and all("|" not in line for line in lines[1:]), out
    assert len(lines) == 1 + 3  # the unreachable node, the failure, the cluster warning: one line each


def test_clean_text_is_left_as_it_is():
    from preflight.report import nodetext
    rep = hostile_report("plain words")
    assert nodetext.report(rep) is rep


def test_stored_node_text_printed_by_diff_reaches_the_terminal_escaped(tmp_path):
    """`preflight diff` prints stored summaries (node text): through safe_echo, never raw ESC."""
    import subprocess
    import sys
    from pathlib import Path

    from preflight.ops import history as hist
    db = tmp_path / "h.sqlite"
    conn = hist.open_db(db)
    base = hostile_report("plain")
    hist.store(conn, base)
    hist.store(conn, hostile_report())
    conn.close()
    root = Path(__file__).resolve().parents[2]
    res = subprocess.run([sys.executable, "-m", "preflight.cli", "diff", "--db", str(db)], capture_output=True,
                         text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)})
    assert "\\x1b[2J" in res.stdout, res.stdout + res.stderr
    _no_raw_controls(res.stdout.replace("\n", ""), "diff")


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_a_del_in_otherwise_ascii_node_text_is_escaped_too(fmt):
    """The JSON writers' fast path (ASCII text needs no escaping of its own) must still see DEL."""
    from preflight.report import render
    out = render(hostile_report("plain ascii then DEL\x7f here"), fmt)
    assert "\x7f" not in out and "\\u007f" in out


# What an encoded report holds near a control character: orjson's escapes (and a backslash that is
# not one), C0 written as \u00XX, DEL, C1, bidi controls, the XML non-characters, letters outside ASCII.
_FRAGMENTS = ("\\u001b", "\\u0000", "\\u0020", "\\u007f", "\\u00e9", "\\b", "\\f", "\\r", "\\n", "\\t", "\\\\",
              '\\"', "\x7f", "\x9b", "\x85", "\xa0", "\u202e", "\u2066", "\u2070", "\ufffe", "\uffff", "é", "中",
              "plain", " ", "u00", "b", "{", '"')


def test_the_control_search_answers_as_the_one_alternation_does():
    """nodetext._has_control is `_JSON_CONTROL.search(...) is not None` found faster: the two agree
    on encoded reports (clean, hostile, DEL in ASCII) and on generated texts, where both answers occur."""
    import random

    import orjson

    from preflight.report import nodetext
    plain = lambda t: nodetext._JSON_CONTROL.search(t) is not None  # noqa: E731
    for text in ("plain words", HOSTILE, "ascii then DEL\x7f", "caf\u00e9 \u4e2d", "a\\b is not a control"):
        rep = hostile_report(text)
        encoded = orjson.dumps([(r.summary, r.details, r.remediation) for r in rep.results]).decode()
        assert nodetext._has_control(encoded) == plain(encoded), text
    rnd = random.Random(29)
    found = 0
    for _ in range(3000):
        t = "".join(rnd.choice(_FRAGMENTS) for _ in range(rnd.randint(1, 8)))
        assert nodetext._has_control(t) == plain(t), ascii(t)
        found += plain(t)
    assert 300 < found < 2700  # both answers occur often
