"""Faults: named, parameterised edits of a node's state dict.

Why a table: each fault is a few lines that change state; the renderers then print what a real
node in that condition prints, and the cluster's reconciler makes the network and process side
real (addresses removed, DROP rules, listeners, sshd stopped). Adding a fault is one entry here.
`device` is always the logical device id (`hccn_tool -i`, the Phy-ID on A3); `chip` is accepted
as an alias for it.
"""
from __future__ import annotations

from typing import Any, Callable

from . import state as st

HEALTH_STATES = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")
DEFAULT_CODES = {"Warning": ["80E18005"], "Alarm": ["A4025021", "8C03A000", "8C084E00"],
                 "Critical": ["80CB8009"], "UNKNOWN": []}
DEFAULT_INFO = {
    "Warning": ["node type=Memory, sensor type=Memory, event state=Single-bit ECC error threshold exceeded"],
    "Alarm": ["ascend_monitor adda heart beat lost error",
              "node type=process-manager, sensor type=General Software, event state=The process start failed or exit abnormally",
              "node type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost."],
    "Critical": ["node type=AICORE, sensor type=Chip Hardware, event state=AI Core hardware fault"],
    "UNKNOWN": [],
}


def _dev(state: dict, params: dict) -> int:
    device = params.get("device", params.get("chip"))
    if device is None:
        raise ValueError("needs device:")
    device = int(device)
    st.chip_by_device(state, device)  # raises if absent
    return device


def _device(state: dict, params: dict) -> dict:
    device = _dev(state, params)
    for d in state["devices"]:
        if d["id"] == device:
            return d
    raise ValueError(f"{state['name']} device {device} has no RoCE NIC on this product")


def npu_health(state: dict, p: dict) -> None:
    status = p.get("status", "Alarm")
    if status not in HEALTH_STATES:
        raise ValueError(f"status must be one of {', '.join(HEALTH_STATES)}")
    chip = st.chip_by_device(state, _dev(state, p))
    chip["health"] = status
    chip["codes"] = [str(c) for c in p.get("codes", DEFAULT_CODES[status] if status != "OK" else [])]
    chip["info"] = [str(i) for i in p.get("info", DEFAULT_INFO.get(status, []) if chip["codes"] else [])]


def npu_process(state: dict, p: dict) -> None:
    device = _dev(state, p)
    chip, npu = st.chip_by_device(state, device), st.npu_of_device(state, device)
    mem = int(p.get("mem", 30780))
    state["processes"].append({"npu": npu["id"], "chip": chip["chip"], "pid": int(p.get("pid", 139667 + device)),
                               "name": str(p.get("name", "python")), "mem": mem, "cpid": str(p.get("cpid", "NA"))})
    if chip["hbm"][1]:
        chip["hbm"][0] = min(chip["hbm"][1], chip["hbm"][0] + mem)
    else:
        chip["mem"][0] = min(chip["mem"][1], chip["mem"][0] + mem)
    chip["aicore"] = int(p.get("aicore", 17))


def hbm_leak(state: dict, p: dict) -> None:
    chip = st.chip_by_device(state, _dev(state, p))
    used = int(p.get("used", 41052))
    if chip["hbm"][1]:
        chip["hbm"][0] = min(chip["hbm"][1], used)
    else:
        chip["mem"][0] = min(chip["mem"][1], used)


def link_down(state: dict, p: dict) -> None:
    d = _device(state, p)
    d["link"] = "DOWN"
    d["link_records"].insert(0, [state["now"], "LINK DOWN"])
    if d["id"] not in state["net"]["down_addrs"]:
        state["net"]["down_addrs"].append(d["id"])


def link_flap(state: dict, p: dict) -> None:
    d = _device(state, p)
    count = int(p.get("count", 2))
    for i in range(count):
        d["link_records"].insert(0, [f"Mon Dec  1 03:5{6 + i % 4}:0{i % 10} 2025", "LINK DOWN"])
        d["link_records"].insert(0, [f"Mon Dec  1 03:5{6 + i % 4}:1{i % 10} 2025", "LINK UP"])
    d["link_up_count"] += count


def optical_absent(state: dict, p: dict) -> None:
    _device(state, p)["optical"]["present"] = False


def optical_rx_low(state: dict, p: dict) -> None:
    opt = _device(state, p)["optical"]
    lane = int(p.get("lane", 1))
    if not 0 <= lane < len(opt["rx"]):
        raise ValueError(f"lane must be 0..{len(opt['rx']) - 1}")
    opt["rx"][lane] = float(p.get("rx", 0.0054))
    opt["rx_los"] = p.get("los", "0xff")
    opt["rx_lol"] = p.get("lol", "0xff")


def ip_missing(state: dict, p: dict) -> None:
    d = _device(state, p)
    d["shown_ip"] = False
    if d["id"] not in state["net"]["down_addrs"]:
        state["net"]["down_addrs"].append(d["id"])


def ip_stale(state: dict, p: dict) -> None:
    d = _device(state, p)
    conf = state["hccn_conf"] or {str(x["id"]): x["ip"] for x in state["devices"]}
    conf[str(d["id"])] = str(p.get("address", "198.19.255.254"))
    state["hccn_conf"] = conf


def net_health(state: dict, p: dict) -> None:
    status = str(p.get("status", "Receive timeout"))
    targets = [_device(state, p)] if ("device" in p or "chip" in p) else state["devices"]
    for d in targets:
        d["net_health"] = status


def set_env_missing(state: dict, p: dict) -> None:
    state["set_env"] = False


def version(state: dict, p: dict) -> None:
    component = p.get("component", "cann")
    keys = {"cann": "cann_version", "driver": "driver_version", "firmware": "firmware_version",
            "npu_smi": "npu_smi_version"}
    if component not in keys:
        raise ValueError(f"component must be one of {', '.join(keys)}")
    if "value" not in p:
        raise ValueError("needs value:")
    state[keys[component]] = str(p["value"])


def npu_smi_missing(state: dict, p: dict) -> None:
    state["npu_smi"] = "missing"


def npu_smi_hang(state: dict, p: dict) -> None:
    state["npu_smi"] = "hang"


def npu_smi_busy(state: dict, p: dict) -> None:
    state["npu_smi"] = "busy"


def port_held(state: dict, p: dict) -> None:
    port = int(p["port"])
    if not 1 <= port <= 65535:
        raise ValueError("port must be 1..65535")
    if port not in state["listeners"]:
        state["listeners"].append(port)


def data_missing(state: dict, p: dict) -> None:
    name = str(p.get("file", next(iter(state["data_files"]), "")))
    if name not in state["data_files"]:
        raise ValueError(f"no data file {name!r}")
    del state["data_files"][name]


def data_different(state: dict, p: dict) -> None:
    name = str(p.get("file", next(iter(state["data_files"]), "")))
    if name not in state["data_files"]:
        raise ValueError(f"no data file {name!r}")
    state["data_files"][name]["variant"] += 1
    if "size" in p:
        state["data_files"][name]["size"] = int(p["size"])


def sshd_down(state: dict, p: dict) -> None:
    state["sshd"] = "down"


def silent_banner(state: dict, p: dict) -> None:
    state["sshd"] = "silent"


def device_drop(state: dict, p: dict) -> None:
    target = _device(state, p)["id"] if ("device" in p or "chip" in p) else "all"
    if target not in state["net"]["drop"]:
        state["net"]["drop"].append(target)


def device_net_down(state: dict, p: dict) -> None:
    state["net"]["iface_down"] = True
    for d in state["devices"]:
        if d["link"] == "UP":
            d["link"] = "DOWN"
            d["link_records"].insert(0, [state["now"], "LINK DOWN"])


# ---- NVIDIA nodes: `device` is the GPU index (nvidia-smi order) -----------------------------------

def _gpu(state: dict, p: dict) -> dict:
    if state.get("backend") != "nvidia":
        raise ValueError("this fault needs an NVIDIA node (backend: nvidia)")
    if "device" not in p:
        raise ValueError("needs device:")
    return st.gpu(state, int(p["device"]))


def gpu_ecc(state: dict, p: dict) -> None:
    g = _gpu(state, p)
    g["ecc_volatile"] = int(p.get("count", 2))
    g["ecc_aggregate"] = max(g["ecc_aggregate"], g["ecc_volatile"])


def gpu_remap_pending(state: dict, p: dict) -> None:
    g = _gpu(state, p)
    g["remap_pending"] = True
    g["remap_uncorrectable"] += 1


def gpu_xid(state: dict, p: dict) -> None:
    g = _gpu(state, p)
    state["kernel_log"].append({"gpu": g["index"], "bus": g["bus"], "xid": int(p.get("xid", 79))})


def gpu_missing(state: dict, p: dict) -> None:
    _gpu(state, p)["present"] = False


def gpu_process(state: dict, p: dict) -> None:
    g = _gpu(state, p)
    mem = int(p.get("mem", 30000))
    g["processes"].append({"pid": int(p.get("pid", 280080)), "name": str(p.get("name", "python3")), "mem": mem})
    g["mem_used"] = min(g["mem_total"], g["mem_used"] + mem)
    g["util"] = 87


def gpu_pcie_degraded(state: dict, p: dict) -> None:
    _gpu(state, p)["pcie_width"] = int(p.get("width", 8))


def gpu_hw_slowdown(state: dict, p: dict) -> None:
    _gpu(state, p)["hw_slowdown"] = True


def gpu_nvlink_down(state: dict, p: dict) -> None:
    """NVLink links of a GPU inactive (all of them by default): `nvlink -s` says `<inactive>` and
    `topo -m` shows its pairs over PCIe (or narrower, NV<active>, when only some are down)."""
    g = _gpu(state, p)
    links = p.get("links")
    g["nvlink_down"] = sorted({int(k) for k in links}) if links is not None else list(range(st.NVLINKS))


IB_STATES = {"Down": ("Down", "Disabled"), "Polling": ("Down", "Polling")}


def ib_port_down(state: dict, p: dict) -> None:
    if state.get("backend") != "nvidia":
        raise ValueError("this fault needs an NVIDIA node (backend: nvidia)")
    ca = str(p.get("ca", "mlx5_0"))
    how = str(p.get("state", "Polling"))
    if how not in IB_STATES:
        raise ValueError(f"state must be one of {', '.join(IB_STATES)}")
    for port in state["ib_ports"]:
        if port["ca"] == ca:
            port["state"], port["phys_state"] = IB_STATES[how]
            return
    raise ValueError(f"{state['name']} has no HCA {ca}")


def roce_netdev_down(state: dict, p: dict) -> None:
    """The RoCE port's netdev goes down (`ip link set <if> down` in the node's namespace); ibstat
    still says Active / LinkUp, as the RDMA port state of a RoCE port can."""
    if state.get("backend") != "nvidia":
        raise ValueError("this fault needs an NVIDIA node (backend: nvidia)")
    ca = str(p.get("ca", "mlx5_8"))
    for port in state["roce_ports"]:
        if port["ca"] == ca:
            down = state["net"].setdefault("roce_down", [])
            if port["netdev"] not in down:
                down.append(port["netdev"])
            return
    raise ValueError(f"{state['name']} has no RoCE port {ca}")


# ---- collectives (smoke.allreduce mode all): faults on real traffic and on the node's interpreter ----

RATE = __import__("re").compile(r"^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit)$")


def link_throttle(state: dict, p: dict) -> None:
    """The node's host link (eth0, where GLOO/HCCL_SOCKET_IFNAME point) limited to `rate` by a tc
    tbf qdisc inside its namespace; `ingress: true` limits what it receives too (an ifb device)."""
    rate = str(p.get("rate", "100mbit"))
    if not RATE.match(rate):
        raise ValueError(f"rate {rate!r}: a number with bit, kbit, mbit or gbit (tc's units), e.g. 100mbit")
    state["net"]["throttle"] = {"rate": rate, "ingress": bool(p.get("ingress", False))}


def link_loss(state: dict, p: dict) -> None:
    """A share of the packets the node receives on its host link dropped at random (iptables'
    statistic match: this kernel has no netem), SSH (port 22) spared so the node stays reachable."""
    pct = float(p.get("percent", 5))
    if not 0 < pct < 100:
        raise ValueError("percent must be between 0 and 100")
    state["net"]["loss"] = pct


def link_drop(state: dict, p: dict) -> None:
    """The node's host link drops in the middle of a collective: `after` seconds after each rank on
    the node makes its first peer connection (Gloo's pair connections: its collective is under
    way), every packet on eth0 but SSH's is dropped for `duration` seconds, then the link comes back
    (a watcher in the node's namespace, netns.LINK_DROP_WATCHER; `sim reset` stops it and takes its
    rules away). SSH is spared as a management network would be: the rank's outcome comes back, as
    it would from a real node whose training link went down."""
    after, duration = float(p.get("after", 0.5)), float(p.get("duration", 25))
    if not 0 <= after <= 300 or not 0 < duration <= 600:
        raise ValueError("after must be 0-300 seconds and duration 0-600 seconds (bounded: the link comes back)")
    state["net"]["link_drop"] = {"after": after, "duration": duration}


def _hook(state: dict, name: str) -> None:
    hooks = state.setdefault("hooks", [])
    if name not in hooks:
        hooks.append(name)


def collective_wrong_sum(state: dict, p: dict) -> None:
    _hook(state, "wrong_sum")


def no_torch(state: dict, p: dict) -> None:
    _hook(state, "no_torch")


# name -> (function, allowed params, required params, needs netns)
FAULTS: dict[str, tuple[Callable[[dict, dict], None], set[str], set[str], bool]] = {
    "npu_health": (npu_health, {"device", "chip", "status", "codes", "info"}, set(), False),
    "npu_process": (npu_process, {"device", "chip", "pid", "name", "mem", "aicore", "cpid"}, set(), False),
    "hbm_leak": (hbm_leak, {"device", "chip", "used"}, set(), False),
    "link_down": (link_down, {"device", "chip"}, set(), False),
    "link_flap": (link_flap, {"device", "chip", "count"}, set(), False),
    "optical_absent": (optical_absent, {"device", "chip"}, set(), False),
    "optical_rx_low": (optical_rx_low, {"device", "chip", "lane", "rx", "los", "lol"}, set(), False),
    "ip_missing": (ip_missing, {"device", "chip"}, set(), False),
    "ip_stale": (ip_stale, {"device", "chip", "address"}, set(), False),
    "net_health": (net_health, {"device", "chip", "status"}, set(), False),
    "set_env_missing": (set_env_missing, set(), set(), False),
    "version": (version, {"component", "value"}, {"value"}, False),
    "npu_smi_missing": (npu_smi_missing, set(), set(), False),
    "npu_smi_hang": (npu_smi_hang, set(), set(), False),
    "npu_smi_busy": (npu_smi_busy, set(), set(), False),
    "port_held": (port_held, {"port"}, {"port"}, False),
    "data_missing": (data_missing, {"file"}, set(), False),
    "data_different": (data_different, {"file", "size"}, set(), False),
    "sshd_down": (sshd_down, set(), set(), False),
    "silent_banner": (silent_banner, set(), set(), False),
    "device_drop": (device_drop, {"device", "chip"}, set(), True),
    "device_net_down": (device_net_down, set(), set(), True),
    "gpu_ecc": (gpu_ecc, {"device", "count"}, {"device"}, False),
    "gpu_remap_pending": (gpu_remap_pending, {"device"}, {"device"}, False),
    "gpu_xid": (gpu_xid, {"device", "xid"}, {"device"}, False),
    "gpu_missing": (gpu_missing, {"device"}, {"device"}, False),
    "gpu_process": (gpu_process, {"device", "pid", "name", "mem"}, {"device"}, False),
    "gpu_pcie_degraded": (gpu_pcie_degraded, {"device", "width"}, {"device"}, False),
    "gpu_hw_slowdown": (gpu_hw_slowdown, {"device"}, {"device"}, False),
    "gpu_nvlink_down": (gpu_nvlink_down, {"device", "links"}, {"device"}, False),
    "ib_port_down": (ib_port_down, {"ca", "state"}, set(), False),
    "roce_netdev_down": (roce_netdev_down, {"ca"}, set(), True),
    "link_throttle": (link_throttle, {"rate", "ingress"}, set(), True),
    "link_loss": (link_loss, {"percent"}, set(), True),
    "link_drop": (link_drop, {"after", "duration"}, set(), True),
    "collective_wrong_sum": (collective_wrong_sum, set(), set(), False),
    "no_torch": (no_torch, set(), set(), False),
}
NEEDS_DEVICE = {"npu_health", "npu_process", "hbm_leak", "link_down", "link_flap", "optical_absent",
                "optical_rx_low", "ip_missing", "ip_stale"}


def check_fault_params(name: str, params: dict[str, Any]) -> None:
    """Static check (no state needed): known fault, known and required parameters."""
    if name not in FAULTS:
        raise ValueError(f"unknown fault {name!r} (one of {', '.join(sorted(FAULTS))})")
    _, allowed, required, _ = FAULTS[name]
    extra = sorted(set(params) - allowed)
    if extra:
        raise ValueError(f"fault {name}: unknown parameter {extra[0]!r}"
                         + (f" (allowed: {', '.join(sorted(allowed))})" if allowed else " (takes none)"))
    missing = sorted(required - set(params))
    if name in NEEDS_DEVICE and not ({"device", "chip"} & set(params)):
        missing.insert(0, "device")
    if missing:
        raise ValueError(f"fault {name}: needs {missing[0]}:")


def apply_fault(state: dict[str, Any], name: str, params: dict[str, Any]) -> None:
    check_fault_params(name, params)
    FAULTS[name][0](state, params)
