"""The NVIDIA parsers on every matching real sample (docs/NVIDIA.md §1)."""
from __future__ import annotations

import pytest

from preflight.checkapi import ParseError
from preflight.nvidia import ibstat, nvidia_smi, xid
from tests.support import fixture_body

CSV = fixture_body("nvidia-smi_-L_and_query-csv__issue-excerpts.txt")
FIELDS3 = ("power.limit,power.min_limit,power.max_limit,memory.total,vbios_version,driver_version,name,gpu_uuid,"
           "power.draw,temperature.gpu,temperature.memory,clocks.current.graphics,clocks.sm,clocks.mem,"
           "utilization.gpu,utilization.memory,fan.speed,pcie.link.width.current,pstate").split(",")


def _part(n: int) -> str:
    return CSV.split("=== (2) ===\n")[1].split("=== (3) ===\n")[n - 2] if n > 1 else CSV.split("=== (2)")[0]


def test_csv_splits_on_comma_space_and_keeps_a_name_with_spaces():
    """Ricks-Lab/gpu-utils#83: splitting on whitespace shifted every field of `GeForce RTX 2080`."""
    [row] = nvidia_smi.parse_csv(_part(3), FIELDS3)
    assert row["name"] == "GeForce RTX 2080" and row["temperature.memory"] is None and row["pstate"] == "P2"
    [row] = nvidia_smi.parse_csv(_part(2), ["name", "pci.device_id"])
    assert row == {"name": "NVIDIA H100 NVL", "pci.device_id": "0x232110DE"}
    with pytest.raises(ParseError, match="2 fields where 3"):
        nvidia_smi.parse_csv(_part(2), ["name", "pci.device_id", "uuid"])


def test_query_report_reads_every_gpu_of_the_h100_capture():
    r = nvidia_smi.parse_query(fixture_body("nvidia-smi_-q__H100_8gpu__gpud-fixture.txt"))
    assert (r.driver_version, r.cuda_version, r.attached, len(r.gpus)) == ("535.183.01", "12.2", 8, 8)
    assert [g.index for g in r.gpus] == list(range(8)) and r.gpus[7].bus_id == "00000000:CA:00.0"
    assert r.gpus[2].clock_reasons["HW Power Brake Slowdown"] and not r.gpus[0].clock_reasons["HW Power Brake Slowdown"]
    assert all(g.uncorrectable("Volatile") == 0 and g.uncorrectable("Aggregate") == 0 for g in r.gpus)


def test_query_refuses_other_text():
    with pytest.raises(ParseError, match="NVSMI LOG"):
        nvidia_smi.parse_query(fixture_body("nvidia-smi__H100_8gpu_idle__gpud-fixture.txt"))


def test_table_of_every_sample():
    t = nvidia_smi.parse_table(fixture_body("nvidia-smi__H100_8gpu_idle__gpud-fixture.txt"))
    assert (t.smi_version, t.cuda_version, len(t.gpus), t.processes) == ("550.90.07", "12.4", 8, ())
    assert t.gpus[0].bus_id == "00000000:19:00.0" and t.gpus[0].memory_total_mib == 81559
    t = nvidia_smi.parse_table(fixture_body("nvidia-smi__P100_4gpu_python3_processes__readme-capture.txt"))
    assert [(p.gpu, p.pid, p.type, p.memory_mib) for p in t.processes][0] == (0, 280080, "C", 3030)
    with pytest.raises(ParseError, match="banner"):
        nvidia_smi.parse_table("No devices were found\n")


def test_ibstatus_and_ibstat_agree_on_port_shape():
    ports = ibstat.parse_ibstatus(fixture_body("ibstatus__A100_all_active__gpud-fixture.txt"))
    ib = [p for p in ports if p.link_layer == "InfiniBand"]
    assert len(ib) == 8 and all(p.up and p.rate == 200 for p in ib)
    assert [(p.name, p.link_layer, p.rate) for p in ports if p not in ib] == [("mlx5_8:1", "Ethernet", 40.0)]
    down = [p.name for p in ibstat.parse_ibstat(fixture_body("ibstat__H100_CX7_some_down__gpud-fixture.txt")) if not p.up]
    assert down == ["mlx5_2:1", "mlx5_7:1", "mlx5_8:1"]


@pytest.mark.parametrize("line,pci,num", [
    # the line shapes of gpud's dmesg tests (components/accelerator/nvidia/query/xid/dmesg_test.go)
    ("[...] NVRM: Xid (0000:03:00): 14, Channel 00000001", "0000:03:00", 14),
    ("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No",
     "0000:01:00", 94),
    ("NVRM: Xid (PCI:0000:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No", "0000:01:00", 95),
])
def test_xid_line_shapes(line, pci, num):
    [ev] = xid.parse_kernel_log(line)
    assert (ev.pci, ev.xid) == (pci, num)


def test_xid_samples_and_bus_key():
    evs = xid.parse_kernel_log(fixture_body("dmesg__xid119_gsp_timeout__gpud-fixture.txt"))
    assert {e.xid for e in evs} == {119} and len(evs) > 1 and evs[0].info.name == "GSP RPC Timeout"
    [ev] = xid.parse_kernel_log(fixture_body("dmesg__xid79_fallen_off_bus_sxid__gpud-readme.txt"))
    assert ev.xid == 79 and ev.info.status.value == "fail"  # SXid lines are not Xid lines
    assert xid.bus_key("00000000:9B:00.0") == "0000:9b:00" == ev.pci.replace("91", "9b")
    assert xid.XidEvent("0000:01:00", 9999, "").info is xid.UNKNOWN
