"""`npu-smi` output: the `npu-smi info` table in every layout, `-t health`, `-t board`, `-m`, `-l`.

Pure functions from text to frozen data; a text that is not what the tool prints raises
ParseError quoting the line. Layouts and traps are those of docs/FORMATS.md §1-2:

* A "Chip" (910B/910A/910ProB), B "Chip  Phy-ID" (A3), C "Chip    Device" (310/310P),
  D the 116-char wide table of npu-smi 26.0 (as B, plus a 6th process column).
* Two lines per chip, paired by position; cells split on `|`; used/total split on `/`
  (`41052/ 65536`: a 5-digit used value touches the slash); NPU ids are not contiguous; the second
  chip of an A3 card repeats the NPU id with Power `-`; Power `NA` on 310P; the device section ends
  at the process-table header (`| NPU     Chip              | Process id ...`).
"""
from __future__ import annotations

import re
from functools import lru_cache
from dataclasses import dataclass

from preflight.checkapi import ParseError
from preflight.checkhelpers import line_with
from preflight.model import direct_init

# Header row 2, first cell -> layout name (docs/FORMATS.md §1.1). Detected from text, never from width.
LAYOUTS: dict[tuple[str, ...], str] = {
    ("Chip",): "chip",
    ("Chip", "Phy-ID"): "phy-id",
    ("Chip", "Device"): "device",
}
# Lines npu-smi prints instead of a table, with what they mean (docs/FORMATS.md §1.5, docs/FAILURES.md rows 1-2).
KNOWN_ERRORS: tuple[tuple[str, str], ...] = (
    ("because the device is used", "the NPU is held by another (non-privileged) container"),
    ("dcmi module initialize failed", "the driver's DCMI interface failed to initialise"),
    ("npu get board type failed", "the driver could not read the board type"),
    ("Invalid card id", "the card id is not present (card dropped off the bus?)"),
    ("Command or option is not found", "this npu-smi does not know the query"),
    ("Failed to execute npu-smi", "npu-smi could not execute the query"),
)
_TABLE_EDGES = ("|", "+")
_PAIR = re.compile(r"(\S+?)\s*/\s*(\S+)")  # "3408 / 65536", "41052/ 65536"
_TABLE_HEAD = re.compile(r"\|\s*NPU\s+Name\s*\|")
_PROCESS_HEAD = re.compile(r"\|\s*NPU\s+Chip\s*\|\s*Process id")
_NO_PROCESS = re.compile(r"No running processes found in NPU\s+(\d+)")
_TOOL_VERSION = re.compile(r"npu-smi\s+(\S+)")
_DRIVER_VERSION = re.compile(r"Version:\s*(\S+)")


@direct_init
@dataclass(frozen=True)
class Chip:
    """One chip (logical device) of the `npu-smi info` table."""

    npu: int
    chip: int
    name: str
    health: str
    power_w: float | None  # None for "-" (A3 second chip) and "NA" (310P)
    temp_c: float | None
    bus_id: str
    aicore_pct: float | None
    mem_used_mb: int | None
    mem_total_mb: int | None
    hbm_used_mb: int | None  # None on 310/310P: no HBM column
    hbm_total_mb: int | None
    phy_id: int | None = None  # A3 "Phy-ID" column
    device: int | None = None  # 310P "Device" column

    @property
    def logical_id(self) -> int:
        """The id hccn_tool -i and ASCEND_RT_VISIBLE_DEVICES use (docs/SPEC.md §4.2): Phy-ID, Device, else NPU."""
        if self.phy_id is not None:
            return self.phy_id
        if self.device is not None:
            return self.device
        return self.npu


@dataclass(frozen=True)
class Process:
    npu: int
    chip: int
    pid: int
    name: str  # "" when the process lives in another PID namespace / container
    memory_mb: int | None
    pid_in_container: str | None = None  # npu-smi 26.0 wide table only


@dataclass(frozen=True)
class InfoTable:
    tool_version: str
    driver_version: str
    layout: str  # chip | phy-id | device
    wide: bool  # the npu-smi 26.0 116-char table
    chips: tuple[Chip, ...]
    processes: tuple[Process, ...]
    idle_npus: tuple[int, ...]  # "No running processes found in NPU N"

    @property
    def inference(self) -> bool:
        """310/310P inference cards (no RoCE ports)."""
        return self.layout == "device" or any(c.name.startswith("310") for c in self.chips)


def known_error(text: str) -> str | None:
    """The line of a known npu-smi failure with its meaning, or None."""
    if not any(needle in text for needle, _ in KNOWN_ERRORS):  # every healthy table: 6 scans, no split
        return None
    found = line_with(text, KNOWN_ERRORS)
    return f"{found[0]} ({found[1]})" if found else None


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _num(token: str, line: str, kind=float):
    if token in ("-", "NA", "N/A", ""):
        return None
    try:
        return kind(token)
    except ValueError:
        raise ParseError(f"npu-smi info: {token!r} is not a number", line) from None


def _usage(cell: str, line: str) -> tuple[list[str], list[tuple[int | None, int | None]]]:
    """Split `97.9  34  0    / 0` into leading tokens and used/total pairs (split on `/`)."""
    found = list(_PAIR.finditer(cell))  # one scan for both: the lead ends where the first pair starts
    lead = (cell[: found[0].start()] if found else cell).split()
    pairs = [(_num(m[1], line, int), _num(m[2], line, int)) for m in found]
    return lead, pairs


def _int(token: str, line: str) -> int:
    if not token.isdigit():
        raise ParseError(f"npu-smi info: expected an id, got {token!r}", line)
    return int(token)


def _chip(row1: str, row2: str, layout: str) -> Chip:
    c1, c2 = _cells(row1), _cells(row2)
    if len(c1) != 3 or len(c2) != 3:
        raise ParseError("npu-smi info: a chip row does not have 3 cells", f"{row1}\n{row2}")
    npu_tok, _, name = c1[0].partition(" ")
    lead1, pairs1 = _usage(c1[2], row1)
    ids = c2[0].split()
    lead2, pairs2 = _usage(c2[2], row2)
    if len(lead1) < 2 or not ids or not lead2 or not pairs2:
        raise ParseError("npu-smi info: chip rows not in the expected shape", f"{row1}\n{row2}")
    second = _int(ids[1], row2) if len(ids) > 1 else None
    hbm = pairs2[1] if len(pairs2) > 1 else (None, None)
    return Chip(
        npu=_int(npu_tok, row1), chip=_int(ids[0], row2), name=name.strip(), health=c1[1],
        power_w=_num(lead1[0], row1), temp_c=_num(lead1[1], row1), bus_id=c2[1],
        aicore_pct=_num(lead2[0], row2), mem_used_mb=pairs2[0][0], mem_total_mb=pairs2[0][1],
        hbm_used_mb=hbm[0], hbm_total_mb=hbm[1],
        phy_id=second if layout == "phy-id" else None, device=second if layout == "device" else None,
    )


def _process(line: str) -> Process:
    cells = _cells(line)
    ids = cells[0].split()
    if len(cells) < 4 or len(ids) != 2:
        raise ParseError("npu-smi info: a process row is not `NPU Chip | pid | name | memory`", line)
    return Process(
        npu=_int(ids[0], line), chip=_int(ids[1], line), pid=_int(cells[1], line), name=cells[2],
        memory_mb=_num(cells[3], line, int), pid_in_container=cells[4] if len(cells) > 4 else None,
    )


@lru_cache(maxsize=256)
def parse_info(text: str) -> InfoTable:
    """The default `npu-smi info` table. Lines outside the table (driver log lines) are ignored.

    Cached on the text (the result is frozen, its lists tuples): npu.idle parses a node's table, which
    npu.health and the hccn.* checks USE (probes.npu_table); env.consistency, a cluster check whose
    node probes are handed no used facts, reads the same text again in its follow-up and in its
    parse (hccn_common.table_of). The cache buys about 1.0 M instructions a node after the bytes
    (docs/PERFORMANCE.md §4); parse_info.__wrapped__ is the same parser uncached."""
    # table lines begin with | or +, rarely indented: only the others are left-stripped to see
    lines = [ln.rstrip() for ln in text.splitlines()
             if ln.startswith(_TABLE_EDGES) or ln.lstrip().startswith(_TABLE_EDGES)]
    banner = next((ln for ln in lines if "npu-smi" in ln and "Version:" in ln), None)
    head = next((i for i, ln in enumerate(lines) if _TABLE_HEAD.match(ln)), None)
    if banner is None or head is None or head + 1 >= len(lines):
        raise ParseError("npu-smi info: no device table in the output", known_error(text) or text)
    tool = _TOOL_VERSION.search(banner)
    driver = _DRIVER_VERSION.search(banner)
    layout = LAYOUTS.get(tuple(_cells(lines[head + 1])[0].split()))
    if layout is None:
        raise ParseError("npu-smi info: unknown table layout", lines[head + 1])
    chips: list[Chip] = []
    processes: list[Process] = []
    idle: list[int] = []
    pending: str | None = None
    in_procs = False
    for line in lines[head + 2:]:
        if line.startswith("+"):
            continue
        if "Process id" in line and _PROCESS_HEAD.match(line):  # trap 7: process header ends devices
            in_procs = True
            continue
        if in_procs:
            idle_m = _NO_PROCESS.search(line)
            if idle_m:
                idle.append(int(idle_m.group(1)))
            else:
                processes.append(_process(line))
        elif pending is None:
            pending = line
        else:
            chips.append(_chip(pending, line, layout))
            pending = None
    if pending is not None:
        raise ParseError("npu-smi info: a chip's second line is missing", pending)
    return InfoTable(
        tool_version=tool.group(1) if tool else "", driver_version=driver.group(1) if driver else "",
        layout=layout, wide=len(lines[0]) > 110, chips=tuple(chips), processes=tuple(processes),
        idle_npus=tuple(idle),
    )


# ---- key : value blocks (`-t health`, `-t board`, `-l`) ----------------------------------------


def parse_pairs(text: str) -> list[tuple[str, str]]:
    """TAB-indented `Key<pad> : value` lines in order. A line with an empty key (`\\t<pad> : text`)
    continues the previous value (multi-line `Error Information`, docs/FORMATS.md §2.2)."""
    pairs: list[tuple[str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ParseError("npu-smi: expected `key : value`", line)
        key, value = key.strip(), value.strip()
        if not key and pairs:
            pairs[-1] = (pairs[-1][0], f"{pairs[-1][1]}\n{value}")
        elif key:
            pairs.append((key, value))
    return pairs


@dataclass(frozen=True)
class Health:
    status: str  # OK | Warning | Alarm | Critical | UNKNOWN
    error_codes: tuple[str, ...]
    information: str  # "" for NA; several lines joined by "\n"


def parse_health(text: str) -> Health:
    """`npu-smi info -t health -i N -c M`."""
    fields = dict(parse_pairs(text))
    if "Health Status" not in fields:
        raise ParseError("npu-smi -t health: no `Health Status` line", known_error(text) or text)
    codes = fields.get("Error Code", "NA")
    info = fields.get("Error Information", "NA")
    return Health(
        status=fields["Health Status"],
        error_codes=() if codes in ("NA", "") else tuple(codes.split()),
        information="" if info in ("NA", "") else info,
    )


def parse_board(text: str) -> dict[str, str]:
    """`npu-smi info -t board -i N [-c M]`: the fields as written (Board ID, Chip Name, ...)."""
    fields = dict(parse_pairs(text))
    if "NPU ID" not in fields:
        raise ParseError("npu-smi -t board: no `NPU ID` line", known_error(text) or text)
    return fields


def parse_list(text: str) -> dict[int, int]:
    """`npu-smi info -l` in both formats (`Total Count` / `Card Count`): NPU id -> Chip Count."""
    counts: dict[int, int] = {}
    npu: int | None = None
    for key, value in parse_pairs(text):
        if key == "NPU ID":
            npu = int(value)
        elif key == "Chip Count" and npu is not None:
            counts[npu] = int(value)
    if not counts and "Count" not in text:
        raise ParseError("npu-smi -l: no `NPU ID` / `Chip Count` lines", known_error(text) or text)
    return counts


@dataclass(frozen=True)
class MapRow:
    npu: int
    chip: int
    logic_id: int
    name: str


def parse_mapping(text: str) -> tuple[MapRow, ...]:
    """`npu-smi info -m`: rows with a Chip Logic ID. Rows `<npu> 1 - Mcu` (910B, npu-smi 25.5)
    have logic id `-` and are the board MCU, not a device: skipped (docs/FORMATS.md §2.4)."""
    rows: list[MapRow] = []
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or not lines[0].split()[:2] == ["NPU", "ID"]:
        raise ParseError("npu-smi -m: no `NPU ID  Chip ID  Chip Logic ID  Chip Name` header",
                         known_error(text) or text)
    for line in lines[1:]:
        parts = line.split(None, 3)
        if len(parts) < 4 or not parts[0].isdigit():
            raise ParseError("npu-smi -m: row not `npu chip logic-id name`", line)
        if parts[2] == "-" or parts[3].strip() == "Mcu":
            continue
        rows.append(MapRow(int(parts[0]), int(parts[1]), _int(parts[2], line), parts[3].strip()))
    return tuple(rows)
