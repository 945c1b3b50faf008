"""Actions: the grading tables are data with sources, the worst matching row wins, every shipped
check has a table with a fallback, and the npu-smi code table reads as the vendor grades it."""
from __future__ import annotations

import types

import pytest

from preflight import actions
from preflight.ascend import fault_codes
from preflight.model import Result, Status
from preflight.registry import ContractError, _actions, discover

ALL = discover()


@pytest.mark.parametrize("cid", sorted(ALL))
def test_every_check_grades_its_failures_with_a_fallback_row(cid):
    table = ALL[cid].actions
    assert table, f"{cid}: no ACTIONS table (preflight/actions.py)"
    assert any(not r.pattern for r in table), f"{cid}: ACTIONS needs a fallback row ('', action, source)"
    assert all(r.source.strip() for r in table)


def test_worst_matching_row_wins_and_fallback_only_without_match():
    table = actions.rules([("DOWN", "replace_hardware", "s"), ("flapping", "monitor", "s"),
                           ("", "reset_device", "s")], "t")
    assert actions.choose(table, Status.FAIL, "device 1 link DOWN; device 2 flapping") == "replace_hardware"
    assert actions.choose(table, Status.WARN, "device 2 flapping") == "monitor"
    assert actions.choose(table, Status.FAIL, "hccn_tool failed") == "reset_device"
    assert actions.choose(table, Status.PASS, "all UP") is None
    assert actions.choose(table, Status.ERROR, "could not read") is None
    assert actions.choose((), Status.WARN, "x") == "monitor" and actions.choose((), Status.FAIL, "x") == "fix_config"


def test_a_finding_that_set_its_action_keeps_it():
    r = Result("hccn.link", "n1", Status.FAIL, "link DOWN", action="reboot_node")
    (out,) = actions.assign([r], {"hccn.link": ALL["hccn.link"].actions})
    assert out.action == "reboot_node"


@pytest.mark.parametrize("row, why", [
    (("x", "pray", "s"), "action 'pray'"),
    (("x", "monitor", " "), "cites no source"),
    (("(", "monitor", "s"), "bad pattern"),
    (("x", "monitor"), "must be (pattern, action, source)"),
])
def test_bad_rows_are_the_modules_bug(row, why):
    mod = types.ModuleType("preflight.checks.fake")
    mod.ACTIONS = (row,)
    with pytest.raises(ContractError, match=why.replace("(", r"\(").replace(")", r"\)")):
        _actions(mod)


def test_npu_codes_graded_as_the_vendor_table_says():
    t = fault_codes.table()
    assert t["A4025021"] == "monitor"          # NotHandleFault
    assert t["8C03A000"] == "reset_device"     # RestartNPU
    assert t["8C084E00"] == "reset_device"     # FreeRestartNPU
    assert t["80C98008"] == "restart_process"  # RestartRequest
    assert t["80E3A201"] == "replace_hardware"  # SeparateNPU
    assert t["A2301001"] == "replace_hardware"  # in RestartBusiness and SeparateNPU: the worse
    table = ALL["npu.health"].actions
    msg = "device {} health Alarm, expected OK; error codes {}"
    assert actions.choose(table, Status.FAIL, msg.format(2, "A4025021 8C03A000 8C084E00")) == "reset_device"
    assert actions.choose(table, Status.FAIL, msg.format(2, "A4025021")) == "monitor"
    assert actions.choose(table, Status.FAIL, msg.format(3, "80E3A201")) == "replace_hardware"
    assert actions.choose(table, Status.FAIL, msg.format(3, "none reported")) == "reset_device"
    # a code inside a longer hex word is not that code
    assert actions.choose(table, Status.FAIL, "npu-smi info failed: 18C03A0001") == "reboot_node"


def test_parse_list_names_the_bad_action():
    assert actions.parse_list("reboot_node, replace_hardware") == ("reboot_node", "replace_hardware")
    with pytest.raises(ValueError, match="reboot"):
        actions.parse_list("reboot")
