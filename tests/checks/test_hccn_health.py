from __future__ import annotations

import pytest

from preflight.checks import hccn_health as check
from preflight.checkapi import Status
from tests.checks.ascend_helpers import MISSING, P310, loop, node, parse, same, smi
from tests.support import fixture_body


def run(out, npu=None, n=None):
    return check.evaluate(parse(check, {"npu_smi": npu or smi(), "net_health": out}), {}, n or node())


@pytest.mark.parametrize("name,status", [
    ("hccn_tool_-net_health_-g__Init__mindcluster-doc.txt", Status.WARN),
    ("hccn_tool_-net_health_-g__Socket_failed__mindcluster-fixture.txt", Status.FAIL),
])
def test_samples(name, status):
    [f] = run(loop({**{d: "net health status: Success\n" for d in range(8)}, 2: fixture_body(name)}))
    assert f.status is status and f.details["failed_devices"] == [2] and f.remediation


@pytest.mark.parametrize("value,status", [
    ("Success", Status.PASS), ("Init", Status.WARN), ("Socket fail", Status.FAIL),
    ("Receive timeout", Status.FAIL), ("Unreachable", Status.FAIL), ("Detect ip set", Status.FAIL),
    ("Unknown", Status.FAIL), ("Time exceeded", Status.FAIL),
])
def test_verdict_table(value, status):
    # Status strings from the DRV g_net_health_status table (docs/FORMATS.md §3.2).
    [f] = run(same(f"net health status: {value}\n"))
    assert f.status is status


def test_error_missing_and_skip():
    [f] = run(loop({0: ("The device is not exist!\n", 255), **{d: "net health status: Success\n" for d in range(1, 8)}}))
    assert f.status is Status.FAIL and "The device is not exist!" in f.summary
    assert run(MISSING)[0].status is Status.FAIL
    assert run(None, smi(P310), node(1))[0].status is Status.SKIP
