"""`hccn_tool` output (docs/FORMATS.md §3), `/etc/hccn.conf`, and hccn_tool's error strings.

One function per query, each taking the text of one device (`hccn_tool -i N ...`, stdout and
stderr merged as `preflight.ascend.probes.hccn_loop` delivers it). Error outputs are recognised first by
`error_line()`, so a check can report them instead of calling a parser on them; a text that is
neither a known error nor the query's format raises ParseError quoting it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from preflight.checkapi import ParseError
from preflight.checkhelpers import line_with
from preflight.model import direct_init

# hccn_tool's error lines (DRV hccn_tool/cmd.c, tool_ops*.c; docs/FORMATS.md §3.3-3.10), with the
# short reason a finding quotes. Matched as substrings of one output line.
ERRORS: tuple[tuple[str, str], ...] = (
    ("Get invalid device id.", "no such device id on this node"),
    ("The device is not exist!", "the device does not exist"),
    ("The command is not supported on this product.", "not supported on this product"),
    ("The VM does not support this command.", "not supported inside a VM"),
    ("permission denied", "permission denied (run as root)"),
    ("The hccn.conf can't access", "/etc/hccn.conf not accessible"),
    ("Get ipconf failed, because no ip was preset there!", "no device IP configured"),
    ("Execute failed: Link status is down.", "the link is down"),
    ("hccn_tool is busy", "hccn_tool is busy"),
    ("The device is occupied", "the device is occupied"),
    ("The cmd line execute timeout!", "the command timed out"),
    ("Optical module is not present.", "no optical module"),
    ("Command unsupported on this optical module.", "not supported by this optical module"),
    ("Control link unreachable.", "the module's control link is unreachable"),
    ("I2c is busy.", "the module's I2C bus is busy"),
    ("optical module initializing", "the optical module is initialising"),
    ("Get device health status failed!", "device health status could not be read"),
    ("Command execute failed!", "the command failed"),
    ("Cmd execute failed!", "the command failed"),
    ("Get invalid", "invalid arguments"),
    ("Get unknown option!", "unknown option (older driver?)"),
    ("not found", "hccn_tool not found"),
)


_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}
_LANE = re.compile(r"^(Tx Power|Rx Power)(\d*)$")  # "Tx Power", "Tx Power1".."Tx Power3"
_NUMBER = re.compile(r"^(-?\d+(?:\.\d+)?)(?:\s*(\S+))?$")  # "4.4035 mW", "47 C", "3262.90 mV"


# Every ERRORS needle holds one of these (tests/ascend/test_hccn.py holds the table to it), and
# no healthy device's answer in the real samples and recordings does: a text without any of them
# has no error line. Eight substring scans in C decide the common case without splitting the text
# into lines: 1.0 M instructions a node less than looking for the 22 needles themselves (56 device
# texts a node; docs/PERFORMANCE.md §4). The plain reading, line_with(text, ERRORS), is what the
# tests compare it with.
ERROR_ANCHORS = ("The ", "Get ", "Co", "busy", "xecute", "odule", "permission", "not found")


def error_line(text: str) -> tuple[str, str] | None:
    """(the error line as printed, its reason) when hccn_tool printed a known error."""
    for anchor in ERROR_ANCHORS:
        if anchor in text:
            break
    else:  # the common case: no error at all
        return None
    return line_with(text, ERRORS)


def asctime(text: str) -> datetime:
    """`Wed Aug  2 03:36:43 2022` (C-locale asctime; month names parsed here, not by locale)."""
    parts = text.split()
    if len(parts) != 5 or parts[1] not in _MONTHS:
        raise ParseError("hccn_tool: not an asctime date", text)
    try:
        hh, mm, ss = parts[3].split(":")
        return datetime(int(parts[4]), _MONTHS[parts[1]], int(parts[2]), int(hh), int(mm), int(ss))
    except ValueError:
        raise ParseError("hccn_tool: not an asctime date", text) from None


# ---- -link -g -----------------------------------------------------------------------------------

_LINK = re.compile(r"^link status:\s*(UP|DOWN)\s*$", re.M)


def parse_link(text: str) -> str:
    """`link status: UP` -> "UP" (DRV prints exactly UP or DOWN)."""
    m = _LINK.search(text)
    if not m:
        raise ParseError("hccn_tool -link -g: no `link status: UP|DOWN` line", text)
    return m.group(1)


# ---- -link_stat -g ------------------------------------------------------------------------------

@direct_init
@dataclass(frozen=True)
class LinkStat:
    current_time: datetime
    up_count: int
    down_count: int | None  # newer drivers only
    records: tuple[tuple[datetime, str, str], ...]  # (when, "UP"|"DOWN", date as printed), newest first


# Both prefixes: `[devid 0]` (fixtures, current DRV) and `[device 0]` (MC docs, older version).
_STAT_PREFIX = re.compile(r"^\[(?:devid|device) \d+\]")
_STAT_RECORD = re.compile(r"^\s+(.+?)\s+LINK (UP|DOWN)\s*$")  # "    Tue Aug  1 14:44:40 2022    LINK DOWN"


def parse_link_stat(text: str) -> LinkStat:
    fields: dict[str, str] = {}
    records: list[tuple[datetime, str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        prefix = _STAT_PREFIX.match(line)
        if not prefix:
            raise ParseError("hccn_tool -link_stat -g: line without `[devid N]` prefix", line)
        rest = line[prefix.end():]
        rec = _STAT_RECORD.match(rest)
        if rec:
            records.append((asctime(rec.group(1)), rec.group(2), rec.group(1)))
            continue
        key, sep, value = rest.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    if "current time" not in fields or "link up count" not in fields:
        raise ParseError("hccn_tool -link_stat -g: no `current time` / `link up count` line", text)
    down = fields.get("link down count")
    return LinkStat(
        current_time=asctime(fields["current time"]), up_count=_int(fields["link up count"], text),
        down_count=_int(down, text) if down not in (None, "") else None, records=tuple(records),
    )


def _int(value: str, text: str) -> int:
    if not value.strip().isdigit():
        raise ParseError(f"hccn_tool: {value!r} is not a count", text)
    return int(value)


# ---- -net_health -g -----------------------------------------------------------------------------

_NET_HEALTH = re.compile(r"^net health status:\s*(.+?)\s*$", re.M)


def parse_net_health(text: str) -> str:
    """`net health status: Socket failed` -> "Socket failed" (the string as printed)."""
    m = _NET_HEALTH.search(text)
    if not m:
        raise ParseError("hccn_tool -net_health -g: no `net health status:` line", text)
    return m.group(1)


# ---- -ip -g -------------------------------------------------------------------------------------

@direct_init
@dataclass(frozen=True)
class IpConf:
    ip: str | None
    netmask: str | None


def parse_ip(text: str) -> IpConf:
    """`ipaddr:10.10.0.10` / `netmask:255.255.255.0` (no space after the colon). Empty output (the
    MC fixture for a device without IP) gives IpConf(None, None)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if not line.strip():
            continue
        if not sep or key not in ("ipaddr", "netmask"):
            raise ParseError("hccn_tool -ip -g: expected `ipaddr:` and `netmask:` lines", text)
        values[key] = value.strip()
    return IpConf(ip=values.get("ipaddr") or None, netmask=values.get("netmask") or None)


_CONF_LINE = re.compile(r"^([A-Za-z_]+?)_(\d+)\s*=\s*(.*)$")  # address_0=10.10.0.10


def parse_hccn_conf(text: str) -> dict[int, dict[str, str]]:
    """/etc/hccn.conf `address_0=10.10.0.10` lines -> {0: {"address": "10.10.0.10", ...}}."""
    conf: dict[int, dict[str, str]] = {}
    for line in text.splitlines():
        line = line.strip()
        m = _CONF_LINE.match(line)
        if m:
            conf.setdefault(int(m.group(2)), {})[m.group(1)] = m.group(3).strip()
    return conf


# ---- -optical -g --------------------------------------------------------------------------------

@direct_init
@dataclass(frozen=True)
class Optical:
    present: str | None  # "present" | "not present"
    tx_power: dict[int, float | None]  # lane -> mW ("Tx Power" without index: lane 0)
    rx_power: dict[int, float | None]
    thresholds: dict[str, float | None]  # "TxPower High Thres" -> 3.5481 (mW), ...
    temperature: float | None  # C
    flags: dict[str, str]  # "Rx Los Flag" -> "0xff"
    text: str = field(default="", compare=False, repr=False)  # the device's output, as printed

    @property
    def fields(self) -> dict[str, str]:
        """Every `key : value` line, both sides stripped: read from the text when asked (only the
        judged ones are read when parsing, 22 of a module's 46 lines)."""
        return _optical_fields(self.text)


def optical_value(value: str) -> float | None:
    """`4.4035 mW` -> 4.4035; `NA`, `not supported`, `get failed` -> None."""
    m = _NUMBER.match(value.strip())
    return float(m.group(1)) if m else None


# The line breaks str.splitlines() takes besides "\n": text with one takes the parsers' line-by-line path.
ODD_BREAKS = re.compile("[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_ASCII_ODD_BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e")


def has_odd_breaks(text: str) -> bool:
    """Whether ODD_BREAKS occurs in `text`. ASCII text (nearly all tool output) can only hold the
    ASCII ones, and six substring scans are ~80x faster than the character-class regex (60 us
    for one 8-device hccn_tool loop, asked per loop and per device)."""
    if text.isascii():
        return any(c in text for c in _ASCII_ODD_BREAKS)
    return ODD_BREAKS.search(text) is not None


def _optical_fields(text: str) -> dict[str, str]:
    """`key : value` lines as printed (split on the first ':'), blank lines and the `optical info:`
    heading left out; a non-blank line with no colon is not this format. Lines are cut at `\\n`
    (8 devices a node, 46 lines each: one partition a line, about 15 us a device, where the regex
    scan and its dict comprehension took 35); other line breaks take the line-by-line path, as
    str.splitlines() reads them."""
    lines = text.split("\n") if not has_odd_breaks(text) else text.splitlines()
    fields: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition(":")
        if not sep:
            if line.strip():
                raise ParseError("hccn_tool -optical -g: expected `key : value`", line)
            continue
        if "optical" in key and (key + value).strip() == "optical info":  # the heading line
            continue
        fields[key.strip()] = value.strip()
    return fields


_THRES, _FLAG, _PRESENT, _TEMPERATURE = ("thres",), ("flag",), ("present",), ("temperature",)


_OPTICAL_PLAN: dict[str, tuple | None] = {}  # a key as printed -> (its name, what it holds); None: not judged
_UNPLANNED = object()


def _optical_key(key: str) -> tuple | None:
    """What a `-optical -g` key (as printed, padding and all) holds, with its stripped name: a
    threshold, a flag, a power lane (("Tx Power", 2)), `present` or `temperature`; None for
    nothing judged. Keys are the tool's format, printed alike on every device: each is read
    once and kept (a plain dict: looked up 46 times a device; at most 1,024 kept)."""
    name = key.strip()
    if name.endswith("Thres"):
        step: tuple | None = (name, _THRES)
    elif name.endswith("Flag"):
        step = (name, _FLAG)
    elif name == "present":
        step = (name, _PRESENT)
    elif name == "temperature":
        step = (name, _TEMPERATURE)
    else:
        m = _LANE.match(name)
        step = (name, (m.group(1), int(m.group(2) or 0))) if m else None
    if len(_OPTICAL_PLAN) >= 1024:
        _OPTICAL_PLAN.clear()
    _OPTICAL_PLAN[key] = step
    return step


def parse_optical(text: str) -> Optical:
    """The judged fields of one device's `-optical -g` (Optical.fields reads every line).

    Every line is still checked for its colon, as _optical_fields does, and a later line with the
    same key wins as it does there; only the 22 of a module's 46 lines that are judged have their
    value stripped and read, each key as printed planned once (_OPTICAL_PLAN). Against its plain
    reference, judging _optical_fields' dict (the oracle of test_optical_judges_what_its_fields_hold,
    which compares the two), this buys 1.5 M instructions a node after the bytes arrive
    (docs/PERFORMANCE.md §4); the line loop is _optical_fields' own, written out again, because a
    generator shared by the two cost 14 us a node (its resume per line)."""
    # "high power enable reg: enabled": no space before the colon, so split on the first ':'.
    lines = text.split("\n") if not has_odd_breaks(text) else text.splitlines()
    lanes: dict[str, dict[int, float | None]] = {"Tx Power": {}, "Rx Power": {}}
    thresholds: dict[str, float | None] = {}
    flags: dict[str, str] = {}
    present: str | None = None
    temperature = "NA"
    plan = _OPTICAL_PLAN
    for line in lines:
        key, sep, value = line.partition(":")
        if not sep:
            if line.strip():
                raise ParseError("hccn_tool -optical -g: expected `key : value`", line)
            continue
        step = plan.get(key, _UNPLANNED)
        if step is _UNPLANNED:
            step = _optical_key(key)
        if step is None:
            continue
        name, kind = step
        if kind is _THRES:
            thresholds[name] = optical_value(value)
        elif kind is _FLAG:
            flags[name] = value.strip()
        elif kind is _PRESENT:
            present = value.strip()
        elif kind is _TEMPERATURE:
            temperature = value
        else:
            lanes[kind[0]][kind[1]] = optical_value(value)
    if present is None:
        raise ParseError("hccn_tool -optical -g: no `present :` line", text)
    return Optical(
        present=present, tx_power=lanes["Tx Power"], rx_power=lanes["Rx Power"],
        thresholds=thresholds, temperature=optical_value(temperature), flags=flags, text=text,
    )


# ---- -stat -g, -fec -g, -tls -g (read by other checks; not judged here) ---------------------------

def parse_stat(text: str) -> dict[str, int]:
    """`packet statistics:` then `key:int` counters."""
    counters: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and value.strip().isdigit():
            counters[key] = int(value)
    if "packet statistics:" not in text:
        raise ParseError("hccn_tool -stat -g: no `packet statistics:` line", text)
    return counters


_FEC = re.compile(r"^fec mode:\s*(.+?)\s*$", re.M)
_TLS = re.compile(r"tls switch\[(\d+)\]")


def parse_fec(text: str) -> str:
    """`fec mode: rs FEC mode` -> "rs FEC mode"."""
    m = _FEC.search(text)
    if not m:
        raise ParseError("hccn_tool -fec -g: no `fec mode:` line", text)
    return m.group(1)


def parse_tls_switch(text: str) -> int:
    """`dev_id:0, tls switch[0](0:disable, 1:enable), ...` -> 0."""
    m = _TLS.search(text)
    if not m:
        raise ParseError("hccn_tool -tls -g: no `tls switch[N]`", text)
    return int(m.group(1))
