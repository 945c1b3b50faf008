"""npu-smi parsers on every real sample (tests/fixtures/ascend), plus the traps of docs/FORMATS.md §1.4."""
from __future__ import annotations

import pytest

from preflight.checkapi import ParseError
from preflight.checkhelpers import line_with
from preflight.ascend import npu_smi
from tests.support import fixture_body, fixture_names

PARTIAL_MARK = "<<< rows not available >>>"  # line inserted by the fixture author, not tool output


def table_text(name: str) -> str:
    return "\n".join(ln for ln in fixture_body(name).splitlines() if ln != PARTIAL_MARK)


# fixture -> (layout, chips, processes, logical ids, wide)
EXPECTED = {
    "npu-smi_info__310_1chip__hpckurt-Ascend-npu-drivers.txt": ("device", 1, 0, [0], False),
    "npu-smi_info__310P3_1card_2chip_idle__vllm-ascend-1565.txt": ("device", 2, 0, [0, 1], False),
    "npu-smi_info__910B1_8card_idle_npu-smi24.1.0__vllm-ascend-4037.txt": ("chip", 8, 0, list(range(8)), False),
    "npu-smi_info__910B3_8card_1proc__vllm-ascend-6512.txt": ("chip", 8, 1, list(range(8)), False),
    "npu-smi_info__910ProB_A1_8card_idle__vllm-ascend-1047.txt": ("chip", 8, 0, list(range(8)), False),
    "npu-smi_info__A1_8card_python_procs_docmasked__mindcluster-doc.txt": ("chip", 8, 8, list(range(8)), False),
    "npu-smi_info__A3_16chip_npu-smi26.0.rc2_WIDE_PARTIAL__vllm-ascend-12980.txt": ("phy-id", 3, 1, [0, 1, 15], True),
    "npu-smi_info__A3_910_93_16chip_procs__vllm-ascend-4930.txt": ("phy-id", 16, 14, list(range(16)), False),
}


def test_every_table_sample_is_covered():
    assert sorted(EXPECTED) == fixture_names("npu-smi_info__")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_table_layouts(name):
    layout, chips, procs, ids, wide = EXPECTED[name]
    table = npu_smi.parse_info(table_text(name))
    assert (table.layout, len(table.chips), len(table.processes), table.wide) == (layout, chips, procs, wide)
    assert [c.logical_id for c in table.chips] == ids
    assert all(c.health == "OK" for c in table.chips)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_cached_table_is_the_plain_parsers_and_cannot_be_changed(name):
    """parse_info is cached on the text (env.consistency reads the table npu.idle read, docs/PERFORMANCE.md
    §4): what it returns equals the uncached parser's answer, and the one table its readers share
    cannot be changed by any of them."""
    import dataclasses

    text = table_text(name)
    table = npu_smi.parse_info(text)
    assert table == npu_smi.parse_info.__wrapped__(text)
    assert all(isinstance(getattr(table, f), tuple) for f in ("chips", "processes", "idle_npus"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        table.chips[0].health = "Alarm"  # type: ignore[misc]


def test_five_digit_used_value_touching_slash():
    chip = npu_smi.parse_info(table_text("npu-smi_info__910B3_8card_1proc__vllm-ascend-6512.txt")).chips[2]
    assert (chip.hbm_used_mb, chip.hbm_total_mb) == (41052, 65536)
    proc = npu_smi.parse_info(table_text("npu-smi_info__910B3_8card_1proc__vllm-ascend-6512.txt")).processes[0]
    assert (proc.npu, proc.chip, proc.pid, proc.name, proc.memory_mb) == (2, 0, 1333928, "", 37709)


def test_a3_second_chip_repeats_npu_with_power_dash():
    chips = npu_smi.parse_info(table_text("npu-smi_info__A3_910_93_16chip_procs__vllm-ascend-4930.txt")).chips
    assert (chips[1].npu, chips[1].chip, chips[1].phy_id, chips[1].power_w) == (0, 1, 1, None)
    assert chips[0].power_w == 232.5


def test_310_device_column_no_hbm_and_a1_ddr():
    chip = npu_smi.parse_info(table_text("npu-smi_info__310_1chip__hpckurt-Ascend-npu-drivers.txt")).chips[0]
    assert (chip.device, chip.hbm_total_mb, chip.mem_used_mb, chip.mem_total_mb, chip.name) == (0, None, 577, 7759, "310")
    a1 = npu_smi.parse_info(table_text("npu-smi_info__910ProB_A1_8card_idle__vllm-ascend-1047.txt")).chips[0]
    assert (a1.mem_used_mb, a1.mem_total_mb, a1.hbm_used_mb, a1.hbm_total_mb) == (2387, 13553, 18, 32768)


def test_wide_table_process_has_container_pid_and_versions():
    table = npu_smi.parse_info(table_text("npu-smi_info__A3_16chip_npu-smi26.0.rc2_WIDE_PARTIAL__vllm-ascend-12980.txt"))
    assert table.processes[0].pid_in_container == "NA" and table.processes[0].name == "python3.1"
    assert (table.tool_version, table.driver_version) == ("26.0.rc2", "26.0.rc2")


def test_non_contiguous_npu_ids():
    # Derived from the 910B1 sample by renumbering NPU cells (docs/FORMATS.md §1.4 trap 5: ids 0, 96, 32768, 32896).
    text = table_text("npu-smi_info__910B1_8card_idle_npu-smi24.1.0__vllm-ascend-4037.txt")
    text = text.replace("| 1     910B1  ", "| 96    910B1  ")
    assert [c.npu for c in npu_smi.parse_info(text).chips][:3] == [0, 96, 2]


def test_known_error_names_the_line_holding_a_needle():
    """known_error reads the whole text for the needles before it splits lines: the line it names
    is still the first holding one, anywhere in the text; a healthy table has none."""
    table = table_text("npu-smi_info__910B1_8card_idle_npu-smi24.1.0__vllm-ascend-4037.txt")
    assert npu_smi.known_error(table) is None
    for needle, meaning in npu_smi.KNOWN_ERRORS:
        text = f"{table}\n  dcmi says: {needle} (-8005)  \n{table}"
        assert npu_smi.known_error(text) == f"dcmi says: {needle} (-8005) ({meaning})"


@pytest.mark.parametrize("name", fixture_names("npu-smi_error__"))
def test_error_outputs_are_not_tables(name):
    text = fixture_body(name)
    with pytest.raises(ParseError):
        npu_smi.parse_info(text)
    assert npu_smi.known_error(text)
    # the line named is the sample's first line holding a needle, as printed but stripped
    first = next(ln.strip() for ln in text.splitlines() if any(n in ln for n, _ in npu_smi.KNOWN_ERRORS))
    line, meaning = line_with(text, npu_smi.KNOWN_ERRORS)
    assert line == first and npu_smi.known_error(text) == f"{first} ({meaning})"


def test_truncated_chip_row_raises():
    text = table_text("npu-smi_info__910B1_8card_idle_npu-smi24.1.0__vllm-ascend-4037.txt")
    lines = text.splitlines()
    cut = "\n".join(lines[:7])  # header + the first line of chip 0 only
    with pytest.raises(ParseError):
        npu_smi.parse_info(cut)


def test_health_ok_and_alarm():
    ok = npu_smi.parse_health(fixture_body("npu-smi_info_-t_health_-c__910A_OK__mindcluster-fixture.txt"))
    assert ok == npu_smi.Health("OK", (), "")
    alarm = npu_smi.parse_health(fixture_body("npu-smi_info_-t_health_-c__910A_Alarm__mindcluster-fixture.txt"))
    assert alarm.status == "Alarm" and alarm.error_codes == ("A4025021", "8C03A000", "8C084E00")
    assert alarm.information.splitlines()[0] == "ascend_monitor adda heart beat lost error"
    assert len(alarm.information.splitlines()) == 3


def test_health_all_chips_doc_sample():
    text = fixture_body("npu-smi_info_-t_health_-i__all_chips__hiascend-docs.txt")
    card, chip = text.split("=== -c 0 ===\n")  # separator added by the fixture author
    assert ("Chip ID", "0") in npu_smi.parse_pairs(card)
    assert npu_smi.parse_health(chip).status == "OK"
    with pytest.raises(ParseError):
        npu_smi.parse_health(card)


def test_board_card_and_chip():
    card = npu_smi.parse_board(fixture_body("npu-smi_info_-t_board_-i__910A__mindcluster-fixture.txt"))
    assert card["Board ID"] == "0x02" and card["Software Version"] == "23.0.5"
    chip = npu_smi.parse_board(fixture_body("npu-smi_info_-t_board_-i_-c__910A__mindcluster-fixture.txt"))
    assert chip["Chip Name"] == "910A"
    with pytest.raises(ParseError):
        npu_smi.parse_board(fixture_body("npu-smi_error__invalid_card_id__mindcluster-fixture.txt"))


def test_list_both_formats():
    a3, a2 = fixture_body("npu-smi_info_-l__A3_and_200IA2__hiascend-docs.txt").split("=== (2) ===\n")
    assert npu_smi.parse_list(a3) == {0: 2}
    assert npu_smi.parse_list(a2) == {0: 1}


def test_mapping_skips_mcu_rows():
    rows = npu_smi.parse_mapping(fixture_body("npu-smi_info_-m__910B3_with_Mcu_rows__ts-test-fixture.txt"))
    assert [(r.npu, r.chip, r.logic_id) for r in rows] == [(0, 0, 0), (1, 0, 1)]
    rows = npu_smi.parse_mapping(fixture_body("npu-smi_info_-m__910A_8card__mindcluster-fixture.txt"))
    assert [r.logic_id for r in rows] == list(range(8)) and rows[0].name == "Ascend 910A"
    with pytest.raises(ParseError):
        npu_smi.parse_mapping("Invalid card id.\n")


def test_other_t_queries_read_as_pairs():
    for name in ("npu-smi_info_-t_usages__910A__mindcluster-fixture.txt", "npu-smi_info_-t_ecc__doc__mindcluster-doc.txt"):
        assert dict(npu_smi.parse_pairs(fixture_body(name)))["NPU ID"] in ("0", "1")
