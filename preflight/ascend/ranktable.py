"""The HCCL rank table (`RANK_TABLE_FILE`, `hccl.json`): parsed, and refused where HCCL refuses it.

Ascend jobs launched from a rank table build their communicator from it: every rank is a device
(`device_id`, its NIC address `device_ip`, its `rank_id`) on a server (`server_id`). Two layouts are
read (docs/FORMATS.md §8; samples `tests/fixtures/ascend/ranktable__*.json`):

* version 1.0 (Atlas training, A2, A3 in AI-server mode): `status`, `version`, `server_count`,
  `server_list[]` of `{server_id, host_ip?, device[] of {device_id, device_ip?, rank_id}}`;
* version 1.2 (A3 SuperPoD mode): the same, plus `super_device_id` on every device and
  `super_pod_list[]` of `{super_pod_id, server_list[] of {server_id}}`.

The rules below are HCCL's own, from its user guide (hicann/hccl docs/en/user_guide/
cluster_info_config/rank_table_config_a3.md, fault_diagnosis/rank_table_load_fail.md and
cluster_info_verify_fail.md): a table that breaks one is refused with one line naming the file,
before any node is reached, because the job would fail at communicator init on it. `parse` never
judges a table against a cluster; `checks/hccl_ranktable.py` does that.

Numbers are strings in every real table ("0", "16"); a JSON number is accepted as well, since what
HCCL does with one is not documented.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERSIONS = ("1.0", "1.2")  # 2.0 (Atlas 950: rank_list/level_list) is another format, not read here
SUPERPOD_VERSION = "1.2"
COMPLETED = "completed"  # the writer (Ascend Operator, hccl_tools) is done; "initializing" is not
MAX_SERVER_ID = 64  # "AI server identifier (string, <= 64 characters)"


class RankTableError(ValueError):
    """A rank table HCCL would refuse, or no rank table at all: one line, naming the file."""


@dataclass(frozen=True)
class Device:
    device_id: int  # the physical device id on its server (`/dev/davinciN`; hccn_tool -i N)
    rank_id: int
    device_ip: str | None  # optional on one server; HCCL needs it between servers
    super_device_id: int | None = None  # SDID (version 1.2)


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
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise RankTableError(f"{p}: cannot read rank table: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RankTableError(f"{p}: not UTF-8 text (byte {exc.start})") from None
    return parse(text, str(p))


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
    status = doc.get("status")
    if status != COMPLETED:
        raise fail(f"status is {status!r}, expected 'completed' (HCCL refuses a table its writer has not "
                   f"finished; wait for it or regenerate the table)" if status is not None
                   else "status missing (HCCL needs \"status\": \"completed\")")
    version = doc.get("version")
    if version not in VERSIONS:
        raise fail(f"version {version!r} is not a rank table version preflight reads ({', '.join(VERSIONS)})"
                   if version is not None else "version missing (\"1.0\", or \"1.2\" for SuperPoD)")
    servers_doc = doc.get("server_list")
    if not isinstance(servers_doc, list) or not servers_doc:
        raise fail("server_list missing or empty (a list of servers with their devices)")
    count = doc.get("server_count")
    if count is None and version != SUPERPOD_VERSION:  # optional in 1.2, mandatory in 1.0
        raise fail("server_count missing (mandatory in version 1.0)")
    if count is not None and _int(count) != len(servers_doc):
        raise fail(f"server_count is {count!r} but server_list has {len(servers_doc)} servers")
    servers = [_server(s, i, version, fail) for i, s in enumerate(servers_doc)]
    _unique_servers(servers, fail)
    _ranks(servers, fail)
    _device_ips(servers, fail)
    if version == SUPERPOD_VERSION and "super_pod_list" in doc:
        servers = _super_pods(doc["super_pod_list"], servers, fail)
    return RankTable(path=path, version=version, servers=tuple(servers))


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


def _server(doc: Any, i: int, version: str, fail) -> Server:
    where = f"server_list[{i}]"
    if not isinstance(doc, dict):
        raise fail(f"{where}: expected an object with server_id and device")
    sid = doc.get("server_id")
    if not isinstance(sid, str) or not sid.strip():
        raise fail(f"{where}: server_id missing or empty")
    if len(sid) > MAX_SERVER_ID:
        raise fail(f"{where}: server_id {sid[:20]!r}... is longer than {MAX_SERVER_ID} characters")
    where = f"{where} (server_id {sid})"
    devs = doc.get("device")
    if not isinstance(devs, list) or not devs:
        raise fail(f"{where}: device list missing or empty")
    devices = tuple(_device(d, f"{where} device[{j}]", version, fail) for j, d in enumerate(devs))
    seen: set[int] = set()
    for d in devices:
        if d.device_id in seen:
            raise fail(f"{where}: device_id {d.device_id} listed twice")
        seen.add(d.device_id)
    host_ip = doc.get("host_ip")
    return Server(sid, devices, host_ip if isinstance(host_ip, str) else None)


def _device(doc: Any, where: str, version: str, fail) -> Device:
    if not isinstance(doc, dict):
        raise fail(f"{where}: expected an object with device_id and rank_id")
    values: dict[str, int | None] = {}
    for key in ("device_id", "rank_id") + (("super_device_id",) if version == SUPERPOD_VERSION else ()):
        if key not in doc:
            raise fail(f"{where}: {key} missing" + (" (mandatory in version 1.2: HCCL EI0004 "
                                                     "'super_device_id[] is invalid')" if key == "super_device_id" else ""))
        values[key] = _int(doc[key])
        if values[key] is None:
            raise fail(f"{where}: {key} {doc[key]!r} is not a non-negative integer")
    ip = doc.get("device_ip")
    if ip is not None and (not isinstance(ip, str) or not ip.strip()):
        raise fail(f"{where}: device_ip {ip!r} is not an address")
    return Device(values["device_id"], values["rank_id"], ip or None, values.get("super_device_id"))  # type: ignore[arg-type]


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
    """device_ip is "globally unique", and needed by every device once there are several servers."""
    seen: dict[str, str] = {}
    for s in servers:
        for d in s.devices:
            if d.device_ip is None:
                if len(servers) > 1:
                    raise fail(f"server {s.server_id} device {d.device_id}: device_ip missing (mandatory "
                               f"when the table has several servers)")
                continue
            where = f"server {s.server_id} device {d.device_id}"
            if d.device_ip in seen:
                raise fail(f"device_ip {d.device_ip} repeated ({seen[d.device_ip]} and {where})")
            seen[d.device_ip] = where


def _super_pods(doc: Any, servers: list[Server], fail) -> list[Server]:
    """super_pod_list: every server in exactly one pod, pods listed once, and super_device_id unique
    inside a pod (HCCL EI0014 'devices have same superDeviceId ... in superPod')."""
    if not isinstance(doc, list) or not doc:
        raise fail("super_pod_list is not a non-empty list")
    known = {s.server_id for s in servers}
    pod_of: dict[str, str] = {}
    for i, pod in enumerate(doc):
        if not isinstance(pod, dict) or not isinstance(pod.get("super_pod_id"), str) \
                or not isinstance(pod.get("server_list"), list):
            raise fail(f"super_pod_list[{i}]: expected an object with super_pod_id (string) and server_list")
        pid = pod["super_pod_id"]
        if pid in pod_of.values():
            raise fail(f"super_pod_id {pid} listed twice in super_pod_list")
        for entry in pod["server_list"]:
            sid = entry.get("server_id") if isinstance(entry, dict) else None
            if sid not in known:
                raise fail(f"super_pod_list[{i}] (super_pod_id {pid}): server_id {sid!r} is not in server_list")
            if sid in pod_of:
                raise fail(f"server {sid} is in SuperPoD {pod_of[sid]} and in SuperPoD {pid}")
            pod_of[sid] = pid
    out = []
    sdid: dict[tuple[str, int], str] = {}
    for s in servers:
        if s.server_id not in pod_of:
            raise fail(f"server {s.server_id} is in no super_pod_list entry")
        pid = pod_of[s.server_id]
        for d in s.devices:
            key = (pid, d.super_device_id)  # type: ignore[arg-type]
            where = f"server {s.server_id} device {d.device_id}"
            if key in sdid:
                raise fail(f"super_device_id {d.super_device_id} repeated in SuperPoD {pid} ({sdid[key]} and "
                           f"{where}); HCCL EI0014")
            sdid[key] = where
        out.append(Server(s.server_id, s.devices, s.host_ip, pid))
    return out
