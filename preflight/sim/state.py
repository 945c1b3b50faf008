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
    """Accelerators the inventory expects: chips on an Ascend node, GPUs on an NVIDIA one."""
    if node.backend == "nvidia":
        return node.gpus
    return node.npus * (node.chips_per_npu or LAYOUTS[node.layout].chips_per_npu)


def device_ip_count(node: "NodeSpec") -> int:
    """Addresses on the device network: one per NPU RoCE port; GPU nodes have none (IB is simulated
    as port state only)."""
    return 0 if node.backend == "nvidia" else device_count(node)


NVLINKS = 18  # an H100 SXM's NVLink4 links, all to the NVSwitches (NV18 between every pair in `topo -m`)
# 8x H100 80GB HBM3 from the real -q capture (bus ids, UUID prefix, 81559 MiB, 700 W cap)
H100_BUSES = ("00000000:53:00.0", "00000000:64:00.0", "00000000:75:00.0", "00000000:86:00.0",
              "00000000:97:00.0", "00000000:A8:00.0", "00000000:B9:00.0", "00000000:CA:00.0")


def _gpus(node: "NodeSpec") -> list[dict[str, Any]]:
    out = []
    for i in range(node.gpus):
        bus = H100_BUSES[i] if i < len(H100_BUSES) else f"00000000:{0xD0 + i:02X}:00.0"
        out.append({
            "index": i, "present": True, "name": "NVIDIA H100 80GB HBM3", "bus": bus,
            "uuid": f"GPU-{node.index:08x}-0000-4000-8000-{i:012x}", "serial": f"16550220{node.index:03d}{i:02d}",
            "module": i + 1, "persistence": True, "temp": 30 + (node.index + i) % 7, "power": 70.0 + (i * 3) % 9,
            "power_cap": 700, "mem_used": 0, "mem_total": 81559, "util": 0, "mig": "Disabled",
            "ecc_volatile": 0, "ecc_aggregate": 0, "remap_uncorrectable": 0, "remap_pending": False,
            "remap_failed": False, "reset_required": False, "hw_slowdown": False, "pcie_width": 16,
            "processes": [], "nvlink_down": [],   # inactive NVLink links (of NVLINKS, to the NVSwitches)
        })
    return out


def _ib_ports(node: "NodeSpec") -> list[dict[str, Any]]:
    return [{"ca": f"mlx5_{i}", "state": "Active", "phys_state": "LinkUp", "rate": 400, "lid": 70 + node.index * 8 + i,
             "guid": f"0x946dae0300{node.index:02x}{i:02x}e7"} for i in range(node.gpus)]


# One RoCE port beside the IB HCAs (the in-band/storage ConnectX of an H100 node, as the real gpud
# ibstat capture has): its netdev is a real veth inside the node's namespace (netns mode), so its
# /sys/class/net/<if>/operstate, carrier and speed are the kernel's; a veth reports 10000 Mb/s, so
# ibstat says Rate: 10 for it.
ROCE_PORTS = ({"ca": "mlx5_8", "netdev": "enp27s0f0np0", "peer": "pfsroce0"},)


def _roce_ports(node: "NodeSpec") -> list[dict[str, Any]]:
    return [{**p, "state": "Active", "phys_state": "LinkUp", "rate": 10,
             "guid": f"0x966daefffe{node.index:02x}{i:02x}48"} for i, p in enumerate(ROCE_PORTS)]


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
    nvidia = node.backend == "nvidia"
    if nvidia:
        npus, devices = [], []
    return {
        "backend": node.backend,
        "gpus": _gpus(node) if nvidia else [],
        "ib_ports": _ib_ports(node) if nvidia else [],
        "roce_ports": _roce_ports(node) if nvidia else [],
        "kernel_log": [],          # Xid events: {"gpu", "bus", "xid"}
        "nvidia_driver": "535.183.01",
        "cuda_version": "12.2",
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
        "hccn_conf": ({str(d["id"]): d["ip"] for d in devices} if node.hccn_conf and devices and not nvidia else None),
        "npu_smi": "ok",          # ok | missing | hang | busy
        # npu-smi info -t spod-info on A3 (docs/FORMATS.md §8.3): the physical SuperPoD and the
        # server's index in it (the SDID is derived from it); size as in the real sample
        "super_pod": {"id": 0, "server_index": node.index, "size": 384},
        "set_env": True,
        "data_files": {name: {"size": size, "variant": 0} for name, size in node.data_files.items()},
        "net": {"down_addrs": [], "drop": [], "iface_down": False, "roce_down": []},
        "listeners": [],           # ports a stray process holds (started in the node's netns)
        "sshd": "up",              # up | down | silent (accepts TCP, never sends a banner)
        "now": NOW_TIME,
        "rendered_at": time.time(),
    }


def gpu(state: dict[str, Any], index: int) -> dict[str, Any]:
    for g in state["gpus"]:
        if g["index"] == index and g["present"]:
            return g
    raise ValueError(f"{state['name']} has no GPU {index}")


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
