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


def tag_for(directory: Path) -> str:
    """4 hex chars from the directory: names of two clusters in two dirs never collide."""
    return hashlib.sha1(str(directory.resolve()).encode()).hexdigest()[:4]


def load(directory: Path) -> dict[str, Any] | None:
    try:
        return json.loads((directory / RECORD).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
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
