"""A node's simulated state: one JSON-able dict, built from its NodeSpec at bring-up.

Why a plain dict: faults are small edits to it (see faults.py), the renderers read it, and it is
saved as `nodes/<name>/state.json`, so a test or a person can see exactly what a node claims to be.
Everything the tools print and everything the network and process reconcilers do follows from it.
"""
from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any

from .layouts import LAYOUTS

if TYPE_CHECKING:
    from .spec import NodeSpec

# asctime of a fixed moment (not "now") so rendered text is reproducible.
BOOT_TIME = "Mon Dec  1 03:55:12 2025"
NOW_TIME = "Mon Dec  1 04:00:00 2025"


def device_count(node: "NodeSpec") -> int:
    return node.npus * (node.chips_per_npu or LAYOUTS[node.layout].chips_per_npu)


def _chip(lay, node: "NodeSpec", npu: int, chip: int, logic: int) -> dict[str, Any]:
    seed = node.index * 7 + logic * 3
    first = chip == 0
    if lay.key == "310P":
        power = "NA"
    elif first:
        power = f"{88 + seed % 13}.{(node.index + logic) % 10}"
    else:
        power = "-"
    return {
        "chip": chip,
        "logic": logic,
        "phy": logic,  # Phy-ID on A3, Device on 310P; hccn_tool -i takes this id
        "bus": lay.bus_ids[logic % len(lay.bus_ids)],
        "health": "OK",
        "codes": [],
        "info": [],
        "power": power,
        "temp": 32 + seed % 9,
        "hugepages": [0, 0] if lay.key != "310P" else [0, 969],
        "aicore": 0,
        "mem": [0, 0] if not lay.mem_total else [1500 + seed % 1100, lay.mem_total],
        "hbm": [lay.hbm_idle + seed % 20 if lay.hbm_total else 0, lay.hbm_total],
    }


def _optical() -> dict[str, Any]:
    return {
        "present": True,
        "temperature": 47,
        "vendor": "Hisense", "part": "LMQ8611-PC+", "serial": "V8BD6H25033",
        "tx": [1.4035, 1.3968, 1.4140, 1.4988],
        "rx": [1.0189, 0.9907, 0.9907, 1.0213],
        "bias": [7.9360, 7.9280, 7.9360, 7.9240],
        "tx_los": "0x0", "rx_los": "0x0", "tx_lol": "0x0", "rx_lol": "0x0",
        "snr": [23.1211, 22.6289, 22.1875, 23.2969],
    }


def build_state(node: "NodeSpec", host_ip: str, device_ips: list[str], device_netmask: str,
                host_iface: str, device_iface: str) -> dict[str, Any]:
    """The healthy baseline of one node."""
    lay = LAYOUTS[node.layout]
    per = node.chips_per_npu or lay.chips_per_npu
    npus = []
    logic = 0
    for npu in range(node.npus):
        chips = []
        for chip in range(per):
            chips.append(_chip(lay, node, npu, chip, logic))
            logic += 1
        npus.append({"id": npu, "chips": chips})
    devices = []
    for d, ip in enumerate(device_ips):
        devices.append({
            "id": d, "ip": ip, "netmask": device_netmask, "shown_ip": True,
            "link": "UP", "link_up_count": 1, "link_records": [[BOOT_TIME, "LINK UP"]],
            "net_health": "Success", "optical": _optical(), "fec": "rs FEC mode",
            "tls": [0, 1, 60], "speed": 200000 if lay.key == "A3" else 100000,
        })
    driver = node.driver_version or node.npu_smi_version or lay.npu_smi_version
    return {
        "name": node.name,
        "index": node.index,
        "layout": lay.key,
        "table": lay.table,
        "chip_name": node.chip_name or lay.chip_name,
        "map_name": (f"Ascend {node.chip_name}" if node.chip_name else lay.map_name),
        "mcu": lay.mcu,
        "hccn": lay.hccn,
        "pci_device_id": lay.pci_device_id,
        "npu_smi_version": node.npu_smi_version or driver,
        "driver_version": driver,
        "firmware_version": node.firmware_version or lay.firmware_version,
        "cann_version": node.cann_version or lay.cann_version,
        "arch": node.arch,
        "host_ip": host_ip,
        "host_iface": host_iface,
        "device_iface": device_iface,
        "npus": npus,
        "processes": [],
        "devices": devices,
        "hccn_conf": ({str(d["id"]): d["ip"] for d in devices} if node.hccn_conf and devices else None),
        "npu_smi": "ok",          # ok | missing | hang | busy
        "set_env": True,
        "data_files": {name: {"size": size, "variant": 0} for name, size in node.data_files.items()},
        "net": {"down_addrs": [], "drop": [], "iface_down": False},
        "listeners": [],           # ports a stray process holds (started in the node's netns)
        "sshd": "up",              # up | down | silent (accepts TCP, never sends a banner)
        "now": NOW_TIME,
        "rendered_at": time.time(),
    }


def chips(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for npu in state["npus"] for c in npu["chips"]]


def chip_by_device(state: dict[str, Any], device: int) -> dict[str, Any]:
    for c in chips(state):
        if c["logic"] == device:
            return c
    raise ValueError(f"{state['name']} has no device {device}")


def npu_of_device(state: dict[str, Any], device: int) -> dict[str, Any]:
    for npu in state["npus"]:
        if any(c["logic"] == device for c in npu["chips"]):
            return npu
    raise ValueError(f"{state['name']} has no device {device}")


def set_path(state: dict[str, Any], key: str, value: Any) -> None:
    """`set_state(node, "devices.3.link", "DOWN")`: dotted path, list items by index."""
    parts = key.split(".")
    target: Any = state
    for part in parts[:-1]:
        target = target[int(part)] if isinstance(target, list) else target[part]
    last = parts[-1]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        if last not in target:
            raise KeyError(f"no state key {key!r}")
        target[last] = value


def clone(state: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(state)
