"""The HCCL rank table (`RANK_TABLE_FILE`, `hccl.json`): parsed, and refused where HCCL refuses it.

Ascend jobs launched from a rank table build their communicator from it: every rank is a device
(`device_id`, its NIC address `device_ip`, its `rank_id`) on a server (`server_id`). Two layouts are
read (docs/FORMATS.md §8; samples `tests/fixtures/ascend/ranktable__*.json`):

* version 1.0 (Atlas training, A2, A3 in AI-server mode): `status`, `version`, `server_count`,
  `server_list[]` of `{server_id, host_ip?, device[] of {device_id, device_ip?, rank_id}}`;
* version 1.2 (A3 SuperPoD mode): the same, plus `super_device_id` on every device and
  `super_pod_list[]` of `{super_pod_id, server_list[] of {server_id}}`.

The rules are HCCL's own parser's (hcomm `topoinfo_ranktableParser.cc` and
`topoinfo_ranktableConcise.cc`, docs/FORMATS.md §8.2) and its user guide's: a table that breaks
one is refused with one line naming the file, before any node is reached, because the job would
fail at communicator init on it. Rules that depend on the device type (whether `device_ip` may be
left out between servers) are the check's, which knows the nodes: `parse` never judges a table
against a cluster; `checks/hccl_ranktable.py` does that.
"""
from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import read_text

VERSIONS = ("1.0", "1.2")  # 2.0 (Atlas 950: rank_list/level_list) is another format, not read here
SUPERPOD_VERSION = "1.2"
COMPLETED = "completed"  # the writer (Ascend Operator, hccl_tools) is done; "initializing" is not
MAX_SERVER_ID = 64  # "AI server identifier (string, <= 64 characters)"
SUFFIX = ".json"  # HCCL's LoadFile: "path %s is not a valid .json file" otherwise
PORTS = ("device_port", "host_port", "backup_device_port", "device_vnic_port")  # 1..65535 when given


class RankTableError(ValueError):
    """A rank table HCCL would refuse, or no rank table at all: one line, naming the file."""


@dataclass(frozen=True)
class Device:
    device_id: int  # the physical device id on its server (`/dev/davinciN`; hccn_tool -i N)
    rank_id: int
    device_ip: str | None  # as written: one address, or several separated by commas (HCCL splits it)
    super_device_id: int | None = None  # SDID (version 1.2)

    @property
    def ips(self) -> tuple[str, ...]:
        return tuple(self.device_ip.split(",")) if self.device_ip else ()


@dataclass(frozen=True)
class Server:
    server_id: str
    devices: tuple[Device, ...]
    host_ip: str | None = None
    super_pod_id: str | None = None  # from super_pod_list (version 1.2)

    @property
    def ranks(self) -> range:
        ids = [d.rank_id for d in self.devices]
        return range(min(ids), max(ids) + 1)


@dataclass(frozen=True)
class RankTable:
    """A table HCCL would load, as other code launches from it: `ranks()` in rank order (rank id,
    server, device), `server(id)`, `world_size`, and `superpod` with each server's `super_pod_id`."""

    path: str
    version: str
    servers: tuple[Server, ...]

    @property
    def world_size(self) -> int:
        return sum(len(s.devices) for s in self.servers)

    @property
    def superpod(self) -> bool:
        return self.version == SUPERPOD_VERSION

    def server(self, server_id: str) -> Server | None:
        return next((s for s in self.servers if s.server_id == server_id), None)

    def ranks(self) -> list[tuple[int, Server, Device]]:
        """Every rank in rank order: (rank_id, its server, its device)."""
        return sorted(((d.rank_id, s, d) for s in self.servers for d in s.devices), key=lambda r: r[0])


def load(path: str | Path) -> RankTable:
    """Read and parse a rank table file; RankTableError (one line) for anything HCCL would refuse."""
    p = Path(path)
    if not p.name.endswith(SUFFIX) or p.name == SUFFIX:
        raise RankTableError(f"{p}: HCCL loads a rank table only from a file named *{SUFFIX}")
    return parse(read_text(p, "rank table", RankTableError), str(p))


def parse(text: str, path: str = "rank table") -> RankTable:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RankTableError(f"{path}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg}); a rank table is a JSON "
                              f"file") from None
    return from_document(doc, path)


def is_rank_table(doc: Any) -> bool:
    """Whether a decoded document looks like a rank table (what an inventory loader asks)."""
    return isinstance(doc, dict) and "server_list" in doc and ("status" in doc or "version" in doc)


def from_document(doc: Any, path: str = "rank table") -> RankTable:
    def fail(message: str) -> RankTableError:
        return RankTableError(f"{path}: {message}")

    if not isinstance(doc, dict):
        raise fail(f"expected a JSON object with server_list, got {type(doc).__name__}")
    status = _text(doc, "status", "", fail)
    if status != COMPLETED:
        raise fail(f"status is {status!r}, expected 'completed' (HCCL waits up to 30 minutes for the writer to "
                   f"finish the table, then fails: regenerate it)" if status is not None
                   else "status missing (HCCL needs \"status\": \"completed\")")
    version = _text(doc, "version", "", fail)
    if version not in VERSIONS:
        raise fail(f"version {version!r} is not a rank table version preflight reads ({', '.join(VERSIONS)})"
                   if version is not None else "version missing: HCCL then reads the old group_list layout "
                                               "(\"1.0\", or \"1.2\" for SuperPoD)")
    servers_doc = doc.get("server_list")
    if not isinstance(servers_doc, list) or not servers_doc:
        raise fail("server_list missing or empty (a list of servers with their devices)")
    count = _text(doc, "server_count", "", fail)  # optional: HCCL takes server_list's length
    if count is not None and _int(count) != len(servers_doc):
        raise fail(f"server_count is {count!r} but server_list has {len(servers_doc)} servers")
    servers = [_server(s, i, version, fail) for i, s in enumerate(servers_doc)]
    _unique_servers(servers, fail)
    _ranks(servers, fail)
    _device_ips(servers, fail)
    if version == SUPERPOD_VERSION and "super_pod_list" in doc:
        servers = _super_pods(doc["super_pod_list"], servers, fail)
    return RankTable(path=path, version=version, servers=tuple(servers))


def _text(obj: dict, key: str, where: str, fail) -> str | None:
    """A property HCCL reads: absent (None) or a JSON string; any other JSON type HCCL refuses (EI0017
    "json object property value of Name[...] is not string")."""
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise fail(f"{where}{key} is {json.dumps(value)}, not a string (HCCL reads every value as a JSON string)")
    return value


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isascii() and value.isdigit() else None


def is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _server(doc: Any, i: int, version: str, fail) -> Server:
    where = f"server_list[{i}]"
    if not isinstance(doc, dict):
        raise fail(f"{where}: expected an object with server_id and device")
    sid = _text(doc, "server_id", f"{where}: ", fail)
    if not sid:
        raise fail(f"{where}: server_id missing or empty")
    if len(sid) > MAX_SERVER_ID:
        raise fail(f"{where}: server_id {sid[:20]!r}... is longer than {MAX_SERVER_ID} characters")
    where = f"{where} (server_id {sid})"
    host_ip = _text(doc, "host_ip", f"{where}: ", fail)
    if host_ip is not None and not is_ip(host_ip):
        raise fail(f"{where}: host_ip {host_ip!r} is not an IP address")
    devs = doc.get("device")
    if not isinstance(devs, list) or not devs:
        raise fail(f"{where}: device list missing or empty")
    devices = tuple(_device(d, f"{where} device[{j}]", version, fail) for j, d in enumerate(devs))
    seen: set[int] = set()
    for d in devices:
        if d.device_id in seen:
            raise fail(f"{where}: device_id {d.device_id} listed twice")
        seen.add(d.device_id)
    return Server(sid, devices, host_ip)


def _device(doc: Any, where: str, version: str, fail) -> Device:
    if not isinstance(doc, dict):
        raise fail(f"{where}: expected an object with device_id and rank_id")
    values: dict[str, int | None] = {}
    for key in ("device_id", "rank_id", "super_device_id"):
        text = _text(doc, key, f"{where}: ", fail)
        if text is None and key != "super_device_id":
            raise fail(f"{where}: {key} missing")
        values[key] = _int(text)
        if text is not None and values[key] is None:
            raise fail(f"{where}: {key} {text!r} is not a non-negative integer"
                       + (" (HCCL EI0004 'super_device_id[] is invalid')" if key == "super_device_id" else ""))
    for key in PORTS:
        port = _text(doc, key, f"{where}: ", fail)
        if port is not None and not (_int(port) and _int(port) <= 65535):  # 0 is HCCL's "auto": refused
            raise fail(f"{where}: {key} {port!r} is not a port number from 1 to 65535")
    ip = _text(doc, "device_ip", f"{where}: ", fail)
    if ip and not all(is_ip(part) for part in ip.split(",")):
        raise fail(f"{where}: device_ip {ip!r} is not an IP address (or a comma-separated list of them)")
    return Device(values["device_id"], values["rank_id"], ip or None, values["super_device_id"])  # type: ignore[arg-type]


def _unique_servers(servers: list[Server], fail) -> None:
    first: dict[str, int] = {}
    for i, s in enumerate(servers):
        if s.server_id in first:
            raise fail(f"server_id {s.server_id} repeated (server_list[{first[s.server_id]}] and [{i}])")
        first[s.server_id] = i


def _ranks(servers: list[Server], fail) -> None:
    """rank_id: 0..N-1, each once, and one contiguous block per server ("cross-server rank_id
    interleaving is not supported")."""
    owner: dict[int, str] = {}
    for s in servers:
        for d in s.devices:
            if d.rank_id in owner:
                raise fail(f"rank_id {d.rank_id} repeated (server {owner[d.rank_id]} and server {s.server_id})")
            owner[d.rank_id] = s.server_id
    n = len(owner)
    missing = [r for r in range(n) if r not in owner]
    if missing:
        beyond = sorted(r for r in owner if r >= n)
        raise fail(f"rank_id {missing[0]} missing: {n} devices must have rank ids 0..{n - 1}"
                   + (f", found {beyond[0]}" if beyond else ""))
    for s in servers:
        ids = sorted(d.rank_id for d in s.devices)
        if ids[-1] - ids[0] + 1 != len(ids):
            gap = next(r for r in range(ids[0], ids[-1]) if r not in ids)
            raise fail(f"server {s.server_id}: rank ids {ids[0]}..{ids[-1]} interleave with server "
                       f"{owner[gap]} (rank {gap}); HCCL needs one contiguous block of rank ids per server")


def _device_ips(servers: list[Server], fail) -> None:
    """Each device_ip address once in the table (HCCL's unique-value pool). A device without one is
    judged by the check: HCCL needs it between servers on A2, not inside an A3 SuperPoD."""
    seen: dict[str, str] = {}
    for s in servers:
        for d in s.devices:
            where = f"server {s.server_id} device {d.device_id}"
            for ip in d.ips:
                if ip in seen:
                    raise fail(f"device_ip {ip} repeated ({seen[ip]} and {where})")
                seen[ip] = where


def _super_pods(doc: Any, servers: list[Server], fail) -> list[Server]:
    """super_pod_list, as HCCL's CheckSuperPodInfo reads it: non-empty unique super_pod_ids, each
    listed server_id in server_list, every server in a pod, every device with a super_device_id,
    and super_device_id unique inside a pod (EI0014 'devices have same superDeviceId'). A server
    listed under two pods ends in the later one, as HCCL assigns it."""
    if not isinstance(doc, list) or not doc:
        raise fail("super_pod_list is not a non-empty list")
    known = {s.server_id for s in servers}
    pod_of: dict[str, str] = {}
    pods: set[str] = set()
    for i, pod in enumerate(doc):
        where = f"super_pod_list[{i}]"
        if not isinstance(pod, dict) or not isinstance(pod.get("server_list"), list):
            raise fail(f"{where}: expected an object with super_pod_id and server_list")
        pid = _text(pod, "super_pod_id", f"{where}: ", fail)
        if not pid:
            raise fail(f"{where}: super_pod_id missing or empty")
        if pid in pods:
            raise fail(f"super_pod_id {pid} listed twice in super_pod_list")
        pods.add(pid)
        for entry in pod["server_list"]:
            sid = _text(entry, "server_id", f"{where}: ", fail) if isinstance(entry, dict) else None
            if sid not in known:
                raise fail(f"{where} (super_pod_id {pid}): server_id {sid!r} is not in server_list")
            pod_of[sid] = pid
    out = []
    sdid: dict[tuple[str, int], str] = {}
    for s in servers:
        if s.server_id not in pod_of:
            raise fail(f"server {s.server_id} is in no super_pod_list entry")
        pid = pod_of[s.server_id]
        for d in s.devices:
            where = f"server {s.server_id} device {d.device_id}"
            if d.super_device_id is None:
                raise fail(f"{where}: super_device_id missing (every device needs one with a super_pod_list)")
            key = (pid, d.super_device_id)
            if key in sdid:
                raise fail(f"super_device_id {d.super_device_id} repeated in SuperPoD {pid} ({sdid[key]} and "
                           f"{where}); HCCL EI0014")
            sdid[key] = where
        out.append(Server(s.server_id, s.devices, s.host_ip, pid))
    return out
