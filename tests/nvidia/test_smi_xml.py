"""`nvidia-smi -q -x` read by preflight/nvidia/smi_xml.py, on real XML of five driver generations
(tests/fixtures/nvidia/nvidia-smi_-q_-x__*: 418, 515, 535 with MIG, 580 on a real H200, 595; each
file's header names its source), and gpu.health's verdicts the same from either form."""
from __future__ import annotations

import pytest

from preflight.checkapi import ParseError, Status
from preflight.checks import gpu_health, gpu_topology
from preflight.nvidia import nvidia_smi, probes as nv, smi_xml
from tests.checks.nvidia_helpers import kernel_log, node, out
from tests.support import fixture_body

H200_TEXT = fixture_body("nvidia-smi_-q__H200_1gpu_580__real-capture.txt")
H200_XML = fixture_body("nvidia-smi_-q_-x__H200_1gpu_580__real-capture.txt")
P400 = fixture_body("nvidia-smi_-q_-x__Quadro-P400_1gpu_418__telegraf-testdata.txt")
T4 = fixture_body("nvidia-smi_-q_-x__Tesla-T4_1gpu_515__telegraf-testdata.txt")
A100_CUT = fixture_body("nvidia-smi_-q_-x__A100-SXM4_1of4gpu_MIG_535__telegraf-testdata.txt")
RTX3080 = fixture_body("nvidia-smi_-q_-x__RTX-3080_1gpu_595__telegraf-testdata.txt")


def health(q: str, devices: int = 1):
    facts = gpu_health.parse({nv.QUERY_PROBE: out(q), nv.KERNEL_PROBE: kernel_log()})
    return gpu_health.evaluate(facts, gpu_health.DEFAULTS, node(devices))


@pytest.mark.parametrize("text, driver, bus, name, pcie, reasons_section", [
    (P400, "418.43", "00000000:43:00.0", "Quadro P400", (1, 3, 16, 16), "Clocks Throttle Reasons"),
    (T4, "515.105.01", "00000000:00:1E.0", "Tesla T4", (3, 3, 8, 16), "Clocks Throttle Reasons"),
    (A100_CUT, "535.54.03", "00000000:01:00.0", "NVIDIA A100-SXM4-80GB", (4, 4, 16, 16), "Clocks Event Reasons"),
    (H200_XML, "580.159.04", "00000000:00:06.0", "NVIDIA H200", (5, 5, 16, 16), "Clocks Event Reasons"),
    (RTX3080, "595.58.03", "00000000:0C:00.0", "NVIDIA GeForce RTX 3080", (4, 4, 16, 16), "Clocks Event Reasons"),
])
def test_real_xml_of_five_driver_generations(text, driver, bus, name, pcie, reasons_section):
    r = smi_xml.read_query(text)
    [g] = r.gpus
    assert (r.driver_version, g.bus_id, g.name) == (driver, bus, name)
    p = g.pcie()
    assert (p["gen_current"], p["gen_max"], p["width_current"], p["width_max"]) == pcie
    assert g.section(reasons_section) and "HW Slowdown" in g.clock_reasons and g.uuid.startswith("GPU-")


def test_old_ecc_layout_and_mig_nesting():
    # 418 (Pascal): single_bit/double_bit counters, all N/A on this card: no figure, not zero
    assert smi_xml.read_query(P400).gpus[0].uncorrectable("Volatile") is None
    # 535 with MIG: mig_device elements nest their own ecc_error_count and fb_memory_usage; the
    # GPU's own are read, not theirs (the MIG slices use 12 MiB each, the GPU 50 of 81920)
    g = smi_xml.read_query(A100_CUT).gpus[0]
    assert g.memory_mib == (50, 81920) and g.uncorrectable("Volatile") == 0 and g.get("Remapped Rows", "Pending") is None


def test_the_same_h200_gives_the_same_verdicts_from_either_form():
    text, xml = health(H200_TEXT), health(H200_XML)
    assert [(f.status, f.summary, f.details, f.remediation) for f in text] == \
           [(f.status, f.summary, f.details, f.remediation) for f in xml]
    assert text[0].status is Status.PASS
    # a pending row remap, set the same way in each form (the text's `Pending: Yes` under Remapped Rows)
    t_rows = H200_TEXT.index("    Remapped Rows")
    t_pending = H200_TEXT.index("Pending", t_rows)
    text_q = H200_TEXT[:t_pending] + H200_TEXT[t_pending:].replace(": No", ": Yes", 1)
    xml_q = H200_XML.replace("<remapped_row_pending>No</remapped_row_pending>", "<remapped_row_pending>Yes</remapped_row_pending>")
    [a], [b] = health(text_q), health(xml_q)
    assert a.status is Status.FAIL and (a.summary, a.details) == (b.summary, b.details)
    assert "row remap pending" in a.summary
    # and a GPU count short of the inventory's
    assert [f.summary for f in health(H200_TEXT, 8)] == [f.summary for f in health(H200_XML, 8)]


def test_topology_reads_the_fabric_state_from_either_form():
    for q in (H200_TEXT, H200_XML):
        facts = gpu_topology.parse({gpu_topology.TOPO_PROBE: out("\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-15\t0\t\tN/A\n"),
                                    gpu_topology.NVLINK_PROBE: out(""), nv.QUERY_PROBE: out(q)})
        assert facts.nvswitch is False and facts.topo.gpus == 1


def test_real_findings_in_the_samples():
    [f] = health(T4)  # the T4 sample's link runs at x8 of x16
    assert f.status is Status.FAIL and "PCIe link x8, expected x16" in f.summary
    with pytest.raises(ParseError, match="cut short"):  # the A100 file keeps 1 of its 4 GPUs
        health(A100_CUT, 4)


BOMB = """<?xml version="1.0"?>
<!DOCTYPE nvidia_smi_log [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>
<nvidia_smi_log><driver_version>&b;</driver_version></nvidia_smi_log>
"""
EXTERNAL = """<?xml version="1.0"?>
<!DOCTYPE nvidia_smi_log [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<nvidia_smi_log><driver_version>&x;</driver_version></nvidia_smi_log>
"""


@pytest.mark.parametrize("doc", ids=["entity-bomb", "external-entity", "own-doctype-with-subset"], argvalues=[BOMB, EXTERNAL, H200_XML.replace('<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">',
                                                                   '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd" [<!ENTITY e "x">]>')])
def test_entity_declarations_are_refused(doc):
    with pytest.raises(ParseError, match="refused"):
        smi_xml.read_query(doc)


def test_broken_xml_is_one_parse_error_and_text_still_reads():
    with pytest.raises(ParseError, match="not well-formed"):
        smi_xml.read_query(H200_XML[: len(H200_XML) // 2])
    assert smi_xml.read_query(H200_TEXT).gpus[0].name == "NVIDIA H200"
    assert isinstance(smi_xml.read_query(H200_TEXT), nvidia_smi.QueryReport)


def test_the_second_real_h200_session_gives_the_same_verdicts_from_either_form():
    """The captures bench/gpu_device_check.sh brought back from a real H200 on 2026-12-04."""
    text = health(fixture_body("nvidia-smi_-q__H200_1gpu_580__real-capture-2026-12-04.txt"))
    xml = health(fixture_body("nvidia-smi_-q_-x__H200_1gpu_580__real-capture-2026-12-04.txt"))
    assert [(f.status, f.summary, f.details, f.remediation) for f in text] == \
           [(f.status, f.summary, f.details, f.remediation) for f in xml]
    assert text[0].status is Status.PASS and "driver 580.159.04" in text[0].summary
