"""`key=value` version files: driver/version.info, firmware/version.info, ascend_toolkit_install.info."""
from __future__ import annotations

import re as _re


def parse_info(text: str) -> dict[str, str]:
    """Lines `Key=value`; keys kept as written (driver uses `Version`, the toolkit `version`)."""
    info: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            info[key.strip()] = value.strip()
    return info


# ---- compatibility fields (docs/FORMATS.md §4) -------------------------------------------------------


def parse_ranges(value: str) -> list[tuple[str, str]]:
    """`[23.0.rc3,23.0.rc3.],[23.0.0,23.0.0.]` or `[V100R001C29],[V100R001C30]` -> [(low, high)];
    a single entry is (code, code)."""
    ranges = []
    for body in _re.findall(r"\[([^\]]*)\]", value):
        parts = [p.strip() for p in body.split(",")]
        ranges.append((parts[0], parts[-1]))
    return ranges


def version_key(version: str) -> tuple:
    """Ordering key for Ascend versions: `23.0.rc3` < `23.0.0` < `23.0.7` < `7.1.0.11.220`-style.
    A `rcN` part sorts before any release number at that position (rc3 precedes the release)."""
    key = []
    for part in version.strip(".").split("."):
        if part.isdigit():
            key.append((1, int(part), ""))
        else:
            m = _re.match(r"(?i)rc(\d+)$", part)
            key.append((0, int(m.group(1)), "") if m else (0, 0, part))
    return tuple(key)


def in_version_range(version: str, low: str, high: str) -> bool:
    """`low <= version <= high`; a high bound ending in `.` (`23.0.0.`) also admits every version
    that starts with it (23.0.0.x), as the firmware's compatible_version_drv writes it."""
    if version_key(version) < version_key(low):
        return False
    return version_key(version) <= version_key(high) or (high.endswith(".") and version.startswith(high))


_CODE = _re.compile(r"V(\d+)R(\d+)C(\d+)")


def code_key(code: str) -> tuple[int, int, int] | None:
    """`V100R001C15SPC012B220` -> (100, 1, 15): the VxxxRxxxCxx part that compatibility lists name."""
    m = _CODE.match(code.strip())
    return tuple(int(g) for g in m.groups()) if m else None


def code_compatible(innerversion: str, compatible: str) -> bool | None:
    """Whether an Innerversion's code is in a `compatible_version=[..],[..,..]` list (None: unreadable)."""
    mine = code_key(innerversion)
    ranges = [(code_key(lo), code_key(hi)) for lo, hi in parse_ranges(compatible)]
    if mine is None or not ranges or any(lo is None or hi is None for lo, hi in ranges):
        return None
    return any(lo <= mine <= hi for lo, hi in ranges)
