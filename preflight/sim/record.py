"""The cluster record: a JSON file listing everything one bring-up made, so tear-down (even by
another process, even after a crash) removes exactly that and nothing else."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

RECORD = "record.json"
DEFAULT_DIR = "/tmp/preflight-sim"


def default_dir() -> Path:
    return Path(os.environ.get("PREFLIGHT_SIM_DIR") or DEFAULT_DIR)


def directory(given: "str | os.PathLike[str] | None", create: bool = False) -> Path:
    """The cluster directory, resolved, once it is known to be only ours: root tears down what its
    record lists, so a directory (or a link) another user prepared at the default /tmp name must
    never be read or written (safefile.private_dir; `create` makes a missing one 0700)."""
    from ..safefile import UnsafePath, private_dir
    from .procs import SimError
    p = Path(given or default_dir())
    if create or os.path.lexists(p):
        try:
            private_dir(p)
        except UnsafePath as exc:
            raise SimError(f"cluster directory {exc}") from None
    return p.resolve()


def tag_for(directory: Path) -> str:
    """4 hex chars from the directory: names of two clusters in two dirs never collide."""
    return hashlib.sha1(str(directory.resolve()).encode()).hexdigest()[:4]


def load(directory: Path) -> dict[str, Any] | None:
    from ..safefile import UnsafePath, trusted_read
    from .procs import SimError
    try:
        if os.path.islink(directory / RECORD):
            raise UnsafePath(directory / RECORD, "a link is refused")
        text = trusted_read(directory / RECORD, "cluster record (root removes what it lists)")
        return None if text is None else json.loads(text)
    except UnsafePath as exc:
        raise SimError(str(exc)) from None
    except ValueError:
        return {"corrupt": True}


def save(directory: Path, record: dict[str, Any]) -> None:
    tmp = directory / f".{RECORD}.tmp"
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, directory / RECORD)


def empty(directory: Path, mode: str) -> dict[str, Any]:
    return {"version": 1, "dir": str(directory.resolve()), "tag": tag_for(directory), "mode": mode,
            "status": "starting", "host_dirs": [], "namespaces": [], "links": [], "procs": [],
            "nodes": [], "applied_net": {}, "ns_mounts": "per node, inside its mount namespace only"}
