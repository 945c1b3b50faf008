"""Host-key verification: known_hosts read once per file, strict by default (docs/SPEC.md §2.6).

`strict` rejects unknown and changed keys; `accept-new` records unknown keys (atomically, mode kept)
and still rejects changed ones; `off` accepts anything and is only used when asked for.
"""
from __future__ import annotations

import base64
import hashlib
import itertools
import os
import re
import stat
import threading
from hashlib import sha1 as _sha1
from pathlib import Path
from typing import Any

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


def _pads(salt: bytes) -> tuple[Any, Any]:
    """HMAC-SHA1's inner and outer hash states for key `salt` (RFC 2104), before any message."""
    k = salt if len(salt) <= 64 else hashlib.sha1(salt).digest()
    k = k.ljust(64, b"\0")
    return _sha1(bytes(b ^ 0x36 for b in k)), _sha1(bytes(b ^ 0x5C for b in k))


class _Key:
    """A known_hosts key as its line gave it, decoded on first use (None: a line paramiko refuses)."""

    __slots__ = ("type", "blob", "_pkey")

    def __init__(self, key_type: str, blob: str, pkey: "paramiko.PKey | None" = None):
        self.type, self.blob, self._pkey = key_type, blob, pkey

    @classmethod
    def of(cls, pkey: paramiko.PKey) -> "_Key":
        return cls(pkey.get_name(), pkey.get_base64(), pkey)

    def decoded(self) -> "paramiko.PKey | None":
        if self._pkey is None and self.blob:
            try:
                entry = paramiko.hostkeys.HostKeyEntry.from_line(f"x {self.type} {self.blob}")
                self._pkey = entry.key if entry is not None else None
            except (paramiko.SSHException, paramiko.hostkeys.InvalidHostKey, ValueError, TypeError):
                self._pkey = None
            if self._pkey is None:
                self.blob = ""  # refused once: not tried again
        return self._pkey


class KnownHosts:
    """One parsed known_hosts file (plus the system file), shared by every node that uses it.

    Indexed by host, not searched: paramiko's HostKeys scans every line per lookup (an HMAC in
    Python per hashed line, `HashKnownHosts yes`) and checks every line against all the others as
    it loads, so a 1,000-node file cost a million comparisons. Same answers: exact names and
    hashed names match, marker lines (@cert-authority, @revoked) are ignored as paramiko ignores
    them, and for a key type listed twice the first line wins.

    A hashed name can only be matched by HMAC-SHA1 with its own line's salt, so a lookup costs
    one HMAC per hashed line, whatever the index. Each salt's inner and outer SHA-1 states are
    computed once at load (HMAC = H(K^opad || H(K^ipad || name))): a lookup then copies and
    finishes two states per line. A line's key is decoded only when a lookup finds it (a file
    of 100,000 lines decoded every key at load). bench/known_hosts_lookup.py, 100,000 hashed
    lines: a lookup 174 -> 79 ms CPU (hmac.new per line before; OpenSSL's one-shot hmac.digest was
    no faster), load about the same (1.2 s), peak RSS 93 -> 126 MB (two hash states a line)."""

    _cache: dict[str, "KnownHosts"] = {}
    _cache_lock = threading.Lock()

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._plain: dict[str, list[tuple[int, _Key]]] = {}
        self._hashed: list[tuple[Any, Any, bytes, int, _Key]] = []  # inner, outer SHA-1 state, HMAC, order, key
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
        """paramiko's HostKeyEntry.from_line split (names, type, base64 key), the key decoded later."""
        if not line or line.startswith("#"):
            return
        fields = [f for f in re.split(" |\t", line) if f]
        if len(fields) < 3 or fields[0].startswith("@"):
            return
        key = _Key(fields[1], fields[2])
        for name in fields[0].split(","):
            self._add(name, key)

    def _add(self, name: str, key: "_Key | paramiko.PKey") -> None:
        order = next(self._order)
        key = key if isinstance(key, _Key) else _Key.of(key)
        if name.startswith("|1|"):
            try:
                _, _, salt, digest = name.split("|", 3)
                inner, outer = _pads(base64.b64decode(salt))
                self._hashed.append((inner, outer, base64.b64decode(digest), order, key))
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
            for inner, outer, digest, order, key in self._hashed:  # written out: 1 us a line is the cost
                h = inner.copy()
                h.update(raw)
                o = outer.copy()
                o.update(h.digest())
                if o.digest() == digest:
                    hits.append((order, key))
            found = {}
            for _, key in sorted(hits, key=lambda h: h[0]):
                pkey = key.decoded()
                if pkey is not None:  # a broken line must not make every host unknown
                    found.setdefault(pkey.get_name(), pkey)
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
