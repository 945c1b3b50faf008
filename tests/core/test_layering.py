"""Who may import whom (docs/ARCHITECTURE.md, "Rules"): a check never imports another check (it
declares USES and receives their facts), and job/ reaches checks only through the registry."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    """Every module an import statement in `path` names, relative ones as written (`.x`, `..checks`)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            out.add(base)
            out.update(base + a.name if base.endswith(".") else f"{base}.{a.name}" for a in node.names)
    return out


def _names_a_check(imported: set[str], relative_checks: tuple[str, ...]) -> list[str]:
    return sorted(m for m in imported if m.startswith(("preflight.checks", "checks.", *relative_checks))
                  or m == "checks")


KNOWN: dict[str, list[str]] = {}  # none: smoke.allreduce reads env.comm's facts (USES), not its verdict (issue 31)


def test_no_check_imports_another_check():
    bad = {p.name: hits for p in sorted((ROOT / "checks").glob("*.py"))
           if (hits := _names_a_check(_imports(p), (".",)) + [m for m in _imports(p) if m.startswith("preflight.job")])}
    assert bad == KNOWN


def test_job_reaches_checks_only_through_the_registry():
    bad = {p.name: hits for p in sorted((ROOT / "preflight" / "job").glob("*.py"))
           if (hits := _names_a_check(_imports(p), ("..checks",)))}
    assert bad == {}
