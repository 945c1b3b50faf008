"""`key=value` version files: driver/version.info, firmware/version.info, ascend_toolkit_install.info."""
from __future__ import annotations


def parse_info(text: str) -> dict[str, str]:
    """Lines `Key=value`; keys kept as written (driver uses `Version`, the toolkit `version`)."""
    info: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            info[key.strip()] = value.strip()
    return info
