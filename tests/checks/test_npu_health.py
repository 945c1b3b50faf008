from __future__ import annotations

import pytest

from preflight.checks import npu_health as check
from preflight.checkapi import CommandOutput, ParseError, Probe, Status
from tests.checks.ascend_helpers import A2, A3, P310, followup, node, parse
from tests.support import fixture_body, fixture_names

PARTIAL_MARK = "<<< rows not available >>>"
ALARM = fixture_body("npu-smi_info_-t_health_-c__910A_Alarm__mindcluster-fixture.txt")
DEVICES = {"310P3_1card_2chip": 2, "310_": 1, "A3_910_93": 16, "WIDE_PARTIAL": 16}


def table(name):
    return "\n".join(ln for ln in fixture_body(name).splitlines() if ln != PARTIAL_MARK) + "\n"


def expected_devices(name):
    return next((v for k, v in DEVICES.items() if k in name), 8)


def run(outs, n):
    return check.evaluate(parse(check, outs), {}, n)


@pytest.mark.parametrize("name", fixture_names("npu-smi_info__"))
def test_every_table_sample(name):
    [f] = run({"npu_smi": CommandOutput(stdout=table(name))}, node(expected_devices(name)))
    if "PARTIAL" in name:  # only 3 of 16 chips survived in the sample: the count rule fires
        assert f.status is Status.FAIL and "3 chips listed by npu-smi, expected 16" in f.summary
    else:
        assert f.status is Status.PASS


def with_health(name, npu_row, value):
    """A sample with one Health cell changed (the table has no raw non-OK paste: docs/FORMATS.md §5)."""
    return table(name).replace(npu_row, npu_row.replace("| OK    ", f"| {value:<6}"), 1)


@pytest.mark.parametrize("value,status", [("Warning", Status.WARN), ("Alarm", Status.FAIL),
                                          ("Critical", Status.FAIL), ("UNKNOWN", Status.FAIL)])
def test_health_values(value, status):
    text = with_health(A2, "| 3     910B1               | OK    ", value)
    assert followup(check, {"npu_smi": CommandOutput(stdout=text)}, node(), {}) == {
        "health_3_0": Probe("LC_ALL=C npu-smi info -t health -i 3 -c 0")}
    [f] = run({"npu_smi": CommandOutput(stdout=text)}, node())
    assert f.status is status and f.details["failed_devices"] == [3] and f.remediation


def test_alarm_details_from_t_health():
    text = with_health(A2, "| 3     910B1               | OK    ", "Alarm")
    [f] = run({"npu_smi": CommandOutput(stdout=text), "health_3_0": CommandOutput(stdout=ALARM)}, node())
    assert "device 3 health Alarm, expected OK; error codes A4025021 8C03A000 8C084E00" in f.summary
    d = f.details["devices"][0]
    assert (d["npu"], d["chip"], d["error_codes"][0]) == (3, 0, "A4025021")
    assert "Heartbeat Lost" in d["error_information"]


def test_a3_second_chip_uses_phy_id():
    text = table(A3).replace("| 6     Ascend910           | OK            | -  ",
                             "| 6     Ascend910           | Alarm         | -  ")
    assert followup(check, {"npu_smi": CommandOutput(stdout=text)}, node(16), {}) == {
        "health_6_1": Probe("LC_ALL=C npu-smi info -t health -i 6 -c 1")}
    [f] = run({"npu_smi": CommandOutput(stdout=text)}, node(16))
    assert f.details["failed_devices"] == [13]


def test_all_ok_needs_no_followup():
    assert followup(check, {"npu_smi": CommandOutput(stdout=table(A2))}, node(), {}) == {}


def test_missing_chip_fails_and_extra_warns():
    [f] = run({"npu_smi": CommandOutput(stdout=table(A2))}, node(16))
    assert f.status is Status.FAIL and "8 chips listed by npu-smi, expected 16" in f.summary
    assert f.details["failed_devices"] == list(range(8, 16))
    [f] = run({"npu_smi": CommandOutput(stdout=table(A2))}, node(4))
    assert f.status is Status.WARN and "devices: 8" in f.remediation


@pytest.mark.parametrize("name", fixture_names("npu-smi_error__"))
def test_error_samples_fail_quoting_text(name):
    [f] = run({"npu_smi": CommandOutput(stdout=fixture_body(name), rc=255)}, node())
    assert f.status is Status.FAIL
    assert fixture_body(name).splitlines()[-3 if "invalid" in name else -1].strip() in f.summary
    assert f.remediation


def test_minus_8020_fix_names_other_container():
    [f] = run({"npu_smi": CommandOutput(stdout=fixture_body("npu-smi_error__device_used_-8020__vllm-ascend-632.txt"),
                                        rc=255)}, node())
    assert "ret is -8020" in f.summary and "container" in f.remediation


def test_missing_npu_smi_fails_and_hang_is_error():
    [f] = run({"npu_smi": CommandOutput(stderr="sh: 1: npu-smi: not found\n", rc=127)}, node())
    assert f.status is Status.FAIL and "/usr/local/bin/npu-smi" in f.summary
    with pytest.raises(ParseError):
        parse(check, {"npu_smi": CommandOutput(rc=124, timed_out=True, duration_s=60)})


def test_310_table_passes_with_one_device():
    [f] = run({"npu_smi": CommandOutput(stdout=table(P310))}, node(1))
    assert f.status is Status.PASS and f.details["layout"] == "device"


def test_failing_health_followup_is_named_not_read_as_no_codes():
    """docs/writing-a-check.md §4: `-t health` failing with its own words must not read as
    'error codes none reported'."""
    text = with_health(A2, "| 3     910B1               | OK    ", "Alarm")
    said = fixture_body("npu-smi_error__invalid_card_id__mindcluster-fixture.txt")
    [f] = run({"npu_smi": CommandOutput(stdout=text), "health_3_0": CommandOutput(stdout=said, rc=255)}, node())
    assert f.status is Status.FAIL and f.details["failed_devices"] == [3]
    assert "error codes unknown (npu-smi info -t health failed: " in f.summary and "none reported" not in f.summary
