"""Probe commands on Ascend nodes that several checks share, built in one place so that they are
byte-identical (the runner runs an identical command once per node) and the device ids they use
mean the same thing everywhere.

Device ids: `hccn_tool -i` takes the logical device id docs/SPEC.md §4.2 defines: the Phy-ID column of
`npu-smi info` on A3, the Device column on 310P, the Chip Logic ID of `npu-smi info -m` elsewhere
(on A2/A1 hosts that equals the NPU id of the table, which is what `logical_devices` uses unless
it is handed the `-m` output). When npu-smi gave no readable table: range(node.devices).

Per-device loops: `hccn_loop(node, devices, args)` is ONE probe that runs `hccn_tool -i N <args>`
for every device, so 8 devices x 6 queries are 6 probes in one batch, not 48 round trips. Its
output shape, parsed back by `split_loop`::

    @@dev 0                 <- before each device
    <stdout and stderr of hccn_tool -i 0 ..., merged (2>&1), as printed>
    @@rc 0                  <- that device's exit code
    @@dev 1
    ...

When the hccn_tool binary is not executable, the probe prints `@@missing <path>` and exits 127
before running anything (a missing tool is a clear fail naming the path, not a parse error).
"""
from __future__ import annotations

import functools
import re
from typing import Any, Iterable

from ..checkapi import CommandOutput, ParseError, Probe, Shell, cmd, sh
from ..node import Node
from . import npu_smi
from .hccn import has_odd_breaks

# Vendor tools run under the C locale: a node's LANG (zh_CN.UTF-8 is common on Ascend hosts) must
# never reach a parser as translated words or a decimal comma (docs/SPEC.md §2.9, "locale").
NPU_SMI_LABEL = "npu-smi info"  # what a finding calls the table's probe
NPU_SMI_INFO = "LC_ALL=C npu-smi info"
NPU_SMI_MAP = "LC_ALL=C npu-smi info -m"
NPU_SMI_PATH_HINT = "npu-smi on the login PATH (normally /usr/local/bin/npu-smi, from the driver package)"
HCCN_CONF = "/etc/hccn.conf"
# `cat` of hccn.conf that tells "absent" (a normal case) from "unreadable" (a finding).
HCCN_CONF_CAT = sh("if [ -e {f} ]; then cat {f}; else echo {absent}; fi", f=HCCN_CONF, absent=f"@@absent {HCCN_CONF}")
DEV_MARK, RC_MARK, MISSING_MARK = "@@dev", "@@rc", "@@missing"


def npu_smi_health(npu: int, chip: int) -> Probe:
    """`npu-smi info -t health -i N -c M` for one chip (ids from the table, so ints)."""
    return cmd("LC_ALL=C npu-smi info -t health -i {npu} -c {chip}", npu=int(npu), chip=int(chip))


def npu_smi_board(npu: int, chip: int | None = None) -> Probe:
    if chip is None:
        return cmd("LC_ALL=C npu-smi info -t board -i {npu}", npu=int(npu))
    return cmd("LC_ALL=C npu-smi info -t board -i {npu} -c {chip}", npu=int(npu), chip=int(chip))


def hccn(node: Node, dev: int, args: str) -> Shell:
    """One `hccn_tool -i <dev> <args>` call; `args` are words chosen by the check (each quoted)."""
    return sh("{tool} -i {dev} {args}", tool=node.hccn_tool, dev=int(dev), args=args.split())


def hccn_loop(node: Node, devices: Iterable[int], args: str) -> Shell:
    """One probe running `hccn_tool -i N <args>` for every device (shape in the module docstring)."""
    return _hccn_loop(node.hccn_tool, tuple(int(d) for d in devices), args)


@functools.lru_cache(maxsize=256)
def _hccn_loop(tool: str, ids: tuple[int, ...], args: str) -> Shell:
    """Cached by what the text is made of: every node of a cluster asks the same loops (its tool
    path and device ids are the cluster's), five checks a node."""
    return sh("[ -x {tool} ] || {{ echo {missing}; exit 127; }}; "
              "for i in {ids}; do echo {dev} $i; LC_ALL=C {tool} -i $i {args} 2>&1; echo {rc} $?; done",
              tool=tool, missing=MISSING_MARK + " " + tool, ids=list(ids), args=args.split(), dev=DEV_MARK,
              rc=RC_MARK)


def split_loop(out: CommandOutput) -> dict[int, CommandOutput]:
    """`hccn_loop` output -> {device: CommandOutput(stdout=its text, rc=its exit code)}.

    Raises ParseError when the framing is broken (a device without its `@@rc` line: the loop was
    cut short). The marker lines are found by `str.find` (`_loop_marks`) and each device's text
    is sliced out of the text, not rebuilt line by line (7 loops x 8 devices a node); text with
    other line breaks than `\\n` takes the line-by-line path, which reads them as
    `str.splitlines()` does. The slicing buys 1.0 M instructions a node after the bytes arrive
    against that line-by-line reading (`_split_lines`, its reference, which the tests compare it
    with; docs/PERFORMANCE.md §4)."""
    return _split_text(out.stdout)


def split_alike(out: CommandOutput) -> dict[int, CommandOutput]:
    """split_loop for a query whose answer is the same text on every healthy node (`-link -g`
    prints `link status: UP` on all of them): kept by its text, so a cluster's nodes split it
    once, not once each (8 per-device outputs made and framed: 0.8 M instructions a node after the
    bytes arrive, docs/PERFORMANCE.md §4). The dict is a copy; the outputs in it are frozen."""
    return dict(_split_kept(out.stdout))


@functools.lru_cache(maxsize=64)
def _split_kept(text: str) -> dict[int, CommandOutput]:
    return _split_text(text)


def _split_text(text: str) -> dict[int, CommandOutput]:
    if has_odd_breaks(text):
        return _split_lines(text)
    per_dev: dict[int, CommandOutput] = {}
    dev: int | None = None
    start = 0
    for begin, line in _loop_marks(text):
        if line.startswith(DEV_MARK):
            dev, start = int(line.split()[1]), begin + len(line) + 1
        elif dev is not None:
            per_dev[dev] = CommandOutput(stdout=text[start:begin], rc=int(line.split()[1]))
            dev = None
    if dev is not None:
        raise ParseError(f"hccn_tool loop: device {dev} has no exit code (output cut short)",
                         text[start:].rstrip("\n"))
    return per_dev


_MARKS = (DEV_MARK + " ", RC_MARK + " ")  # "@@dev ", "@@rc ": how a marker line begins


def _loop_marks(text: str) -> list[tuple[int, str]]:
    """(start, line) of every marker line: exactly the matches of `^(?:@@dev|@@rc) [^\\n]*` under re.M.

    A marker begins a line, so it opens the text or follows `\\n`: `str.find("\\n@@")` jumps from
    one candidate to the next in C (about 16 a loop), and only those are looked at here. A `^`
    regex under re.M is tried at every character of the text (about 200 us for one 8-device
    -optical loop, 7 loops a node); splitting the text at every `\\n@@` copied all of it (20 us
    for that loop, this 14)."""
    marks: list[tuple[int, str]] = []
    if text.startswith(_MARKS):
        nl = text.find("\n")
        marks.append((0, text if nl < 0 else text[:nl]))
    at = text.find("\n@@")
    while at >= 0:
        start = at + 1
        if text.startswith(_MARKS, start):
            nl = text.find("\n", start)
            marks.append((start, text[start:] if nl < 0 else text[start:nl]))
        at = text.find("\n@@", start)
    return marks


def _split_lines(text: str) -> dict[int, CommandOutput]:
    per_dev: dict[int, CommandOutput] = {}
    dev: int | None = None
    body: list[str] = []
    for line in text.splitlines():
        if line.startswith(DEV_MARK + " "):
            dev, body = int(line.split()[1]), []
        elif line.startswith(RC_MARK + " ") and dev is not None:
            per_dev[dev] = CommandOutput(stdout="\n".join(body) + ("\n" if body else ""),
                                         rc=int(line.split()[1]))
            dev = None
        elif dev is not None:
            body.append(line)
    if dev is not None:
        raise ParseError(f"hccn_tool loop: device {dev} has no exit code (output cut short)",
                         "\n".join(body))
    return per_dev


_MISSING = re.compile(re.escape(MISSING_MARK) + r" (.+)")


def hccn_missing(out: CommandOutput | None) -> str | None:
    """The hccn_tool path looked at, when the loop found no executable there."""
    if out is None:
        return None
    m = _MISSING.search(out.stdout)  # a literal prefix: the regex engine searches for it as str.find does
    return m.group(1).strip() if m else None


def table_or_none(npu_smi_text: str | None) -> npu_smi.InfoTable | None:
    """The `npu-smi info` table, or None when the text is not a readable table."""
    if not npu_smi_text:
        return None
    try:
        return npu_smi.parse_info(npu_smi_text)
    except ParseError:
        return None


def npu_table(npu_idle: Any) -> npu_smi.InfoTable | None:
    """The node's `npu-smi info` table from npu.idle's facts, which the Ascend checks that read it
    USE (parsed once a node), or None when npu-smi gave no readable table (it failed, hung,
    printed something else: npu.idle's facts then say so or are its error) or npu.idle was not
    gathered (None)."""
    return None if isinstance(npu_idle, BaseException) else getattr(npu_idle, "table", None)


def logical_devices(table: npu_smi.InfoTable | None, node: Node, mapping_text: str | None = None) -> list[int]:
    """The hccn_tool device ids of a node, in table order (see module docstring)."""
    if table is not None and table.chips:
        if table.layout == "chip" and mapping_text:
            try:
                logic = {(r.npu, r.chip): r.logic_id for r in npu_smi.parse_mapping(mapping_text)}
                return [logic.get((c.npu, c.chip), c.npu) for c in table.chips]
            except ParseError:
                pass
        return [c.logical_id for c in table.chips]
    return list(range(node.devices))


def is_inference(table: npu_smi.InfoTable | None) -> bool:
    """310/310P inference cards: no RoCE ports, so hccn.* do not apply."""
    return bool(table and table.inference)


NPU_SMI_PROBE = "npu_smi"  # the probe name every check gives NPU_SMI_INFO (one run per node)


def stdout_if_ok(out: CommandOutput | None) -> str | None:
    """A probe's stdout when it ran cleanly (rc 0), else None."""
    return out.stdout if out is not None and out.rc == 0 else None
