"""Which interfaces HCCL_SOCKET_IFNAME / NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME select (docs/ENV.md §A.2).

HCCL and NCCL share one syntax: a comma list of name *prefixes*; a leading `^` excludes the list, a
leading `=` makes the names exact, `^=` excludes exact names (`HCCL_SOCKET_IFNAME==eth0,endvnic`, the
double `=` is the variable's own `=` plus the exact marker). NCCL never picks loopback unless it is
named explicitly. Gloo takes exact names only; `^lo` there is not an exclusion but an interface
called "^lo" that Gloo cannot find (`Unable to find address for: ^lo`, aws-do-eks PR #51).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .iproute import Interface


@dataclass(frozen=True)
class IfSpec:
    names: tuple[str, ...]
    exclude: bool = False
    exact: bool = False

    def matches(self, name: str) -> bool:
        hit = any(name == n if self.exact else name.startswith(n) for n in self.names)
        return hit != self.exclude

    def names_loopback(self) -> bool:
        """NCCL picks loopback only when it is named: `lo`, or a prefix of it in prefix mode."""
        return not self.exclude and any(n == "lo" or (not self.exact and "lo".startswith(n)) for n in self.names)


def parse_prefix_list(value: str) -> IfSpec:
    """HCCL/NCCL syntax: `eth,enp` | `^eth` | `=eth0` | `^=docker0`."""
    value = value.strip()
    exclude = value.startswith("^")
    value = value[1:] if exclude else value
    exact = value.startswith("=")
    value = value[1:] if exact else value
    return IfSpec(tuple(n.strip() for n in value.split(",") if n.strip()), exclude, exact)


def gloo_names(value: str) -> tuple[list[str], list[str]]:
    """Gloo: exact names, comma separated -> (names, syntax errors). `^`/`=` are not Gloo syntax."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    bad = [n for n in names if n[0] in "^=" or any(c in n for c in " *?")]
    return names, bad


def select(spec: IfSpec, interfaces: Iterable[Interface], skip_loopback: bool = True) -> list[Interface]:
    """Interfaces the spec picks, in the node's interface order. Loopback only when named."""
    keep_lo = not skip_loopback or spec.names_loopback()
    return [i for i in interfaces if spec.matches(i.name) and (keep_lo or not i.loopback)]


def usable(interfaces: Iterable[Interface], family: str = "inet") -> list[Interface]:
    """UP interfaces with an address of the family: what a communication library can bind to."""
    return [i for i in interfaces if i.up and i.addresses(family)]


def hccl_default(interfaces: Iterable[Interface], family: str = "inet") -> list[Interface]:
    """HCCL's order when neither HCCL_IF_IP nor HCCL_SOCKET_IFNAME is set: "docker/lo以外网卡（网卡名
    字典序升序） > docker网卡 > lo网卡" (non-docker non-lo NICs by name, then docker, then lo)."""
    def rank(i: Interface) -> tuple[int, str]:
        return (2 if i.loopback else 1 if i.name.startswith("docker") else 0, i.name)

    return sorted(usable(interfaces, family), key=rank)
