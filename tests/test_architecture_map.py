"""docs/ARCHITECTURE.md's Layout is the map a newcomer reads first: every top-level module and
every package under preflight/ must be on it (a module added without a line there fails here)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def layout() -> str:
    text = (ROOT / "docs/ARCHITECTURE.md").read_text()
    return text.split("## Layout", 1)[1].split("\n## ", 1)[0]


def test_every_top_level_module_and_package_is_on_the_map():
    block = layout()
    missing = []
    for p in sorted((ROOT / "preflight").iterdir()):
        if p.name.startswith((".", "_")) or p.name == "checks":  # checks/ is the repository's own folder
            continue
        if p.is_dir() and ((p / "__init__.py").exists() or p.name == "data"):
            if not re.search(rf"(^|\s){re.escape(p.name)}/", block, re.M):
                missing.append(p.name + "/")
        elif p.suffix == ".py" and not re.search(rf"(^|\s){re.escape(p.name)}(\s|$)", block, re.M):
            missing.append(p.name)
    assert not missing, f"not on docs/ARCHITECTURE.md's map: {missing}"
