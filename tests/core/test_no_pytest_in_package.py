"""The package is what users install: it never imports pytest (the test bed's pytest plugin lives
with the tests, tests/simfixtures.py). Read from the source itself, every module under preflight/
(the checks through its `checks` link), imports inside functions included."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "preflight"


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_nothing_under_preflight_imports_pytest() -> None:
    files = [p for p in PACKAGE.rglob("*.py")] + list((PACKAGE / "checks").resolve().rglob("*.py"))
    assert len(files) > 100  # the walk found the package (and the checks behind the link)
    offenders = sorted(str(p.relative_to(PACKAGE.parent)) for p in files
                       if imported(p) & {"pytest", "_pytest"})
    assert offenders == []
