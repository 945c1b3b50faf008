"""Render `npu-smi` output from a node's state dict, byte for byte in the real tool's formats.

Rendering happens in Python once per state change; the simulated `npu-smi` (a POSIX sh script)
only `cat`s the result, so a call costs a few ms of CPU even with 128 nodes probing at once.
Grammar: docs/FORMATS.md §1 and §2; the widths were measured on the fixtures.
Text marked `# inferred` has no verbatim sample: it follows the grammar, not a capture.
"""
from __future__ import annotations

from typing import Any

from .state import chips

USAGE = "Usage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\n"
INVALID_CARD = "Invalid card id.\nError parameter of -i\n" + USAGE
INVALID_CHIP = "Invalid chip id.\nError parameter of -c\n" + USAGE  # inferred (same shape as -i)
NOT_FOUND = "Command or option is not found.\n" + USAGE
BUSY = ("DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\n"
        "dcmi model initialized failed, because the device is used. ret is -8020\n")
# A caller the driver's device files refuse (not root, not in HwHiAiUser): DCMI cannot initialise.
# Verbatim from a host where DCMI is root-only, exit status 187 (-8005 & 0xff), in
# github.com/hw-native-sys/simpler pull request #2043; the line is npu_smi.c's
# handle_dcmi_initialization() ("dcmi module initialize failed. ret is %d", printf: stdout) in the
# Ascend driver source (github.com/verylucky01/driver, src/custom/dev_prod/user/npucli/src/npu_smi.c).
DENIED = ("DrvMngGetConsoleLogLevel failed. (ret=4)\n"
          "dcmi module initialize failed. ret is -8005\n")
DENIED_RC = 187


class _Grid:
    """Column widths and fixed header rows of one table layout."""

    def __init__(self, widths: tuple[int, int, int], banner: tuple[int, int], h1: str, h2: str, ph: str):
        self.widths, self.banner, self.h1, self.h2, self.ph = widths, banner, h1, h2, ph
        self.width = sum(widths) + 4

    def line(self, ch: str) -> str:
        return "+" + "+".join(ch * w for w in self.widths) + "+"

    def full(self, ch: str = "-") -> str:
        return "+" + ch * (self.width - 2) + "+"

    def lone(self, text: str) -> str:
        return ("| " + text).ljust(self.width - 1) + "|"


GRID_CHIP = _Grid(
    (27, 15, 52), (25, 53),
    "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|",
    "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",
    "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |")
GRID_PHY = _Grid(
    GRID_CHIP.widths, GRID_CHIP.banner, GRID_CHIP.h1,
    "| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",
    GRID_CHIP.ph)
GRID_DEVICE = _Grid(
    (31, 17, 54), (41, 45),
    "| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |",
    "| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |",
    "| NPU     Chip                  | Process id      | Process name             | Process memory(MB)        |")
GRID_WIDE = _Grid(  # layout D: npu-smi >= 26 on A3 (116 chars, 6-column process table)
    (27, 15, 70), (36, 60),
    "| NPU   Name                | Health        | Power(W)             Temp(C)                 Hugepages-Usage(page)   |",
    "| Chip  Phy-ID              | Bus-Id        | AICore(%)            Memory-Usage(MB)        HBM-Usage(MB)           |",
    "| NPU     Chip              | Process id    | Process name       | Process memory(MB)    | Process id in container |")
GRIDS = {"chip": GRID_CHIP, "phy": GRID_PHY, "device": GRID_DEVICE, "wide": GRID_WIDE}


def table_kind(state: dict[str, Any]) -> str:
    """The layout npu-smi prints: A3 switched to the wide table with npu-smi 26.0."""
    if state["table"] == "phy":
        try:
            if int(str(state["npu_smi_version"]).split(".")[0]) >= 26:
                return "wide"
        except ValueError:
            pass
    return state["table"]


def _chip_rows(table: str, npu_id: int, name: str, c: dict[str, Any]) -> list[str]:
    hp_u, hp_t = c["hugepages"]
    mu, mt = c["mem"]
    hu, ht = c["hbm"]
    if table == "device":
        return [
            f"| {npu_id:<8}{name:<22}| {c['health']:<16}| {c['power']:<13}{c['temp']:<18}{hp_u:<6}/ {hp_t:<14}|",
            f"| {c['chip']:<8}{c['phy']:<22}| {c['bus']:<16}| {c['aicore']:<13}{mu:<5}/ {mt:<33}|",
        ]
    if table == "wide":
        return [
            f"| {npu_id:<6}{name:<20}| {c['health']:<14}| {c['power']:<21}{c['temp']:<24}{hp_u:<5}/ {hp_t:<17}|",
            f"| {c['chip']:<6}{c['phy']:<20}| {c['bus']:<14}| {c['aicore']:<21}{mu:<5}/ {mt:<17}{hu:<5}/ {ht:<17}|",
        ]
    phy = c["phy"] if table == "phy" else ""
    # inferred: a Warning/Alarm/Critical/UNKNOWN Health cell (no raw capture shows one; same cell grammar).
    return [
        f"| {npu_id:<6}{name:<20}| {c['health']:<14}| {c['power']:<12}{c['temp']:<18}{hp_u:<5}/ {hp_t:<14}|",
        f"| {c['chip']:<6}{phy:<20}| {c['bus']:<14}| {c['aicore']:<12}{mu:<5}/ {mt:<11}{hu:<5}/ {ht:<14}|",
    ]


def _proc_row(table: str, p: dict[str, Any]) -> str:
    if table == "wide":
        return (f"| {p['npu']:<8}{p['chip']:<18}| {p['pid']:<14}| {p['name']:<19}| {p['mem']:<22}"
                f"| {p.get('cpid', 'NA'):<24}|")
    if table == "device":  # inferred: no 310P capture with a process
        return f"| {p['npu']:<8}{p['chip']:<22}| {p['pid']:<16}| {p['name']:<25}| {p['mem']:<26}|"
    return f"| {p['npu']:<8}{p['chip']:<18}| {p['pid']:<14}| {p['name']:<25}| {p['mem']:<24}|"


def render_info(state: dict[str, Any]) -> str:
    """`npu-smi info`: the device table, then the process table."""
    table = table_kind(state)
    g = GRIDS[table]
    vw, dw = g.banner
    out = [g.full(), f"| npu-smi {state['npu_smi_version']:<{vw}}Version: {state['driver_version']:<{dw}}|",
           g.line("-"), g.h1, g.h2, g.line("=")]
    for npu in state["npus"]:
        for i, c in enumerate(npu["chips"]):
            if i:
                out.append(g.full())
            out.extend(_chip_rows(table, npu["id"], state["chip_name"], c))
        out.append(g.line("="))
    out += [g.line("-"), g.ph, g.line("=")]
    for npu in state["npus"]:
        rows = [p for p in state["processes"] if p["npu"] == npu["id"]]
        if rows:
            out.extend(_proc_row(table, p) for p in rows)
        else:
            out.append(g.lone(f"No running processes found in NPU {npu['id']}"))
        out.append(g.line("="))
    return "\n".join(out) + "\n"


def kv(key: str, value: Any) -> str:
    """One `-t` line: TAB, key left-justified in 31 columns, ': ', value."""
    return f"\t{key:<31}: {value}"


def render_health_chip(c: dict[str, Any]) -> str:
    """`npu-smi info -t health -i N -c M`."""
    lines = [kv("Health Status", c["health"]), kv("Error Code", " ".join(c["codes"]) or "NA")]
    info = c["info"] or ["NA"]
    lines.append(kv("Error Information", info[0]))
    for more in info[1:]:
        lines += ["", kv("", more)]
    return "\n".join(lines) + "\n"


def render_health_npu(state: dict[str, Any], npu: dict[str, Any]) -> str:
    """`npu-smi info -t health -i N`: per chip Chip ID/Health, then the MCU where the board has one."""
    lines = [kv("NPU ID", npu["id"]), kv("Chip Count", len(npu["chips"]))]
    for c in npu["chips"]:
        lines += ["", kv("Chip ID", c["chip"]), kv("Health", c["health"])]
    if state["mcu"]:  # the MCU block as in the 200I A2 doc; inferred for 8-card A2 hosts
        lines += ["", kv("Health", "OK"), kv("Chip Name", "MCU")]
    return "\n".join(lines) + "\n"


def _board_common(state: dict[str, Any], npu: dict[str, Any]) -> dict[str, str]:
    # inferred: Board IDs other than 910A's 0x02 (no A2/A3/310P capture of -t board).
    board_id = {"910B": "0x33", "A3": "0x3a", "310P": "0x64", "910A": "0x02"}[state["layout"]]
    return {"board": board_id, "bus": npu["chips"][0]["bus"]}


def render_board_npu(state: dict[str, Any], npu: dict[str, Any]) -> str:
    """`npu-smi info -t board -i N` (verbatim grammar for 910A; inferred values on A2/A3/310P)."""
    b = _board_common(state, npu)
    lines = [
        kv("NPU ID", npu["id"]), kv("Software Version", state["driver_version"]),
        kv("Firmware Version", state["firmware_version"]), kv("Compatibility", "OK"),
        kv("Board ID", b["board"]), kv("PCB ID", "A"), kv("BOM ID", 1), kv("PCIe Bus Info", b["bus"]),
        kv("Slot ID", npu["id"]), kv("Class ID", "NA"), kv("PCI Vendor ID", "0x19E5"),
        kv("PCI Device ID", state["pci_device_id"]), kv("Subsystem Vendor ID", "0x0200"),
        kv("Subsystem Device ID", "0x0100"), kv("Chip Count", len(npu["chips"])),
    ]
    return "\n".join(lines) + "\n"


def render_board_chip(state: dict[str, Any], npu: dict[str, Any], c: dict[str, Any]) -> str:
    """`npu-smi info -t board -i N -c M`."""
    b = _board_common(state, npu)
    seed = f"{state['index']:04X}{c['logic']:04X}"
    lines = [
        kv("NPU ID", npu["id"]), kv("Chip ID", c["chip"]), kv("Chip Type", "Ascend"),
        kv("Chip Name", state["chip_name"]), kv("Chip Version", "V1"), kv("Board ID", b["board"]),
        kv("PCB ID", "NA"), kv("BOM ID", 1),
        kv("VDie ID", f"42C711D4 20B03704 4A10C8D4 {seed} D2102003"),
        kv("NDie ID", f"27216594 20401010 4E10C8D4 {seed} A4102003"),
        kv("Chip Position ID", c["logic"]), kv("PCIe Bus Info", c["bus"]),
        kv("Firmware Version", state["firmware_version"]),
    ]
    return "\n".join(lines) + "\n"


def render_usages(state: dict[str, Any], npu: dict[str, Any]) -> str:
    """`npu-smi info -t usages -i N` (910A capture; the rates are computed from the state)."""
    lines = [kv("NPU ID", npu["id"]), kv("Chip Count", len(npu["chips"]))]
    for c in npu["chips"]:
        mu, mt = c["mem"]
        hu, ht = c["hbm"]
        lines += ["", kv("DDR Capacity(MB)", mt), kv("DDR Usage Rate(%)", round(mu * 100 / mt) if mt else 0),
                  kv("DDR Hugepages Total(page)", c["hugepages"][1]),
                  kv("DDR Hugepages Usage Rate(%)", round(c["hugepages"][0] * 100 / c["hugepages"][1]) if c["hugepages"][1] else 0),
                  kv("HBM Capacity(MB)", c.get("hbm_capacity", ht)),
                  kv("HBM Usage Rate(%)", round(hu * 100 / ht) if ht else 0),
                  kv("Aicore Usage Rate(%)", c["aicore"]), kv("Aicpu Usage Rate(%)", 0),
                  kv("Ctrlcpu Usage Rate(%)", 0), kv("DDR Bandwidth Usage Rate(%)", 0),
                  kv("HBM Bandwidth Usage Rate(%)", 0), kv("Chip ID", c["chip"])]
    return "\n".join(lines) + "\n"


ECC_KEYS = ("Single Bit Error Count", "Double Bit Error Count", "Single Bit Aggregate Total Err Cnt",
            "Double Bit Aggregate Total Err Cnt", "Single Bit Isolated Pages Count", "Double Bit Isolated Pages Count")


def render_ecc(state: dict[str, Any], npu: dict[str, Any]) -> str:
    """`npu-smi info -t ecc -i N` (doc example; the TAB indent as other -t outputs is inferred)."""
    ekv = lambda k, v: f"\t{k:<41}: {v}"  # noqa: E731 - this block pads keys to 41
    lines = [ekv("NPU ID", npu["id"]), ekv("Chip Count", len(npu["chips"]))]
    for c in npu["chips"]:
        ecc = c.get("ecc", {})
        lines.append("")
        lines += [ekv(f"{mem} {k}", ecc.get(f"{mem} {k}", 0)) for mem in ("DDR", "HBM") for k in ECC_KEYS]
        lines.append(ekv("Chip ID", c["chip"]))
    return "\n".join(lines) + "\n"


def render_list(state: dict[str, Any]) -> str:
    """`npu-smi info -l`: A3 prints Total Count/NPU ID/Chip Count; others the Card Count form.
    Multi-card listings are inferred (docs show one card)."""
    lines: list[str] = []  # inferred: more than one card (the docs list one)
    if state["layout"] == "A3":
        lines.append(kv("Total Count", len(state["npus"])))
        for npu in state["npus"]:
            lines += ["", kv("NPU ID", npu["id"]), kv("Chip Count", len(npu["chips"]))]
    else:
        lines.append(kv("Card Count", len(state["npus"])))
        for npu in state["npus"]:
            lines += ["", kv("NPU ID", npu["id"]), kv("Product Name", "NA"), kv("Serial Number", "NA"),
                      kv("Chip Count", len(npu["chips"]))]
    return "\n".join(lines) + "\n"


def render_map(state: dict[str, Any]) -> str:
    """`npu-smi info -m`; boards with an MCU list an `Mcu` row per card (padded, as captured)."""
    mcu = state["mcu"]
    last = "Chip Name".ljust(30) if mcu else "Chip Name"
    lines = ["\t" + "NPU ID".ljust(31) + "Chip ID".ljust(31) + "Chip Logic ID".ljust(31) + last]
    for npu in state["npus"]:
        for c in npu["chips"]:  # inferred on A3 (two chip rows per card) and 310P; 910A/910B3 as captured
            lines.append(f"\t{npu['id']:<31}{c['chip']:<31}{c['logic']:<31}{state['map_name']}")
        if mcu:
            lines.append(f"\t{npu['id']:<31}{len(npu['chips']):<31}{'-':<31}{'Mcu':<30}")
    return "\n".join(lines) + "\n"


# npu-smi's answer on products without SuperPoD (the npu-smi reference's example, docs/FORMATS.md §8.3)
SPOD_UNSUPPORTED = "This device does not support querying spod-info.\n"


def sdid(server_index: int, npu: int, chip: int) -> int:
    """The SDID of a chip (HDK DCMI dcmi_get_spod_node_status): bits 22-31 the server index, 18-21
    the NPU, 16-17 the die (npu-smi's chip), 0-15 the device (NPU x 2 + die)."""
    return server_index << 22 | npu << 18 | chip << 16 | (npu * 2 + chip)


def render_spod(state: dict[str, Any], npu: dict[str, Any], c: dict[str, Any]) -> str:
    """`npu-smi info -t spod-info -i N -c M`: the real sample's four lines on A3, else the refusal."""
    if state["layout"] != "A3":
        return SPOD_UNSUPPORTED
    sp = state.get("super_pod") or {"id": 0, "server_index": state["index"], "size": 384}
    return (f"SDID : {sdid(sp['server_index'], npu['id'], c['chip'])}\nSuper Pod Size : {sp['size']}\n"
            f"Super Pod ID : {sp['id']}\nServer Index : {sp['server_index']}\n")


def render_all(state: dict[str, Any]) -> dict[str, str]:
    """Every file the npu-smi script serves, keyed by its name under out/npu/."""
    files = {"info": render_info(state), "list": render_list(state), "map": render_map(state)}
    for npu in state["npus"]:
        n = npu["id"]
        files[f"health.{n}"] = render_health_npu(state, npu)
        files[f"board.{n}"] = render_board_npu(state, npu)
        files[f"usages.{n}"] = render_usages(state, npu)
        files[f"ecc.{n}"] = render_ecc(state, npu)
        for c in npu["chips"]:
            files[f"health.{n}.{c['chip']}"] = render_health_chip(c)
            files[f"board.{n}.{c['chip']}"] = render_board_chip(state, npu, c)
            files[f"spod-info.{n}.{c['chip']}"] = render_spod(state, npu, c)
    return files


__all__ = ["render_spod", "sdid", "SPOD_UNSUPPORTED", "render_usages", "render_ecc", "render_info", "render_health_chip", "render_health_npu", "render_board_npu", "render_board_chip",
           "render_list", "render_map", "render_all", "INVALID_CARD", "INVALID_CHIP", "NOT_FOUND", "BUSY", "DENIED",
           "chips"]
