"""Actions: the check sets a finding's action from the cause it found (a problem named in its
ACTIONS table, with a source), never from the finding's wording; the worst named problem wins,
every shipped check has a fallback row, and the npu-smi code table reads as the vendor grades it."""
from __future__ import annotations

import re
import types
from dataclasses import replace

import pytest

from preflight import actions
from preflight.ascend import fault_codes
from preflight.checks import hccn_link, npu_health
from preflight.model import Result, Status
from preflight.registry import ContractError, _actions, discover
from tests.checks.ascend_helpers import loop, node, parse, same, smi
from tests.support import fixture_body

ALL = discover()


@pytest.mark.parametrize("cid", sorted(ALL))
def test_every_check_grades_its_failures_with_a_fallback_row(cid):
    table = ALL[cid].actions
    assert "" in table, f"{cid}: ACTIONS needs a fallback row '': (action, source)"
    for problem, (action, source) in table.items():
        assert re.fullmatch(r"[a-z_]*|[a-z_]+:[0-9A-Za-z_]+", problem), \
            f"{cid}: ACTIONS key {problem!r} is a problem code, not a pattern over wording"
        assert action in actions.RANK and source.strip()


def test_a_kernel_log_kind_grades_alike():
    from preflight.nvidia import kernlog

    by_kind: dict[str, set[str]] = {}
    for r in kernlog.RULES:
        by_kind.setdefault(r.kind, set()).add(r.action)
    assert all(len(a) == 1 for a in by_kind.values()), by_kind  # gpu.health's ACTIONS keys them by kind


def test_the_worst_named_problem_wins_and_none_named_gets_the_fallback():
    table = actions.table({"down": ("replace_hardware", "s"), "flapping": ("monitor", "s"),
                           "": ("reset_device", "s")}, "t")
    assert actions.graded(table, "down", "flapping") == "replace_hardware"
    assert actions.graded(table, "flapping", None) == "monitor"
    assert actions.graded(table) is None and actions.graded(table, None, "") is None
    with pytest.raises(KeyError):
        actions.graded(table, "no_such_problem")
    assert actions.fallback(table, Status.FAIL) == "reset_device" and actions.fallback(table, Status.PASS) is None
    assert actions.fallback({}, Status.WARN) == "monitor" and actions.fallback({}, Status.FAIL) == "fix_config"
    assert actions.fallback(table, Status.ERROR) is None


def test_a_finding_that_set_its_action_keeps_it_and_one_that_did_not_gets_the_fallback():
    set_ = Result("hccn.link", "n1", Status.FAIL, "link DOWN", action="reboot_node")
    unset = Result("hccn.link", "n1", Status.FAIL, "device 5 link DOWN, expected UP")
    out = actions.assign([set_, unset], {"hccn.link": ALL["hccn.link"].actions})
    assert [r.action for r in out] == ["reboot_node", "reset_device"]  # the wording of `unset` selects nothing


UP = fixture_body("hccn_tool_-link_-g__UP__mindcluster-doc.txt")
STABLE = "[devid 0]current time        : Wed Aug  2 03:36:43 2022\n[devid 0]link up count       : 1\n" \
         "[devid 0]link change records : NA\n"


def test_wording_never_selects_an_action():
    """The same cause graded the same whatever the words: rewording a finding (as a reporter or a
    redaction may) keeps its action, and a fallback cause whose text happens to read like another
    problem is not graded as that problem."""
    outs = {"npu_smi": smi(), "link": loop({**{d: UP for d in range(8)}, 5: "link status: DOWN\n"}),
            "link_stat": same(STABLE)}
    [down] = hccn_link.evaluate(parse(hccn_link, outs), hccn_link.DEFAULTS, node())
    assert down.action == "replace_hardware"
    reworded = replace(down, summary="device 5: the port is not up")
    r = actions.assign([Result("hccn.link", "n1", reworded.status, reworded.summary, action=reworded.action)],
                       {"hccn.link": ALL["hccn.link"].actions})
    assert r[0].action == "replace_hardware"
    # hccn_tool's own error text that reads "link DOWN, expected UP" is still a failing tool: the
    # fallback (reset the chip), where a regex over the summary graded it as a DOWN port
    outs["link"] = loop({**{d: UP for d in range(8)}, 5: ("Error: link DOWN, expected UP\n", 1)})
    [failed] = hccn_link.evaluate(parse(hccn_link, outs), hccn_link.DEFAULTS, node())
    assert "hccn_tool failed" in failed.summary and "link DOWN, expected UP" in failed.summary
    assert failed.action is None
    assert actions.assign([Result("hccn.link", "n1", failed.status, failed.summary)],
                          {"hccn.link": ALL["hccn.link"].actions})[0].action == "reset_device"


@pytest.mark.parametrize("row, why", [
    (("pray", "s"), "action 'pray'"),
    (("monitor", " "), "cites no source"),
    (("monitor",), "must be (action, source)"),
])
def test_bad_rows_are_the_modules_bug(row, why):
    mod = types.ModuleType("preflight.checks.fake")
    mod.ACTIONS = {"x": row}
    with pytest.raises(ContractError, match=re.escape(why)):
        _actions(mod)
    mod.ACTIONS = (("x", "monitor", "s"),)  # the old shape: a pattern over the summary
    with pytest.raises(ContractError, match="must be a mapping"):
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

    def graded(codes: str) -> str | None:
        return actions.graded(table, *npu_health._told(codes))
    assert graded("A4025021 8C03A000 8C084E00") == "reset_device"
    assert graded("A4025021") == "monitor"
    assert graded("80e3a201") == "replace_hardware"
    # a code inside a longer hex word is not that code: npu-smi's failure falls to the fallback
    assert graded("npu-smi info failed: 18C03A0001") is None and table[""][0] == "reboot_node"


def test_parse_list_names_the_bad_action():
    assert actions.parse_list("reboot_node, replace_hardware") == ("reboot_node", "replace_hardware")
    with pytest.raises(ValueError, match="reboot"):
        actions.parse_list("reboot")
