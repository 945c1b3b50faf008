"""`npu-smi info -t spod-info -i <npu> -c <chip>`: a chip's place in its SuperPoD (docs/FORMATS.md §8.3).

On an Atlas A3 SuperPoD server it prints `key : value` lines (sample
`npu-smi_info_-t_spod-info_-i_0_-c_0__A3__hicann-shmem.txt`)::

    SDID : 16777216
    Super Pod Size : 384
    Super Pod ID : 0
    Server Index : 4

`SDID` is the chip's `super_device_id` in a version 1.2 rank table and `Super Pod ID` the physical
SuperPoD (HCCL user guide, rank_table_config_a3.md). Products without SuperPoD print
`This device does not support querying spod-info.` (the npu-smi reference's own example).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..checkapi import ParseError

UNSUPPORTED = "does not support querying spod-info"
KEYS = {"SDID": "sdid", "Super Pod ID": "super_pod_id", "Super Pod Size": "super_pod_size",
        "Server Index": "server_index"}


@dataclass(frozen=True)
class SpodInfo:
    sdid: int
    super_pod_id: int
    super_pod_size: int | None = None
    server_index: int | None = None


def parse(text: str) -> SpodInfo | None:
    """The chip's SuperPoD identity; None where npu-smi says the product has none. ParseError on
    anything else (an unknown layout is never guessed)."""
    if UNSUPPORTED in text:
        return None
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        field = KEYS.get(key.strip())
        if sep and field:
            value = value.strip()
            if not value.isdigit():
                raise ParseError(f"npu-smi spod-info: {key.strip()} {value!r} is not a number", text)
            values[field] = int(value)
    if "sdid" not in values or "super_pod_id" not in values:
        raise ParseError("npu-smi spod-info: no `SDID :` and `Super Pod ID :` lines", text)
    return SpodInfo(**values)
