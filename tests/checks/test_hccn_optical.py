from __future__ import annotations

from preflight.checks import hccn_optical as check
from preflight.checkapi import CommandOutput, Status
from tests.checks.ascend_helpers import MISSING, P310, followup, loop, node, parse, same, smi
from tests.support import fixture_body

FULL = fixture_body("hccn_tool_-optical_-g__910A_QSFP_4lane__mindcluster-fixture.txt")
# The healthy module: the 4-lane sample with present, lane values inside thresholds and flags 0x0.
HEALTHY = (FULL.replace("present              : not present", "present              : present")
           .replace("Tx Power0            : 4.4035 mW", "Tx Power0            : 1.4035 mW")
           .replace("Rx Power1            : 0.0054 mW", "Rx Power1            : 1.0054 mW")
           .replace("0xff", "0x0"))
BOARD = CommandOutput(stdout=fixture_body("npu-smi_info_-t_board_-i__910A__mindcluster-fixture.txt"))


def run(out, board=BOARD, npu=None, n=None):
    return check.evaluate(parse(check, {"npu_smi": npu or smi(), "optical": out, "board": board}),
                          check.DEFAULTS, n or node())


def test_healthy_passes_with_metrics():
    [f] = run(same(HEALTHY))
    assert f.status is Status.PASS
    names = {m["name"] for m in f.details["metrics"]}
    assert names == {"optical_tx_power", "optical_rx_power", "optical_temperature"}
    assert {"device": "0", "lane": "3"} in [m["labels"] for m in f.details["metrics"]]


def test_real_sample_fails_power_presence_and_los():
    [f] = run(loop({**{d: HEALTHY for d in range(8)}, 0: FULL}))
    assert f.status is Status.FAIL and f.details["failed_devices"] == [0]
    for text in ("module not present", "Rx Power1 0.0054 mW outside [0.1445, 3.5481]",
                 "Tx Power0 4.4035 mW outside [0.2818, 3.5481]", "Rx Los Flag 0xff", "Rx LoL Flag 0xff"):
        assert text in f.summary


def test_elided_doc_sample_fails_on_flags():
    elided = "\n".join(ln for ln in fixture_body("hccn_tool_-optical_-g__elided__mindcluster-doc.txt").splitlines()
                       if ln != "...")  # doc elision lines, not tool output
    [f] = run(loop({**{d: HEALTHY for d in range(8)}, 1: elided}))
    assert f.status is Status.FAIL and f.details["failed_devices"] == [1] and "Rx Los Flag 0xff" in f.summary


def test_not_supported_and_na_tolerated():
    text = HEALTHY.replace("Tx Los Flag          : 0x0", "Tx Los Flag          : NA").replace(
        "temperature          : 47 C", "temperature          : not supported")
    assert run(same(text))[0].status is Status.PASS


def test_temperature_outside_thresholds_warns():
    [f] = run(same(HEALTHY.replace("temperature          : 47 C", "temperature          : 75 C")))
    assert f.status is Status.WARN and "temperature 75.0 C" in f.summary


def test_pod_board_skips_and_errors():
    pod = CommandOutput(stdout=BOARD.stdout.replace("0x02", "0x30"))
    assert run(same(FULL), pod)[0].status is Status.SKIP
    [f] = run(loop({**{d: HEALTHY for d in range(7)}, 7: ("Optical module is not present.\n", 1)}))
    assert f.status is Status.FAIL and f.details["failed_devices"] == [7]
    assert run(MISSING)[0].status is Status.FAIL
    assert run(None, None, smi(P310), node(1))[0].status is Status.SKIP


def test_followup_asks_board_of_first_npu():
    assert followup(check, {"npu_smi": smi()}, node(), check.DEFAULTS)["board"].cmd == "LC_ALL=C npu-smi info -t board -i 0"


def test_unreadable_board_id_is_said_not_silently_taken_as_no_pod():
    [ok] = run(same(HEALTHY))
    assert ok.status is Status.PASS and "board_id_unread" not in ok.details
    failed = CommandOutput(stdout=fixture_body("npu-smi_error__invalid_card_id__mindcluster-fixture.txt"), rc=255)
    [f] = run(same(HEALTHY), board=failed)
    assert f.status is Status.PASS and f.details["board_id_unread"].startswith("npu-smi info -t board failed: ")
