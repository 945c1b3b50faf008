"""A RoCE port's netdev and that netdev's state: parsers of the ROCE_NETDEVS probe's sections.

A RoCE port (ibstat `Link layer: Ethernet`) carries RDMA over an Ethernet netdev; its ibstat
State follows the RDMA port, and the netdev (the cable, the switch port, `ip link set down`) is
where the link is judged. The netdev of a port comes from, in this order:

* sysfs (kernel Documentation/ABI/stable/sysfs-class-infiniband):
  `/sys/class/infiniband/<hca>/ports/<port>/gid_attrs/ndevs/<gid-index>` holds "the net-device's
  name associated with the GID" (index 0 is the port's default GID, always its own netdev); else
  `/sys/class/infiniband/<hca>/device/net/<if>` (the netdevs of the HCA's PCI function, the one whose
  `dev_port` is port - 1). The probe prints one `<ca> <port> <netdev or ->` line per Ethernet port.
* `ibdev2netdev` (MLNX_OFED): `mlx5_1 port 1 ==> ens12f0np0 (Up)` lines (samples:
  tests/fixtures/nvidia/ibdev2netdev__*); the `(Up)` is not used, the netdev's own files are.

The netdev: `/sys/class/net/<if>/operstate` (`up`, `down`, `lowerlayerdown`, ... RFC 2863 words,
kernel Documentation/networking/operstates.rst), `carrier` (1/0; unreadable, EINVAL, while the
interface is administratively down) and `speed` (Mb/s; -1 or unreadable without link).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..checkapi import ParseError


@dataclass(frozen=True)
class Netdev:
    name: str
    present: bool
    operstate: str | None = None
    carrier: int | None = None
    speed_mbps: int | None = None

    @property
    def up(self) -> bool:
        return self.present and self.operstate == "up" and self.carrier != 0

    @property
    def speed_gbps(self) -> float | None:
        return self.speed_mbps / 1000 if self.speed_mbps and self.speed_mbps > 0 else None

    def state_text(self) -> str:
        if not self.present:
            return "missing (no /sys/class/net entry)"
        text = self.operstate or "state unreadable"
        return text + (" (no carrier)" if self.carrier == 0 and text != "down" else "")


@dataclass(frozen=True)
class RoceMap:
    """(ca, port) -> netdev name, with where each came from; netdev name -> its state."""
    ports: dict[tuple[str, int], tuple[str, str]] = field(default_factory=dict)  # -> (netdev, source)
    netdevs: dict[str, Netdev] = field(default_factory=dict)

    def netdev_of(self, ca: str, port: int) -> tuple[Netdev | None, str | None]:
        """(the port's netdev state, source) or (None, None) when no source named one."""
        hit = self.ports.get((ca, port))
        if hit is None:
            return None, None
        name, source = hit
        return self.netdevs.get(name, Netdev(name, False)), source


_IBDEV2NETDEV = re.compile(r"^(\S+) port (\d+) ==> (\S+) \((\w+)\)\s*$")


def parse_ibdev2netdev(text: str) -> dict[tuple[str, int], str]:
    """`mlx5_1 port 1 ==> ens12f0np0 (Up)` lines -> {("mlx5_1", 1): "ens12f0np0"}."""
    out = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _IBDEV2NETDEV.match(line.strip())
        if not m:
            raise ParseError(f"ibdev2netdev: unreadable line {line.strip()!r}", text)
        out[(m.group(1), int(m.group(2)))] = m.group(3)
    return out


def parse_sysfs_map(text: str) -> dict[tuple[str, int], str]:
    """The probe's `<ca> <port> <netdev|->` lines (from gid_attrs/ndevs/0 or device/net)."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 3 or not parts[1].isdigit():
            raise ParseError(f"RoCE netdev map: unreadable line {line.strip()!r}", text)
        if parts[2] != "-":
            out[(parts[0], int(parts[1]))] = parts[2]
    return out


def _int(value: str) -> int | None:
    value = value.strip()
    return int(value) if re.fullmatch(r"-?\d+", value) else None


def parse_netdev(name: str, body: str) -> Netdev:
    """`operstate: up` / `carrier: 1` / `speed: 100000` lines (an empty value: the file was unreadable)."""
    f = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in body.splitlines()) if k.strip()}
    return Netdev(name, True, f.get("operstate") or None, _int(f.get("carrier", "")), _int(f.get("speed", "")))


def read_probe(stdout: str) -> RoceMap:
    """The ROCE_NETDEVS probe (preflight/nvidia/probes.py): `@@map sysfs` and/or `@@map ibdev2netdev`
    sections, then one `@@net <if>` (or `@@net <if> missing`) section per netdev named. sysfs wins
    where both name a port."""
    sections = re.split(r"^@@", stdout, flags=re.M)
    if sections[0].strip():
        raise ParseError("RoCE netdev probe: unexpected output", stdout)
    sysfs: dict[tuple[str, int], str] = {}
    tool: dict[tuple[str, int], str] = {}
    netdevs: dict[str, Netdev] = {}
    for sec in sections[1:]:
        head, _, body = sec.partition("\n")
        words = head.split()
        if words[:2] == ["map", "sysfs"]:
            sysfs.update(parse_sysfs_map(body))
        elif words[:2] == ["map", "ibdev2netdev"]:
            tool.update(parse_ibdev2netdev(body))
        elif len(words) >= 2 and words[0] == "net":
            netdevs[words[1]] = Netdev(words[1], False) if words[2:] == ["missing"] else parse_netdev(words[1], body)
        else:
            raise ParseError(f"RoCE netdev probe: unexpected section @@{head.strip()}", stdout)
    ports = {k: (v, "ibdev2netdev") for k, v in tool.items()}
    ports.update({k: (v, "sysfs") for k, v in sysfs.items()})
    return RoceMap(ports, netdevs)
