"""Render the NVIDIA node's tools from its state: `nvidia-smi` (default table, `-q`,
`--query-gpu` values), `ibstat`, `ibstatus` and the kernel log `dmesg` prints.

Formats: the `-q` report is the real H100 capture's header and first GPU block
(templates/nvidia-smi-q.H100.txt) with each GPU's values set by key path; the default table has
the widths of the real 535.129.03 capture (tests/fixtures/nvidia/nvidia-smi__P100_4gpu_*: 89
characters, Bus-Id cell 22); `ibstat`/`ibstatus` follow the real gpud captures; Xid lines copy the
real `NVRM: Xid (PCI:dddd:bb:dd): N, ...` text of tests/fixtures/nvidia/dmesg__* with the GPU's
bus; `topo -m` and `nvlink -s` follow the real captures (tests/fixtures/nvidia/nvidia-smi_topo_-m__*,
nvidia-smi_nvlink_-s__*), an NVSwitch H100 node: NV18 between every pair. `--query-gpu` is offered only for the fields and forms with a real sample: `noheader` with
`nounits` (a CSV header line has no sample, so the simulated tool refuses it).
"""
from __future__ import annotations

from typing import Any

from .tree import package_text

TABLE_WIDTH = 89
CSV_FIELDS = ("index", "name", "pci.bus_id", "driver_version", "uuid", "memory.total", "memory.used")
# The real Xid texts (fixtures dmesg__*): 79 from the gpud README capture, 119 from gpud's testdata.
XID_TEXT = {
    79: "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    119: "pid=2024380, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU{gpu} GSP! "
         "Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).",
    94: "pid=7062, Contained: CE User Channel (0x9). RST: No, D-RST: No",
}


def _template() -> tuple[str, list[str]]:
    text = package_text("templates", "nvidia-smi-q.H100.txt").partition("# ---\n")[2]
    head, sep, gpu = text.partition("\nGPU ")
    return head + "\n", ("GPU " + gpu).rstrip("\n").split("\n")


def _set(lines: list[str], path: tuple[str, ...], value: str) -> None:
    """Set the value of `Key : value` at `path` (section names, then the key) in a GPU block."""
    depth, want = 0, 0
    for i, line in enumerate(lines):
        stripped = line.strip()
        indent = (len(line) - len(line.lstrip(" "))) // 4
        if indent <= depth - 1 and want:
            want = min(want, indent)
        key = stripped.split(" :")[0].strip() if " :" in stripped else stripped
        if indent == want + 1 and key == path[want]:
            if want == len(path) - 1:
                cut = line.index(" : ") + 3
                lines[i] = line[:cut] + value
                return
            want += 1
            depth = indent + 1
    raise KeyError(path)


def _gpu_block(gpu: dict[str, Any], template: list[str]) -> str:
    lines = list(template)
    lines[0] = f"GPU {gpu['bus']}"
    values = {
        ("GPU UUID",): gpu["uuid"], ("Minor Number",): str(gpu["index"]), ("Module ID",): str(gpu["module"]),
        ("Serial Number",): gpu["serial"],
        ("PCI", "Bus"): "0x" + gpu["bus"].split(":")[1], ("PCI", "Bus Id"): gpu["bus"],
        ("PCI", "GPU Link Info", "Link Width", "Current"): f"{gpu['pcie_width']}x",
        ("GPU Reset Status", "Reset Required"): "Yes" if gpu["reset_required"] else "No",
        ("ECC Errors", "Volatile", "DRAM Uncorrectable"): str(gpu["ecc_volatile"]),
        ("ECC Errors", "Aggregate", "DRAM Uncorrectable"): str(gpu["ecc_aggregate"]),
        ("Remapped Rows", "Uncorrectable Error"): str(gpu["remap_uncorrectable"]),
        ("Remapped Rows", "Pending"): "Yes" if gpu["remap_pending"] else "No",
        ("Remapped Rows", "Remapping Failure Occurred"): "Yes" if gpu["remap_failed"] else "No",
        ("Clocks Event Reasons", "HW Slowdown"): "Active" if gpu["hw_slowdown"] else "Not Active",
        ("Clocks Event Reasons", "Idle"): "Not Active" if gpu["processes"] else "Active",
        ("FB Memory Usage", "Used"): f"{gpu['mem_used']} MiB",
        ("FB Memory Usage", "Free"): f"{gpu['mem_total'] - gpu['mem_used'] - 551} MiB",
        ("GPU Power Readings", "Power Draw"): f"{gpu['power']:.2f} W",
        ("Temperature", "GPU Current Temp"): f"{gpu['temp']} C",
    }
    for path, value in values.items():
        _set(lines, path, value)
    return "\n".join(lines) + "\n\n"


def render_query(state: dict[str, Any]) -> str:
    head, template = _template()
    gpus = [g for g in state["gpus"] if g["present"]]
    head = head.replace("Attached GPUs                             : 8",
                        f"Attached GPUs                             : {len(gpus)}")
    return head + "".join(_gpu_block(g, template) for g in gpus)


def _cell(text: str, width: int) -> str:
    """A right-aligned table cell: the text ends one space before the cell's bar."""
    return text.rjust(width - 1) + " "


def render_table(state: dict[str, Any]) -> str:
    drv, cuda = state["nvidia_driver"], state["cuda_version"]
    full = "+" + "-" * (TABLE_WIDTH - 2) + "+"
    sep = "+-----------------------------------------+----------------------+----------------------+"
    out = [f"| NVIDIA-SMI {drv:<23}Driver Version: {drv:<13}CUDA Version: {cuda:<9}|".ljust(TABLE_WIDTH),
           "|-----------------------------------------+----------------------+----------------------+",
           "| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |",
           "| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |",
           "|                                         |                      |               MIG M. |",
           "|=========================================+======================+======================|"]
    gpus = [g for g in state["gpus"] if g["present"]]
    for i, g in enumerate(gpus):
        pers = "On" if g["persistence"] else "Off"
        left = f" N/A  {g['temp']:>3}C    P0"
        out += ["|" + f"   {i}  {g['name']}".ljust(37) + f"{pers:<3} |" + f" {g['bus']} Off |"
                + _cell(str(g["ecc_volatile"]), 22) + "|",
                "|" + left + _cell(f"{int(g['power'])}W / {g['power_cap']}W", 41 - len(left)) + "|"
                + _cell(f"{g['mem_used']}MiB / {g['mem_total']}MiB", 22) + "|" + _cell(f"{g['util']}%      Default", 22) + "|",
                "|" + " " * 41 + "|" + " " * 22 + "|" + _cell(g["mig"], 22) + "|", sep]
    out += ["", full, "| Processes:".ljust(TABLE_WIDTH - 1) + "|",
            "|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |",
            "|        ID   ID                                                             Usage      |",
            "|" + "=" * (TABLE_WIDTH - 2) + "|"]
    procs = [(i, p) for i, g in enumerate(gpus) for p in g["processes"]]
    if not procs:
        out.append("|  No running processes found".ljust(TABLE_WIDTH - 1) + "|")
    for i, p in procs:
        left = f"    {i}   N/A  N/A {p['pid']:>9}      C   {p['name']}"
        out.append("|" + left + _cell(f"{p['mem']}MiB", TABLE_WIDTH - 2 - len(left)) + "|")
    out.append(full)
    return "\n".join([full] + out) + "\n"


def render_csv(state: dict[str, Any]) -> dict[str, str]:
    """field -> one nounits line per GPU (the sim tool pastes the asked fields with ", ")."""
    gpus = [g for g in state["gpus"] if g["present"]]
    values = {"index": lambda i, g: str(i), "name": lambda i, g: g["name"], "pci.bus_id": lambda i, g: g["bus"],
              "driver_version": lambda i, g: state["nvidia_driver"], "uuid": lambda i, g: g["uuid"],
              "memory.total": lambda i, g: str(g["mem_total"]), "memory.used": lambda i, g: str(g["mem_used"])}
    return {f: "".join(values[f](i, g) + "\n" for i, g in enumerate(gpus)) for f in CSV_FIELDS}


def render_ibstat(state: dict[str, Any]) -> str:
    out = []
    for p in state["ib_ports"]:
        out += [f"CA '{p['ca']}'", "\tCA type: MT4129", "\tNumber of ports: 1", "\tFirmware version: 28.39.1002",
                "\tHardware version: 0", f"\tNode GUID: {p['guid']}", f"\tSystem image GUID: {p['guid']}",
                "\tPort 1:", f"\t\tState: {p['state']}", f"\t\tPhysical state: {p['phys_state']}",
                f"\t\tRate: {p['rate']}", f"\t\tBase lid: {p['lid']}", "\t\tLMC: 0", "\t\tSM lid: 334",
                "\t\tCapability mask: 0xa751e848", f"\t\tPort GUID: {p['guid']}", "\t\tLink layer: InfiniBand"]
    for p in state.get("roce_ports", ()):  # the Ethernet port block of the real capture (CX-6 Dx, MT4125)
        out += [f"CA '{p['ca']}'", "\tCA type: MT4125", "\tNumber of ports: 1", "\tFirmware version: 22.38.1002",
                "\tHardware version: 0", f"\tNode GUID: {p['guid']}", f"\tSystem image GUID: {p['guid']}",
                "\tPort 1:", f"\t\tState: {p['state']}", f"\t\tPhysical state: {p['phys_state']}",
                f"\t\tRate: {p['rate']}", "\t\tBase lid: 0", "\t\tLMC: 0", "\t\tSM lid: 0",
                "\t\tCapability mask: 0x00010000", f"\t\tPort GUID: {p['guid']}", "\t\tLink layer: Ethernet"]
    return "\n".join(out) + "\n"


def render_roce_map(state: dict[str, Any]) -> str:
    """`<ca> <port> <netdev>` lines the simulated ibdev2netdev reads (it reads each netdev's state live)."""
    return "".join(f"{p['ca']} 1 {p['netdev']}\n" for p in state.get("roce_ports", ()))


IBSTATUS_STATE = {"Active": "4: ACTIVE", "Down": "1: DOWN", "Initializing": "2: INIT"}
IBSTATUS_PHYS = {"LinkUp": "5: LinkUp", "Polling": "2: Polling", "Disabled": "3: Disabled"}


def render_ibstatus(state: dict[str, Any]) -> str:
    blocks = []
    for p in state["ib_ports"]:
        gid = "fe80:0000:0000:0000:" + p["guid"][2:6] + ":" + p["guid"][6:10] + ":" + p["guid"][10:14] + ":" + p["guid"][14:18]
        blocks.append("\n".join([
            f"Infiniband device '{p['ca']}' port 1 status:",
            f"        default gid:     {gid}", f"        base lid:        {hex(p['lid'])}", "        sm lid:          0x1",
            f"        state:           {IBSTATUS_STATE.get(p['state'], p['state'])}",
            f"        phys state:      {IBSTATUS_PHYS.get(p['phys_state'], p['phys_state'])}",
            f"        rate:            {p['rate']} Gb/sec (4X NDR)", "        link_layer:      InfiniBand"]))
    return "\n\n".join(blocks) + "\n\n"


# `topo -m`: the real TAB-separated form (tests/fixtures/nvidia/nvidia-smi_topo_-m__*: the 4090 capture's
# columns with `GPU NUMA ID`, the H100 capture's NV18 cells and CPU affinities, the A6000 capture's
# legend). No NIC columns: the form of a node whose NICs the tool does not list (the H100 capture).
TOPO_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""
AFFINITY = ("0-47,96-143", "48-95,144-191")  # the H100 capture's two NUMA nodes, GPUs 0-3 and 4-7
LINK_RATE = "26.562 GB/s"  # inferred: H100 NVLink4 per-link rate; the line format is the real captures'
ALL_INACTIVE = "NVML: Unable to retrieve NVLink information as all links are inActive"


def _nvlinks(g: dict[str, Any]) -> int:
    from .state import NVLINKS
    return NVLINKS - len(g.get("nvlink_down", ()))


def render_topo(state: dict[str, Any]) -> str:
    gpus = [g for g in state["gpus"] if g["present"]]
    half = max(1, (len(gpus) + 1) // 2)
    numa = [min(i // half, 1) for i in range(len(gpus))]
    out = ["\t" + "".join(f"GPU{i}\t" for i in range(len(gpus))) + "CPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for i, g in enumerate(gpus):
        cells = []
        for j, h in enumerate(gpus):
            width = min(_nvlinks(g), _nvlinks(h))
            cells.append(" X " if i == j else f"NV{width}" if width else ("NODE" if numa[i] == numa[j] else "SYS"))
        out.append(f"GPU{i}\t" + "\t".join(cells) + f"\t{AFFINITY[numa[i]]}\t{numa[i]}\t\tN/A")
    return "\n".join(out) + "\n" + TOPO_LEGEND


def render_nvlink(state: dict[str, Any]) -> str:
    from .state import NVLINKS
    out = []
    for i, g in enumerate(x for x in state["gpus"] if x["present"]):
        out.append(f"GPU {i}: {g['name']} (UUID: {g['uuid']})")
        down = set(g.get("nvlink_down", ()))
        if len(down) >= NVLINKS:
            out.append(ALL_INACTIVE)
            continue
        out += [f"\t Link {k}: {'<inactive>' if k in down else LINK_RATE}" for k in range(NVLINKS)]
    return "\n".join(out) + "\n"


def render_dmesg(state: dict[str, Any]) -> str:
    lines = []
    for n, ev in enumerate(state["kernel_log"]):
        dom, b, dev = ev["bus"].split(":")  # 00000000:53:00.0 -> 0000:53:00, as the driver logs it
        bus = f"{dom[-4:]}:{b}:{dev[:2]}".lower()
        text = XID_TEXT.get(ev["xid"], "pid='<unknown>', name=<unknown>, ").format(gpu=ev["gpu"])
        lines.append(f"[{1234.5 + n:>12.6f}] NVRM: Xid (PCI:{bus}): {ev['xid']}, {text}")
    return "".join(ln + "\n" for ln in lines)
