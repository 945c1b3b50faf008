"""Write the inventory (docs/SPEC.md format) and known_hosts for a running simulated cluster."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def write_inventory(path: Path, cluster: str, defaults: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
    doc = {"cluster": cluster, "defaults": defaults, "nodes": nodes}
    text = "# Written by `preflight sim up`; describes the simulated cluster in this directory.\n"
    text += yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def known_hosts_line(host: str, port: int, public: str) -> str:
    target = host if port == 22 else f"[{host}]:{port}"
    return f"{target} {public}"
