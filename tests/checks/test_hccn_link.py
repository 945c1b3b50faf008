from __future__ import annotations

import pytest

from preflight.checks import hccn_link as check
from preflight.checkapi import ParseError, Probe, Status
from tests.checks.ascend_helpers import A3, MISSING, P310, followup, loop, node, parse, same, smi
from tests.support import fixture_body, fixture_names

UP = fixture_body("hccn_tool_-link_-g__UP__mindcluster-doc.txt")
# A -link_stat with one link-up and no records, from the grammar of docs/FORMATS.md §3.6 (`... : NA`).
STABLE = ("[devid 0]current time        : Wed Aug  2 03:36:43 2022\n[devid 0]link up count       : 1\n"
          "[devid 0]link change records : NA\n")


def run(link, stat, n=None, npu=None):
    outs = {"npu_smi": npu or smi(), "link": link, "link_stat": stat}
    return check.evaluate(parse(check, outs), check.DEFAULTS, n or node())


def test_followup_one_probe_per_query_over_all_devices():
    round2 = followup(check, {"npu_smi": smi(A3)}, node(16), check.DEFAULTS)
    assert set(round2) == {"link", "link_stat"}
    assert all(isinstance(p, Probe) and "for i in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15;" in p.cmd for p in round2.values())
    assert followup(check, {"npu_smi": smi(P310)}, node(1), check.DEFAULTS) == {}


def test_all_up_and_stable_passes_with_metrics():
    [f] = run(same(UP), same(STABLE))
    assert f.status is Status.PASS
    assert {m["name"] for m in f.details["metrics"]} == {"link_up_count"}


def test_down_fails_naming_device():
    [f] = run(loop({**{d: UP for d in range(8)}, 5: "link status: DOWN\n"}), same(STABLE))
    assert f.status is Status.FAIL and f.details["failed_devices"] == [5]
    assert "device 5 link DOWN, expected UP" in f.summary and f.details["devices"][0]["npu"] == 5
    assert "-link -g" in f.remediation


@pytest.mark.parametrize("name", fixture_names("hccn_tool_-link_stat_-g__"))
def test_link_stat_samples_warn_flapping(name):
    [f] = run(same(UP), loop({0: fixture_body(name), **{d: STABLE for d in range(1, 8)}}))
    assert f.status is Status.WARN and f.details["failed_devices"] == [0]
    assert "2 link-up events" in f.summary


def test_recent_link_down_warns_even_with_one_up_event():
    # after_flap sample with the up count lowered to 1: its LINK DOWN is 12.9 h before `current time`.
    text = fixture_body("hccn_tool_-link_stat_-g__after_flap__mindcluster-fixture.txt").replace(": 2", ": 1")
    [f] = run(same(UP), loop({0: text, **{d: STABLE for d in range(1, 8)}}))
    assert f.status is Status.WARN and "LINK DOWN 12.9 h ago" in f.summary
    [f] = check.evaluate(parse(check, {"npu_smi": smi(), "link": same(UP),
                                      "link_stat": loop({0: text, **{d: STABLE for d in range(1, 8)}})}),
                         {**check.DEFAULTS, "flap_window_hours": 6}, node())
    assert f.status is Status.PASS


@pytest.mark.parametrize("err,status", [
    ("Get invalid device id.", Status.FAIL), ("The device is not exist!", Status.FAIL),
    ("permission denied: pls check this cmd run permission.", Status.FAIL),
    ("The command is not supported on this product.", Status.PASS),
])
def test_hccn_tool_errors_are_results(err, status):
    [f] = run(loop({**{d: UP for d in range(7)}, 7: (err + "\n", 255)}), same(STABLE))
    assert f.status is status
    if status is Status.FAIL:
        assert err in f.summary and f.details["failed_devices"] == [7]


def test_missing_tool_fails_naming_path():
    [f] = run(MISSING, MISSING)
    assert f.status is Status.FAIL and "/usr/local/Ascend/driver/tools/hccn_tool" in f.summary


def test_inference_card_skips():
    [f] = run(None, None, node(1), smi(P310))
    assert f.status is Status.SKIP and "no RoCE" in f.summary


def test_cut_loop_is_parse_error():
    from preflight.checkapi import CommandOutput
    with pytest.raises(ParseError):
        parse(check, {"npu_smi": smi(), "link": CommandOutput(stdout="@@dev 0\nlink status: UP\n"), "link_stat": same(STABLE)})


def test_a3_uses_phy_ids_and_npu_chip_in_details():
    [f] = run(loop({**{d: UP for d in range(16)}, 13: "link status: DOWN\n"}), same(STABLE, range(16)), node(16), smi(A3))
    assert f.details["failed_devices"] == [13]
    assert f.details["devices"][0] | {} == {"device": 13, "npu": 6, "chip": 1, "problem": "link DOWN, expected UP"}


def test_link_stat_error_fails_the_device_but_not_supported_is_left_out():
    """docs/writing-a-check.md §4: an auxiliary query failing with an error line is a device fail;
    only a 'not supported' answer is ignored, and the pass says which devices answered so."""
    [f] = run(same(UP), loop({**{d: STABLE for d in range(8)}, 3: ("Command execute failed!\n", 255)}))
    assert f.status is Status.FAIL and f.details["failed_devices"] == [3]
    assert "device 3 hccn_tool -link_stat failed: Command execute failed!" in f.summary
    vm = "The VM does not support this command.\n"
    [f] = run(loop({**{d: UP for d in range(8)}, 6: (vm, 255)}), loop({**{d: STABLE for d in range(8)}, 6: (vm, 255)}))
    assert f.status is Status.PASS and f.details["unsupported_devices"] == [6]
    assert f.summary.startswith("7 devices: RoCE link UP") and "not supported" in f.summary
