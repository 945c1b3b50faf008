"""The HTML page without a browser: node text is escaped everywhere (markup and the embedded JSON),
the page names no external resource, and folding and mesh extraction read the report's data."""
from __future__ import annotations

import json
import re

from preflight.model import NodeState, Report, Result, Status
from preflight.report import html as page
from preflight.report import render

EVIL = '</script><img src=x onerror=alert(1)>'


def _report() -> Report:
    nodes = tuple(NodeState(f"n{i:02d}", f"10.0.0.{i}") for i in range(1, 5)) + (NodeState('n<&"05>', "10.0.0.5"),)
    res = [Result("hccn.link", n.name, Status.PASS, "8 devices UP") for n in nodes[:3]]
    res += [Result("hccn.link", "n04", Status.FAIL, f"device 1 link DOWN {EVIL}", {"x": EVIL}, f"fix {EVIL}",
                   action="replace_hardware"),
            Result("hccn.link", 'n<&"05>', Status.WARN, "flapping", remediation="watch", action="monitor")]
    metrics = [{"name": "ping_loss", "value": 100.0 if (a, b) == ("n01", "n02") else 0.0, "unit": "%",
                "labels": {"node": a, "peer": b}} for a in ("n01", "n02") for b in ("n01", "n02") if a != b]
    res.append(Result("net.ping_mesh", None, Status.FAIL, "1 of 2 pairs unreachable", {"metrics": metrics}, "see",
                      action="fix_config"))
    return Report("2026-12-01T00:00:00Z", "2026-12-01T00:00:01Z", "inv.yaml", "", nodes, tuple(res), run_id="r")


def test_node_text_is_escaped_in_markup_and_in_the_embedded_json():
    text = render(_report(), "html")
    assert EVIL not in text and "<img" not in text
    assert "n&lt;&amp;&quot;05&gt;" in text
    data = re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S).group(1)
    assert "</" not in data
    assert EVIL in json.dumps(json.loads(data))  # the text survives, as text


def test_rows_fold_and_meshes_come_from_metrics():
    checks, rows = page.heat_rows(_report())
    assert checks == ["hccn.link"]
    assert (["n01", "n02", "n03"], ["pass"]) in rows and rows[0][1] == ["fail"]
    (summary, devices), = page.mesh_results(_report())
    m = page.mesh(summary, devices, ["n01", "n02"])
    assert not devices and m["labels"] == ["n01", "n02"] and [0, 1, 100.0, None] in m["cells"]


def test_each_failing_line_shows_its_first_nodes_evidence():
    """A line of 'Failures first' shows the details of its first node's results, whatever the
    number of lines: its own, never another line's or another node's of the same line."""
    nodes = tuple(NodeState(f"n{i:02d}", f"10.0.0.{i}") for i in range(1, 7))
    res = [Result("hccn.optical", f"n{i:02d}", Status.FAIL, f"device {i} Rx Los", {"seen": f"rx-{i:02d}"}, "clean it")
           for i in range(1, 5)]
    res += [Result("hccn.optical", n, Status.FAIL, "device 9 Rx Los", {"seen": f"rx-{n}"}, "clean it")
            for n in ("n05", "n06")]  # one line, two nodes: n05's evidence
    text = render(Report("2026-12-01T00:00:00Z", "2026-12-01T00:00:01Z", "inv.yaml", "", nodes, tuple(res)), "html")
    section = text[text.index('<section id="failures">'):]
    section = section[:section.index("</section>")]
    rows = re.findall(r'<tr class="finding.*?</tr>', section, re.S)
    assert len(rows) == 5
    for row in rows:
        node = re.search(r'data-nodes="([^"]*)"', row).group(1).split()[0]
        assert re.findall(r"rx-n?\d+", row) == [f"rx-{node}" if node in ("n05", "n06") else f"rx-{node[1:]}"]
