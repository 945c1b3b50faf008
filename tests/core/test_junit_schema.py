"""The JUnit report is valid against the schema CI servers read: Apache Ant's JUnit/JUnitReport
schema (windyroad/JUnit-Schema JUnit.xsd, kept with its source in tests/fixtures/junit), checked
by a real XSD validator (xmlschema) on the reporters' sample, on a real replayed run, on an empty
run and on a report full of hostile node text."""
from __future__ import annotations

from pathlib import Path

import pytest

xmlschema = pytest.importorskip("xmlschema", reason="pip install xmlschema (the package's test extras)")

from preflight import inventory, runner  # noqa: E402
from preflight.model import NodeState, Report, Result, Status  # noqa: E402
from preflight.report import render  # noqa: E402
from preflight.transport.replay import ReplayTransport  # noqa: E402
from tests.core.test_reporters import sample_report  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SCHEMA = xmlschema.XMLSchema(str(FIXTURES / "junit" / "JUnit.xsd"))


def valid(report: Report) -> str:
    text = render(report, "junit")
    errors = [str(e.reason) for e in SCHEMA.iter_errors(text)]
    assert not errors, errors[:3]
    return text


def test_sample_report_is_valid():
    text = valid(sample_report())
    assert 'type="replace_hardware"' in text and "WARNING: device 2 link flapped" in text


def test_empty_and_hostile_reports_are_valid():
    empty = Report("2026-12-01T04:00:00Z", "2026-12-01T04:00:00Z", "i.yaml", "0" * 64, (), ())
    valid(empty)
    hostile = Result("gpu.idle", "n1\x1b[2J", Status.WARN, "pid 7 \x00\x1b]0;title\x07 <x> & \"q\" \ufffe",
                     remediation="kill ]]> 7")
    rep = Report("2026-12-01T04:00:00.123456+00:00", "2026-12-01T04:00:09Z", "i.yaml", "0" * 64,
                 (NodeState("n1", "h"),), (hostile, Result("npu.health", "n1", Status.FAIL, "x\x08y")),
                 cluster="c\x01")
    text = valid(rep)
    assert 'timestamp="2026-12-01T04:00:00"' in text


def test_a_real_replayed_run_is_valid(ascend128_recording):
    fix = FIXTURES / "replay" / "ascend128"
    inv = inventory.load(str(fix / "inventory.yaml"), limit="node[001-024]")
    report = runner.run(inv, ReplayTransport(str(ascend128_recording)),
                        runner.Options(checks=["npu.health", "npu.idle", "hccn.link", "net.ping_mesh"]))
    assert report.counts()["fail"] >= 1
    valid(report)
