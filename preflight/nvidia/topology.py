"""Parsers of the GPU interconnect: `nvidia-smi topo -m` and `nvidia-smi nvlink -s`.

* `topo -m` (samples: tests/fixtures/nvidia/nvidia-smi_topo_-m__*): a header row naming the columns
  (`GPU0 ... GPUn-1`, then `NIC0..`/`mlx5_0..` on nodes with NICs, then `CPU Affinity`,
  `NUMA Affinity` and on newer drivers `GPU NUMA ID`), one row per GPU (`GPU0  X  NV18 ...`), NIC
  rows, then `Legend:`. The tool separates cells with TABs; copies pasted into issues have spaces,
  so cells are split on any whitespace (no link cell has a space: `X`, `SYS`, `NODE`, `PHB`, `PXB`,
  `PIX`, `NV#` = a bonded set of # NVLinks). Only GPU-to-GPU cells are read. A real H200 on driver
  580 underlines the header row with ESC[4m ... ESC[0m even into a pipe; the transport removes
  escapes before any parser sees the text (preflight/transport/clean.py).
* `nvlink -s` (samples: nvidia-smi_nvlink_*): `GPU N: <name> (UUID: ...)`, then `Link K: 26.562 GB/s`
  per link, or `Link K: <inactive>`; a GPU with no active link prints `NVML: Unable to retrieve
  NVLink information as all links are inActive` instead of link lines; a GPU without NVLink peers (the
  one-GPU H200 sample) prints nothing at all, exit 0.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..checkapi import ParseError


@dataclass(frozen=True)
class Topology:
    gpus: int
    cells: dict[tuple[int, int], str]   # (i, j), i != j -> `NV18`, `SYS`, ...

    def nvlinks(self, i: int, j: int) -> int:
        """Bonded NVLinks between two GPUs (0: not NVLink-connected)."""
        m = re.fullmatch(r"NV(\d+)", self.cells.get((i, j), ""))
        return int(m.group(1)) if m else 0


_GPU_ROW = re.compile(r"^GPU(\d+)\s")


def parse_topo(text: str) -> Topology:
    """`nvidia-smi topo -m` -> Topology; ParseError when there is no GPU matrix."""
    lines = text.split("\n")
    head = next((i for i, ln in enumerate(lines) if re.search(r"(^|\s)GPU0(\s|$)", ln) and not _GPU_ROW.match(ln)), None)
    if head is None:
        raise ParseError("nvidia-smi topo -m: no header row with GPU0", text)
    cols = lines[head].split()
    n = 0
    while n < len(cols) and cols[n] == f"GPU{n}":
        n += 1
    cells: dict[tuple[int, int], str] = {}
    rows = 0
    for ln in lines[head + 1:]:
        if ln.startswith("Legend:"):
            break
        m = _GPU_ROW.match(ln)
        if not m:
            continue
        i, words = int(m.group(1)), ln.split()
        if i >= n or len(words) < n + 1:
            raise ParseError(f"nvidia-smi topo -m: row {words[0]} does not match the {n} GPU columns", text)
        for j, cell in enumerate(words[1:n + 1]):
            if j != i:
                cells[(i, j)] = cell
        rows += 1
    if rows != n:
        raise ParseError(f"nvidia-smi topo -m: {rows} GPU rows for {n} GPU columns", text)
    return Topology(n, cells)


@dataclass(frozen=True)
class NvlinkGpu:
    index: int
    name: str
    active: tuple[int, ...]
    inactive: tuple[int, ...]
    all_inactive: bool = False     # NVML's `all links are inActive` line instead of link lines

    @property
    def active_count(self) -> int:
        return len(self.active)


_GPU_HEAD = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: .*\))?\s*$")
_LINK = re.compile(r"^\s*Link (\d+): (.*?)\s*$")
ALL_INACTIVE = "all links are inActive"


def parse_nvlink(text: str) -> dict[int, NvlinkGpu]:
    """`nvidia-smi nvlink -s` -> {gpu index: NvlinkGpu}. Lines of neither form are passed over (a
    reporter's `....`); ParseError when text has no `GPU N:` line at all."""
    out: dict[int, NvlinkGpu] = {}
    cur: dict | None = None

    def flush():
        if cur is not None:
            out[cur["i"]] = NvlinkGpu(cur["i"], cur["name"], tuple(cur["up"]), tuple(cur["down"]), cur["none"])

    for line in text.splitlines():
        m = _GPU_HEAD.match(line)
        if m:
            flush()
            cur = {"i": int(m.group(1)), "name": m.group(2), "up": [], "down": [], "none": False}
            continue
        if cur is None:
            continue
        m = _LINK.match(line)
        if m:
            (cur["down"] if m.group(2) == "<inactive>" else cur["up"]).append(int(m.group(1)))
        elif ALL_INACTIVE in line:
            cur["none"] = True
    flush()
    if not out and text.strip():
        raise ParseError("nvidia-smi nvlink -s: no `GPU N:` line", text)
    return out
