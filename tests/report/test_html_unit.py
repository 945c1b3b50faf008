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
