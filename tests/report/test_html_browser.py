"""`--format html` in a real headless browser (Debian's chromium), on a 128-node report built by
the runner from recorded outputs of the simulated cluster with injected faults
(tests/fixtures/replay/ascend128): the page renders (a screenshot that is not blank and shows the
failure colour), the DOM after the script ran holds the failing heat-map cells and the failures
with their actions, a cell opens its findings, and nothing is requested from the network."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from preflight import inventory, runner
from preflight.report import render
from preflight.transport.replay import ReplayTransport

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "replay" / "ascend128"
CHECKS = ["npu.health", "npu.idle", "hccn.link", "hccn.ip", "net.ping_mesh", "hccn.ping_mesh"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FAIL_RGB = (0xD3, 0x2F, 0x2F)  # .st-fail in preflight/report/html.py
# What the recording's injected faults must show as: (node, check) failing cells
FAILING = {("node017", "hccn.link"), ("node042", "npu.health"), ("node077", "npu.idle"),
           ("node064", "net.ping_mesh"), ("node065", "net.ping_mesh"), ("node090", "hccn.ping_mesh")}

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium): "
                                    "the HTML report is tested only in a real headless browser")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    d = tmp_path_factory.mktemp("html128")
    with tarfile.open(FIX / "outputs.tar.xz") as t:
        t.extractall(d, filter="data")
    inv = inventory.load(str(FIX / "inventory.yaml"))
    report = runner.run(inv, ReplayTransport(str(d / "rec128b")), runner.Options(checks=CHECKS))
    path = d / "report.html"
    path.write_text(render(report, "html"), encoding="utf-8")
    return report, path


def _chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp / "profile"
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           f"--user-data-dir={profile}", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--disable-default-apps", "--host-resolver-rules=MAP * ~NOTFOUND", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    shutil.rmtree(profile, ignore_errors=True)
    return r


class Cells(HTMLParser):
    """Heat-map rows (their node lists) and cells (check, status) from the DOM."""

    def __init__(self):
        super().__init__()
        self.rows: list[tuple[list[str], list[tuple[str, str]]]] = []
        self.findings: list[dict[str, str]] = []
        self.panel_text: list[str] = []
        self._in_panel = 0
        self.body: dict[str, str] = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class") or ""
        if tag == "body":
            self.body = a
        if tag == "tr" and "data-statuses" in a:
            self.rows.append((a["data-nodes"].split(), []))
        if tag == "td" and "cell" in cls.split() and "data-check" in a and self.rows:
            self.rows[-1][1].append((a["data-check"], a["data-status"]))
        if tag == "tr" and "finding" in cls.split():
            self.findings.append(a)
        if tag == "div" and a.get("id") == "panel":
            self._in_panel = 1
        elif self._in_panel and tag == "div":
            self._in_panel += 1

    def handle_endtag(self, tag):
        if self._in_panel and tag == "div":
            self._in_panel -= 1

    def handle_data(self, data):
        if self._in_panel:
            self.panel_text.append(data)


def test_the_report_holds_the_injected_faults(page):
    report, _ = page
    assert len(report.nodes) == 128
    bad = {(r.node, r.check) for r in report.results if r.status.value == "fail" and r.node}
    assert FAILING <= bad


def test_page_is_self_contained(page):
    _, path = page
    text = path.read_text(encoding="utf-8")
    assert re.search(r'<meta http-equiv="Content-Security-Policy" content="default-src \'none\';', text)
    assert not re.search(r'\b(?:src|href|action|poster|data)\s*=\s*["\']?\s*(?:https?:|//|ftp:)', text, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?(?:https?:|//)", text, re.I)
    assert not re.search(r"<(?:link|iframe|embed|object|img)\b", text, re.I)
    assert not re.search(r"\b(?:fetch|XMLHttpRequest|WebSocket|EventSource|sendBeacon)\b", text)


@needs_chromium
def test_renders_with_failing_cells_and_opens_a_cell(page, tmp_path):
    report, path = page
    r = _chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", path.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    dom = Cells()
    dom.feed(r.stdout)
    assert dom.body.get("data-rendered") == "yes", "the page's script did not finish"
    cells = {(n, c): s for nodes, row in dom.rows for n in nodes for c, s in row}
    assert len({n for n, _ in cells}) == 128, "every node is in some folded heat-map row"
    for key in FAILING:
        assert cells.get(key) == "fail", (key, cells.get(key))
    assert cells[("node001", "hccn.link")] == "pass"
    assert len(dom.rows) < 40, "identical rows must fold into node ranges"
    acts = {(f["data-check"], f["data-nodes"]): f for f in dom.findings if f["data-status"] == "fail"}
    assert ("hccn.link", "node017") in acts and ("npu.health", "node042") in acts
    html_text = r.stdout
    for action in ("replace_hardware", "reset_device", "restart_process"):
        assert f'<span class="action">{action}</span>' in html_text
    assert html_text.count("<canvas") == 2  # node mesh and device mesh
    # a cell opens its findings: the row of node042, the npu.health column
    row = next(i for i, (nodes, _) in enumerate(dom.rows) if "node042" in nodes)
    col = [c for c, _ in dom.rows[row][1]].index("npu.health")
    r = _chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", f"{path.as_uri()}#cell={row},{col}")
    opened = Cells()
    opened.feed(r.stdout)
    text = " ".join(opened.panel_text)
    assert "8C03A000" in text and "reset_device" in text, text[:500]


@needs_chromium
def test_screenshot_is_not_blank_and_shows_failures(page, tmp_path):
    png = pytest.importorskip("png", reason="pip install pypng (test extra)")
    _, path = page
    shot = tmp_path / "shot.png"
    r = _chromium(tmp_path, "--window-size=1400,3000", f"--screenshot={shot}", "--virtual-time-budget=5000",
                  f"{path.as_uri()}#status=fail")
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    width, height, rows, _ = png.Reader(filename=str(shot)).asRGBA8()
    pixels = [tuple(row[i:i + 3]) for row in rows for i in range(0, width * 4, 4 * 7)]  # every 7th pixel
    mean = [sum(p[k] for p in pixels) / len(pixels) for k in range(3)]
    variance = sum((p[k] - mean[k]) ** 2 for p in pixels for k in range(3)) / (3 * len(pixels))
    assert variance > 200, f"screenshot looks blank (variance {variance:.0f})"
    assert len(set(pixels)) > 50
    red = sum(1 for p in pixels if all(abs(a - b) <= 6 for a, b in zip(p, FAIL_RGB)))
    assert red > 100, f"only {red} sampled pixels in the failure colour"


def _page_requests(tmp: Path, url: str) -> list[str]:
    """URLs a document asked the network stack for, from chromium's own net log. The browser's
    background traffic (update checks, time, sign-in) has no initiating document ("not an
    origin"); a request from a page has one (a file:// page's origin reads "null"). DNS answers
    nothing (--host-resolver-rules), so even an attempt leaves the machine with no packet."""
    log = tmp / "net.json"
    r = _chromium(tmp, f"--log-net-log={log}", "--net-log-capture-mode=Everything",
                  "--virtual-time-budget=5000", "--dump-dom", url)
    assert r.returncode == 0, r.stderr[-2000:]
    text = log.read_text(encoding="utf-8", errors="replace").rstrip()
    if not text.endswith("}"):  # chromium may leave the event list open when it exits
        text = text.rstrip(",") + "]}"
    doc = json.loads(text)
    start = doc["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return sorted({p["url"] for e in doc["events"] if e["type"] == start and "url" in (p := e.get("params") or {})
                   and p.get("initiator") != "not an origin"})


@needs_chromium
def test_nothing_is_requested_from_the_network(page, tmp_path):
    _, path = page
    canary = tmp_path / "canary.html"  # the detector must see a page that does fetch
    canary.write_text('<!DOCTYPE html><img src="http://preflight-canary.invalid/x.png">', encoding="utf-8")
    assert _page_requests(tmp_path, canary.as_uri()) == ["http://preflight-canary.invalid/x.png"]
    assert _page_requests(tmp_path, path.as_uri()) == []


def test_csp_allows_the_pages_own_script_by_hash_only(page):
    """script-src holds the sha256 of the one inline script, and no 'unsafe-inline'."""
    import base64
    import hashlib

    _, path = page
    text = path.read_text(encoding="utf-8")
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', text).group(1)
    scripts = dict(part.strip().split(" ", 1) for part in csp.split(";"))["script-src"]
    code = re.findall(r"<script>(.*?)</script>", text, re.S)
    assert len(code) == 1 and "unsafe-inline" not in scripts
    assert scripts == "'sha256-" + base64.b64encode(hashlib.sha256(code[0].encode()).digest()).decode() + "'"


@needs_chromium
def test_an_injected_script_is_refused_by_the_browser(page, tmp_path):
    """Were escaping ever to fail: a <script> and an event handler put into the page do not run in
    chromium, while the page's own script still does."""
    _, path = page
    injected = ('<script>document.body.dataset.injected="script"</script>'
                '<img src="data:," onerror="document.body.dataset.handler=\'ran\'">')
    bad = tmp_path / "injected.html"
    bad.write_text(path.read_text(encoding="utf-8").replace("</header>", injected + "</header>", 1), encoding="utf-8")
    r = _chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", bad.as_uri())
    dom = Cells()
    dom.feed(r.stdout)
    assert dom.body.get("data-rendered") == "yes", "the page's own script did not run"
    assert "data-injected" not in dom.body and "data-handler" not in dom.body, dom.body
