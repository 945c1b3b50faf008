"""Parsers of `nvidia-smi` output: the `-q` report, the default table and `--query-gpu` CSV.

Formats (docs/NVIDIA.md §1, samples in tests/fixtures/nvidia):

* `nvidia-smi -q`: `Key : value` lines, keys padded to column 42, nesting by 4-space indentation
  under a `GPU <bus id>` line per GPU. Key names repeat under different parents (`Pending` under
  `MIG Mode`, `ECC Mode`, `Remapped Rows`), so the report is read as a tree, never by grepping a
  key. Drivers before ~R530 call the clock section `Clocks Throttle Reasons`, newer ones `Clocks
  Event Reasons`; both are read.
* The default table: a `| NVIDIA-SMI x  Driver Version: y  CUDA Version: z |` banner, one block
  per GPU whose first line starts `|   <index>  <name> ... | <bus id> ...`, and a `Processes:`
  table (`GPU GI CI PID Type Process name GPU Memory`) or `No running processes found`.
* `--query-gpu=a,b --format=csv[,noheader][,nounits]`: fields separated by `", "` (a name with
  spaces stays one field), `N/A` or `[N/A]` for an unsupported field.

GPU index: the order of `nvidia-smi` (PCI bus order), which is what `CUDA_VISIBLE_DEVICES` means
when `CUDA_DEVICE_ORDER=PCI_BUS_ID`; `-q` lists GPUs in the same order, so its n-th block is GPU n.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..checkapi import ParseError

Tree = dict[str, Any]  # key -> str value or a nested Tree

_KV = re.compile(r"^(?P<indent> *)(?P<key>\S.*?)\s*:\s(?P<value>.*)$|^(?P<indent2> *)(?P<key2>\S.*?)\s*:?\s*$")
_GPU_HEAD = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
REASON_SECTIONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")
# Yes/No fields of a GPU block that gpu.health reads, by key path (docs/NVIDIA.md §1)
FLAGS = {
    "reset_required": ("GPU Reset Status", "Reset Required"),
    "drain_and_reset": ("GPU Reset Status", "Drain and Reset Recommended"),
    "remap_pending": ("Remapped Rows", "Pending"),
    "remap_failed": ("Remapped Rows", "Remapping Failure Occurred"),
    "retired_pending": ("Retired Pages", "Pending Page Blacklist"),
}
# clock-event reasons that mean the hardware is slowing the GPU down (an `Active` one is a finding)
HW_SLOWDOWN_REASONS = ("HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown", "SW Thermal Slowdown")


@dataclass(frozen=True)
class QueryGpu:
    """One GPU of `nvidia-smi -q`, with what the health checks read."""

    index: int
    bus_id: str
    name: str
    uuid: str
    tree: Tree = field(repr=False)

    def get(self, *path: str) -> str | None:
        node: Any = self.tree
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        return node if isinstance(node, str) else None

    def section(self, *path: str) -> Tree:
        node: Any = self.tree
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        return node if isinstance(node, dict) else {}

    @property
    def persistence(self) -> str | None:
        return self.get("Persistence Mode")

    def flag(self, name: str) -> bool:
        """A Yes/No field of FLAGS (`Remapped Rows > Pending: Yes`)."""
        return _yes(self.get(*FLAGS[name]))

    def uncorrectable(self, kind: str) -> int | None:
        """Sum of the uncorrectable ECC counters under `ECC Errors > <kind>` (Volatile/Aggregate):
        Ampere+ `SRAM Uncorrectable ...`/`DRAM Uncorrectable`, older `Double Bit > Total`.
        None when ECC is off or unsupported (every counter `N/A`)."""
        sec = self.section("ECC Errors", kind)
        values = [v for k, v in _leaves(sec) if "Uncorrectable" in k[-1] or k[-2:] == ("Double Bit", "Total")]
        nums = [int(v) for v in values if v.strip().isdigit()]
        return sum(nums) if nums else None

    @property
    def clock_reasons(self) -> dict[str, bool]:
        """Reason -> Active, flattened (`HW Thermal Slowdown` is nested under `HW Slowdown`)."""
        for name in REASON_SECTIONS:
            sec = self.section(name)
            if sec:
                return {k[-1]: v.strip() == "Active" for k, v in _leaves(sec)}
        return {}

    @property
    def idle(self) -> bool:
        return self.clock_reasons.get("Idle", False)

    def pcie(self) -> dict[str, int | None]:
        info = ("PCI", "GPU Link Info")
        gen_cur = self.get(*info, "PCIe Generation", "Device Current") or self.get(*info, "PCIe Generation", "Current")
        gen_max = self.get(*info, "PCIe Generation", "Device Max") or self.get(*info, "PCIe Generation", "Max")
        return {"gen_current": _int(gen_cur), "gen_max": _int(gen_max),
                "width_current": _int(self.get(*info, "Link Width", "Current")),
                "width_max": _int(self.get(*info, "Link Width", "Max"))}

    @property
    def fabric(self) -> tuple[str | None, str | None]:
        return self.get("Fabric", "State"), self.get("Fabric", "Status")

    @property
    def memory_mib(self) -> tuple[int | None, int | None]:
        return _int(self.get("FB Memory Usage", "Used")), _int(self.get("FB Memory Usage", "Total"))


@dataclass(frozen=True)
class QueryReport:
    driver_version: str | None
    cuda_version: str | None
    attached: int | None
    gpus: tuple[QueryGpu, ...]


def _yes(value: str | None) -> bool:
    return (value or "").strip() == "Yes"


def _int(value: str | None) -> int | None:
    m = re.match(r"\s*(\d+)", value or "")
    return int(m.group(1)) if m else None


def _leaves(tree: Tree, prefix: tuple[str, ...] = ()):
    for k, v in tree.items():
        if isinstance(v, dict):
            yield from _leaves(v, prefix + (k,))
        else:
            yield prefix + (k,), v


def parse_query(text: str) -> QueryReport:
    """`nvidia-smi -q` -> QueryReport; ParseError when the text is not that report."""
    if "NVSMI LOG" not in text:
        raise ParseError("nvidia-smi -q: no '==============NVSMI LOG==============' header", text)
    top: Tree = {}
    gpus: list[tuple[str, Tree]] = []
    stack: list[tuple[int, Tree]] = [(-1, top)]
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.startswith("="):
            continue
        head = _GPU_HEAD.match(line)
        if head:
            tree: Tree = {}
            gpus.append((head.group(1), tree))
            stack = [(-1, top), (0, tree)]
            continue
        m = _KV.match(line)
        if not m:
            raise ParseError(f"nvidia-smi -q: unreadable line {line.strip()!r}", text)
        indent = len(m.group("indent") if m.group("key") is not None else m.group("indent2"))
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if m.group("key") is not None:
            parent[m.group("key")] = m.group("value").strip()
        else:
            child: Tree = {}
            parent[m.group("key2")] = child
            stack.append((indent, child))
    out = []
    for i, (bus, tree) in enumerate(gpus):
        out.append(QueryGpu(index=i, bus_id=bus, name=str(tree.get("Product Name", "")),
                            uuid=str(tree.get("GPU UUID", "")), tree=tree))
    attached = _int(top.get("Attached GPUs") if isinstance(top.get("Attached GPUs"), str) else None)
    return QueryReport(driver_version=top.get("Driver Version"), cuda_version=top.get("CUDA Version"),
                       attached=attached, gpus=tuple(out))


# ---- the default table -------------------------------------------------------------------------

@dataclass(frozen=True)
class TableGpu:
    index: int
    name: str
    bus_id: str
    memory_used_mib: int | None
    memory_total_mib: int | None


@dataclass(frozen=True)
class Process:
    gpu: int
    pid: int
    type: str
    name: str
    memory_mib: int | None


@dataclass(frozen=True)
class Table:
    smi_version: str | None
    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[TableGpu, ...]
    processes: tuple[Process, ...]


_BANNER = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s+(\S+)(?:\s+CUDA Version:\s+(\S+))?")
_GPU_ROW = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(?:On|Off)\s*\|\s*([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s")
_MEM = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB")
# `|    0   N/A  N/A    280080      C   python3     3030MiB |` (GI/CI columns since R450) or the
# older `|    0      1409      G   /usr/lib/xorg/Xorg     149MiB |`
_PROC = re.compile(r"^\|\s+(\d+)\s+(?:(?:\S+)\s+(?:\S+)\s+)?(\d+)\s+(C\+G|C|G)\s+(.*?)\s+(\d+MiB|N/A)\s*\|$")


def parse_table(text: str) -> Table:
    """The default `nvidia-smi` view -> Table; ParseError when there is no banner."""
    banner = _BANNER.search(text)
    if not banner:
        raise ParseError("nvidia-smi: no 'NVIDIA-SMI ... Driver Version:' banner", text)
    gpus: list[TableGpu] = []
    procs: list[Process] = []
    lines = text.splitlines()
    in_procs = False
    for i, line in enumerate(lines):
        if "Processes:" in line:
            in_procs = True
            continue
        if not in_procs:
            m = _GPU_ROW.match(line)
            if m:
                mem = _MEM.search(lines[i + 1]) if i + 1 < len(lines) else None
                gpus.append(TableGpu(int(m.group(1)), m.group(2).strip(), m.group(3),
                                     int(mem.group(1)) if mem else None, int(mem.group(2)) if mem else None))
            continue
        p = _PROC.match(line.rstrip())
        if p:
            mem = p.group(5)
            procs.append(Process(int(p.group(1)), int(p.group(2)), p.group(3), p.group(4).strip(),
                                 int(mem[:-3]) if mem.endswith("MiB") else None))
    return Table(banner.group(1), banner.group(2), banner.group(3), tuple(gpus), tuple(procs))


# ---- --query-gpu CSV ---------------------------------------------------------------------------

def parse_csv(text: str, fields: list[str] | tuple[str, ...], header: bool = False) -> list[dict[str, str | None]]:
    """`--query-gpu=<fields> --format=csv[,noheader][,nounits]` -> one dict per GPU line.
    Split on ", " (not on whitespace: names contain spaces); `N/A`/`[N/A]` become None."""
    rows = [ln for ln in text.splitlines() if ln.strip()]
    if header and rows:
        rows = rows[1:]
    out = []
    for ln in rows:
        parts = [p.strip() for p in ln.split(", ")]
        if len(parts) != len(fields):
            raise ParseError(f"nvidia-smi --query-gpu: {len(parts)} fields where {len(fields)} were asked: {ln!r}", text)
        out.append({f: (None if v in ("N/A", "[N/A]", "[Not Supported]") else v) for f, v in zip(fields, parts)})
    return out
