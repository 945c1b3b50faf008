"""A whole report from a node whose output is not UTF-8: file names are bytes, and a shard named in
Latin-1 (`caf\\xe9-shard.bin`) is a real sight on shared storage. The run goes through the real
local transport (this host's /bin/sh), storage.data names the broken link, and every report
format keeps the byte readable as `\\xe9` (never U+FFFD, which loses it) and stays valid for its
consumer (JSON and JSON lines parse, JUnit against its XSD, Prometheus through its parser)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from preflight import inventory, runner
from preflight.model import Status
from preflight.report import render
from preflight.transport.local import LocalTransport

FORMATS = ("table", "json", "jsonl", "junit", "markdown", "prometheus", "html", "npd")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("nonutf8")
    data = d / "data"
    data.mkdir()
    os.symlink("/nonexistent/target", os.fsencode(data) + b"/caf\xe9-shard.bin")
    inv = d / "inv.yaml"
    inv.write_text(f"defaults:\n  paths:\n    data: [{data}]\nnodes:\n  - {{name: n1, host: 127.0.0.1}}\n")
    rep = runner.run(inventory.load(str(inv)), LocalTransport(), runner.Options(checks=["storage.data"]))
    [bad] = [r for r in rep.results if r.check == "storage.data" and r.status is Status.FAIL]
    assert "caf\\xe9-shard.bin" in bad.summary and "\ufffd" not in bad.summary, bad.summary
    return rep


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_keeps_the_byte_and_stays_valid(report, fmt):
    text = render(report, fmt)
    assert "\ufffd" not in text
    if fmt not in ("prometheus", "npd"):  # metrics carry no finding text; NPD cuts its line at 80
        assert "caf\\xe9-shard.bin" in text or "caf\\\\xe9-shard.bin" in text, text[:500]
    if fmt == "json":
        json.loads(text)
    elif fmt == "jsonl":
        [json.loads(line) for line in text.splitlines()]
    elif fmt == "junit":
        xmlschema = pytest.importorskip("xmlschema")
        schema = xmlschema.XMLSchema(str(Path(__file__).resolve().parents[1] / "fixtures" / "junit" / "JUnit.xsd"))
        schema.validate(text)
    elif fmt == "prometheus":
        from prometheus_client.parser import text_string_to_metric_families
        list(text_string_to_metric_families(text))
