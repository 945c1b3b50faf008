"""Host-key verification: known_hosts read once per file, strict by default (docs/SPEC.md §2.6).

`strict` rejects unknown and changed keys; `accept-new` records unknown keys (atomically, mode kept)
and still rejects changed ones; `off` accepts anything and is only used when asked for.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import os
import stat
import threading
from pathlib import Path

import paramiko

from ..atomic import write_atomic
from ..safefile import make_dirs

SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"


class HostKeyRejected(Exception):
    """The reason, in words a user can act on (fingerprint and the command to run)."""


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's `SHA256:...` form, so users can compare it with `ssh-keygen -lf`."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def host_id(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class KnownHosts:
    """One parsed known_hosts file (plus the system file), shared by every node that uses it.

    Indexed by host, not searched: paramiko's HostKeys scans every line per lookup (an HMAC in
    Python per hashed line, `HashKnownHosts yes`) and checks every line against all the others as
    it loads, so a 1,000-node file cost a million comparisons. Same answers: exact names and
    hashed names match, marker lines (@cert-authority, @revoked) are ignored as paramiko ignores
    them, and for a key type listed twice the first line wins."""

    _cache: dict[str, "KnownHosts"] = {}
    _cache_lock = threading.Lock()

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._plain: dict[str, list[tuple[int, paramiko.PKey]]] = {}
        self._hashed: list[tuple[bytes, bytes, int, paramiko.PKey]] = []  # salt, HMAC-SHA1, line order, key
        self._seen: dict[str, dict[str, paramiko.PKey]] = {}  # lookups, forgotten when a key is added
        self._order = itertools.count()
        for p in (SYSTEM_KNOWN_HOSTS, path):
            if os.path.isfile(p):
                try:
                    with open(p, encoding="utf-8", errors="replace") as f:
                        for lineno, line in enumerate(f, 1):
                            self._add_line(line.strip(), lineno)
                except OSError:
                    pass  # unreadable: every host is unknown, and strict says so per node

    def _add_line(self, line: str, lineno: int) -> None:
        if not line or line.startswith("#"):
            return
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line, lineno)
        except (paramiko.SSHException, paramiko.hostkeys.InvalidHostKey, ValueError):
            return  # one broken line must not make every host unknown
        if entry is not None and entry.key is not None:
            for name in entry.hostnames:
                self._add(name, entry.key)

    def _add(self, name: str, key: paramiko.PKey) -> None:
        order = next(self._order)
        if name.startswith("|1|"):
            try:
                _, _, salt, digest = name.split("|", 3)
                self._hashed.append((base64.b64decode(salt), base64.b64decode(digest), order, key))
            except ValueError:
                return
        else:
            self._plain.setdefault(name, []).append((order, key))
        self._seen.clear()

    def lookup(self, name: str) -> dict[str, paramiko.PKey]:
        """{key type: key} known for `name` (host or [host]:port), in file order, first line winning."""
        found = self._seen.get(name)
        if found is None:
            raw = name.encode()
            hits = list(self._plain.get(name, ()))
            hits += [(order, key) for salt, digest, order, key in self._hashed
                     if hmac.compare_digest(hmac.new(salt, raw, hashlib.sha1).digest(), digest)]
            found = {}
            for _, key in sorted(hits, key=lambda h: h[0]):
                found.setdefault(key.get_name(), key)
            self._seen[name] = found
        return found

    @classmethod
    def get(cls, path: str | None) -> "KnownHosts":
        path = os.path.expanduser(path or "~/.ssh/known_hosts")
        with cls._cache_lock:
            if path not in cls._cache:
                cls._cache[path] = cls(path)
            return cls._cache[path]

    @classmethod
    def forget_all(cls) -> None:
        with cls._cache_lock:
            cls._cache.clear()

    def key_types(self, host: str, port: int) -> list[str]:
        """Types known for a host, so the server offers the key we can verify (as OpenSSH does)."""
        return list(self.lookup(host_id(host, port)))

    def verify(self, host: str, port: int, key: paramiko.PKey, policy: str) -> None:
        if policy == "off":
            return
        name = host_id(host, port)
        fp = fingerprint(key)
        entry = self.lookup(name)
        if key.get_name() in entry:
            if entry[key.get_name()] == key:
                return
            raise HostKeyRejected(
                f"host key for {name} CHANGED ({key.get_name()} {fp} does not match {self.path}); "
                f"possible man-in-the-middle. If the node was reinstalled, remove the old key: "
                f"ssh-keygen -R '{name}' -f {self.path}")
        if policy == "accept-new":
            self._append(name, key)
            return
        known = f" (known types: {', '.join(entry.keys())})" if entry else ""
        raise HostKeyRejected(
            f"unknown host key for {name}: {key.get_name()} {fp}{known}; verify it, then trust it: "
            f"ssh-keyscan -p {port} -t {key.get_name()} {host} >> {self.path}  "
            f"(or run with host_key_policy: accept-new)")

    def _append(self, name: str, key: paramiko.PKey) -> None:
        """Add a line without ever leaving a half-written file (temp file + rename, mode kept).

        Never replaces what is not a regular file: `UserKnownHostsFile /dev/null` (a common
        ssh_config line) means "remember nothing", so the key is trusted for this run only, as
        OpenSSH does; a FIFO or another device is left alone too. A symlink stays a link: its
        existing target gets the line (a dangling link is left alone); the target's directory
        must be one others cannot change (write_atomic)."""
        with self._lock:
            self._add(name, key)
            p = Path(os.path.realpath(self.path))
            try:
                st = os.stat(p)
            except FileNotFoundError:
                st = None
            if (st is None and os.path.islink(self.path)) or (st is not None and not stat.S_ISREG(st.st_mode)):
                return  # a dangling link's target is never created
            make_dirs(p.parent)
            old = p.read_bytes() if st is not None else b""
            if old and not old.endswith(b"\n"):
                old += b"\n"
            line = f"{name} {key.get_name()} {key.get_base64()}\n".encode()
            write_atomic(p, old + line, mode=stat.S_IMODE(st.st_mode) if st is not None else 0o600)
