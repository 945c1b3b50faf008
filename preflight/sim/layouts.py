"""Per-product hardware facts the simulator needs: which table layout, how many chips per card,
plausible idle readings. Kept as plain data so a new product is one entry, not new code.

Values come from the fixtures in tests/fixtures/ascend (bus ids, HBM totals, power ranges).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    key: str                 # spec value: 910B | A3 | 310P | 910A
    table: str               # "chip" (layout A), "phy" (B), "device" (C: 310/310P)
    chip_name: str           # Name column of npu-smi info
    map_name: str            # Chip Name column of npu-smi info -m
    chips_per_npu: int
    hbm_total: int           # MB; 0 for 310P (no HBM column)
    mem_total: int           # MB of DDR; 0 on 910B/A3
    hbm_idle: int            # MB the driver holds on an idle chip
    bus_ids: tuple[str, ...]
    pci_device_id: str
    mcu: bool                # `-m` lists an Mcu row per card, `-t health -i` an MCU block
    hccn: bool               # has RoCE NICs (hccn_tool works); 310P does not
    npu_smi_version: str
    cann_version: str
    firmware_version: str


LAYOUTS: dict[str, Layout] = {
    "910B": Layout(
        key="910B", table="chip", chip_name="910B3", map_name="Ascend 910B3", chips_per_npu=1,
        hbm_total=65536, mem_total=0, hbm_idle=3400,
        bus_ids=("0000:C1:00.0", "0000:C2:00.0", "0000:81:00.0", "0000:82:00.0",
                 "0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:42:00.0"),
        pci_device_id="0xD802", mcu=True, hccn=True,
        npu_smi_version="25.2.0", cann_version="8.3.RC2", firmware_version="7.7.0.1.231"),
    "A3": Layout(
        key="A3", table="phy", chip_name="Ascend910", map_name="Ascend 910_9392", chips_per_npu=2,
        hbm_total=65536, mem_total=0, hbm_idle=3100,
        bus_ids=("0000:9D:00.0", "0000:9F:00.0", "0000:99:00.0", "0000:9B:00.0",
                 "0000:95:00.0", "0000:97:00.0", "0000:91:00.0", "0000:93:00.0",
                 "0000:8D:00.0", "0000:8F:00.0", "0000:89:00.0", "0000:8B:00.0",
                 "0000:85:00.0", "0000:87:00.0", "0000:81:00.0", "0000:83:00.0"),
        pci_device_id="0xD803", mcu=False, hccn=True,
        npu_smi_version="25.2.3", cann_version="8.5.0", firmware_version="7.7.0.6.236"),
    "310P": Layout(
        key="310P", table="device", chip_name="310P3", map_name="Ascend 310P3", chips_per_npu=1,
        hbm_total=0, mem_total=44280, hbm_idle=0,
        bus_ids=("0000:01:00.0", "0000:02:00.0", "0000:81:00.0", "0000:82:00.0",
                 "0000:C1:00.0", "0000:C2:00.0", "0000:41:00.0", "0000:42:00.0"),
        pci_device_id="0xD500", mcu=False, hccn=False,
        npu_smi_version="23.0.0", cann_version="8.2.RC1", firmware_version="7.1.0.3.220"),
    "910A": Layout(
        key="910A", table="chip", chip_name="910ProB", map_name="Ascend 910ProB", chips_per_npu=1,
        hbm_total=32768, mem_total=15665, hbm_idle=10,
        bus_ids=("0000:C1:00.0", "0000:81:00.0", "0000:41:00.0", "0000:01:00.0",
                 "0000:C2:00.0", "0000:82:00.0", "0000:42:00.0", "0000:02:00.0"),
        pci_device_id="0xD801", mcu=False, hccn=True,
        npu_smi_version="24.1.0", cann_version="8.1.RC1", firmware_version="7.1.0.11.220"),
}


def layout(key: str) -> Layout:
    return LAYOUTS[key]
