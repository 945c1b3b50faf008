from __future__ import annotations

import pytest

from preflight.checks import npu_idle as check
from preflight.checkapi import CommandOutput, ParseError, Status
from tests.checks.ascend_helpers import A2, node
from tests.support import fixture_body, fixture_names

PARTIAL_MARK = "<<< rows not available >>>"


def run(text, params=check.DEFAULTS):
    return check.evaluate(check.parse({"npu_smi": CommandOutput(stdout=text)}), params, node())


def table(name):
    return "\n".join(ln for ln in fixture_body(name).splitlines() if ln != PARTIAL_MARK) + "\n"


# sample -> (status, failed devices)
EXPECTED = {
    "npu-smi_info__310_1chip__hpckurt-Ascend-npu-drivers.txt": (Status.PASS, None),
    "npu-smi_info__310P3_1card_2chip_idle__vllm-ascend-1565.txt": (Status.PASS, None),
    "npu-smi_info__910B1_8card_idle_npu-smi24.1.0__vllm-ascend-4037.txt": (Status.PASS, None),
    "npu-smi_info__910B3_8card_1proc__vllm-ascend-6512.txt": (Status.FAIL, [2]),
    "npu-smi_info__910ProB_A1_8card_idle__vllm-ascend-1047.txt": (Status.PASS, None),
    "npu-smi_info__A1_8card_python_procs_docmasked__mindcluster-doc.txt": (Status.FAIL, list(range(8))),
    "npu-smi_info__A3_16chip_npu-smi26.0.rc2_WIDE_PARTIAL__vllm-ascend-12980.txt": (Status.FAIL, [0]),
    "npu-smi_info__A3_910_93_16chip_procs__vllm-ascend-4930.txt": (Status.FAIL, [0, 1, 2, 3, 12, 13, 14, 15]),
}


def test_every_sample_listed():
    assert sorted(EXPECTED) == fixture_names("npu-smi_info__")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_samples(name):
    status, failed = EXPECTED[name]
    [f] = run(table(name))
    assert f.status is status and f.details.get("failed_devices") == failed


def test_blank_name_process_listed_with_pid_and_memory():
    [f] = run(table("npu-smi_info__910B3_8card_1proc__vllm-ascend-6512.txt"))
    assert "NPU 2 chip 0: pid 1333928 (no name: other container) 37709 MB" in f.summary
    assert f.details["processes"][0]["name"] == "" and "kill 1333928" in f.remediation


def test_hbm_in_use_without_process_warns():
    # The 6512 sample with its process row replaced by the idle line: NPU 2 keeps 41052/65536 MB in use.
    text = table("npu-smi_info__910B3_8card_1proc__vllm-ascend-6512.txt").replace(
        "| 2       0                 | 1333928       |                          | 37709                   |",
        "| No running processes found in NPU 2                                                            |")
    [f] = run(text)
    assert f.status is Status.WARN and f.details["failed_devices"] == [2] and "HBM 63%" in f.summary
    assert run(text, {"max_hbm_used_pct": 70})[0].status is Status.PASS


P310 = "npu-smi_info__310_1chip__hpckurt-Ascend-npu-drivers.txt"
P310P = "npu-smi_info__310P3_1card_2chip_idle__vllm-ascend-1565.txt"


@pytest.mark.parametrize("name", [P310, P310P])
def test_inference_chip_ddr_is_not_judged_by_the_hbm_limit(name):
    """310/310P have no HBM column; their DDR holds the device's own OS (577/7759 MB on the idle 310,
    ~1470/44000 MB on each idle 310P3). A strict HBM limit (5%) must not turn that into a warning on
    every idle inference node: the DDR is reported, not judged."""
    [f] = run(table(name), {"max_hbm_used_pct": 5, "max_ddr_used_pct": None})
    assert f.status is Status.PASS and "DDR use not judged" in f.summary and "HBM use at most" not in f.summary
    chips = {"310_1chip": [0], "310P3": [0, 1]}
    assert f.details["ddr_not_judged"] == next(v for k, v in chips.items() if k in name)
    assert all(m["name"] == "hbm_used" and m["value"] > 0 for m in f.details["metrics"])


def test_ddr_threshold_when_the_cluster_knows_its_baseline():
    [f] = run(table(P310), {"max_hbm_used_pct": 10, "max_ddr_used_pct": 5})  # 577/7759 MB = 7.4%
    assert f.status is Status.WARN and "device 0 DDR 7% in use" in f.summary and "expected at most 5%" in f.summary
    assert f.details["failed_devices"] == [0] and f.details["devices"][0]["mem_used_mb"] == 577
    [f] = run(table(P310P), {"max_hbm_used_pct": 10, "max_ddr_used_pct": 5})  # 3.3%: under a known baseline
    assert f.status is Status.PASS and "DDR use at most 5%" in f.summary and "ddr_not_judged" not in f.details


def test_idle_baseline_below_threshold():
    assert run(table(A2))[0].status is Status.PASS


def test_failing_npu_smi_follows_the_one_rule():
    """docs/writing-a-check.md §4: a tool that fails with its own words is a fail naming it (when
    npu.health is not selected: otherwise REQUIRES blocks this check), a hang is an error."""
    [f] = check.evaluate(check.parse({"npu_smi": CommandOutput("", "sh: 1: npu-smi: not found", 127)}),
                         check.DEFAULTS, node())
    assert f.status is Status.FAIL and "npu-smi: not found" in f.summary and "npu.health" in f.remediation
    with pytest.raises(ParseError, match="timed out"):
        check.parse({"npu_smi": CommandOutput("", "", None, timed_out=True, duration_s=60)})
    assert check.REQUIRES == ("npu.health",)
