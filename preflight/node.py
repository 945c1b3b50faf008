"""One inventory node after defaults, ranges and overrides are applied: what checks and transports see."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .container import Container
# OpenSSH's ProxyJump hop, [user@]host[:port]; an IPv6 address in brackets ([fd00::1]:2222).
_HOP_RE = re.compile(r"^(?:(?P<user>[^@\s,]+)@)?(?P<host>\[[0-9A-Fa-f:.%]+\]|[A-Za-z0-9._%\-]+)(?::(?P<port>[^:]*))?$")


@dataclass(frozen=True)
class JumpHop:
    user: str | None
    host: str
    port: int = 22
    port_given: bool = field(default=False, compare=False)  # written in the spec (beats ssh_config's Port)
    identity_file: str | None = None  # from ssh_config's IdentityFile for the hop; None: the node's


def parse_jump(spec: str) -> tuple[JumpHop, ...]:
    """`[user@]host[:port][,...]` -> hops. Raises ValueError naming the bad hop, so a malformed
    proxy_jump is an inventory error at load and never an exception in a node's worker."""
    hops = []
    for part in spec.split(","):
        m = _HOP_RE.match(part.strip())
        if not m:
            raise ValueError(f"{part.strip()!r} is not a jump host ([user@]host[:port])")
        port = m["port"]
        if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(f"{part.strip()!r}: port {port!r} is not a number from 1 to 65535")
        hops.append(JumpHop(m["user"], m["host"].strip("[]"), int(port) if port else 22, port_given=bool(port)))
    return tuple(hops)


@dataclass(frozen=True)
class Node:
    name: str
    host: str
    port: int = 22
    user: str | None = None  # None: ~/.ssh/config, then the current user
    identity_file: str | None = None
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts (and /etc/ssh/ssh_known_hosts)
    host_key_policy: str = "strict"  # strict | accept-new | off
    connect_timeout: float = 10.0
    banner_timeout: float = 10.0
    auth_timeout: float = 10.0
    probe_timeout: float = 60.0
    proxy_jump: str | None = None
    jump_hops: tuple[JumpHop, ...] = ()  # proxy_jump's hops resolved through ssh_config at load
    become: str | None = None  # "sudo": probes that need root run under `sudo -n`; None: never
    become_user: str = "root"
    container: Container | None = None  # the job's container: job-side checks look inside it
    identities_only: bool = False  # ssh_config IdentitiesOnly yes: offer no agent key but the identity's own
    backend: str = "auto"  # ascend | nvidia | auto
    devices: int = 8  # logical devices (chips) expected; 16 on an A3 node
    ascend_home: str = "/usr/local/Ascend"
    env: dict[str, str] = field(default_factory=dict)
    env_files: tuple[str, ...] = ()
    paths: dict[str, Any] = field(default_factory=dict)  # data: [..], checkpoint: str
    python: str = "python3"
    launch_shell: str = "exec"  # exec | login
    params: dict[str, dict[str, Any]] = field(default_factory=dict)  # per-check parameters
    source_line: int | None = None  # inventory line of the entry, for messages

    @property
    def hccn_tool(self) -> str:
        return f"{self.ascend_home.rstrip('/')}/driver/tools/hccn_tool"

    @property
    def data_paths(self) -> list[str]:
        data = self.paths.get("data") or []
        return [data] if isinstance(data, str) else list(data)

    @property
    def checkpoint_path(self) -> str | None:
        return self.paths.get("checkpoint")

    def check_params(self, check_id: str, defaults: dict[str, Any]) -> dict[str, Any]:
        merged = dict(defaults)
        merged.update(self.params.get(check_id, {}))
        return merged
