"""Every document the code and tests point a reader at exists in the repository.

A reference is a Markdown file name in a source file: `docs/SPEC.md`, `docs/FORMATS.md §1.4`,
`docs/FAILURES.md rows 4, 17-21`, `README.md`. The project's own documents live in docs/ and are
named with that prefix (README.md is the repository root's); a bare `SPEC.md` is a dead end for
whoever reads the comment in a checkout, so it fails here too. A `§N.M` (or `§D.2`) reference
needs a heading with that number in the target document, and `FAILURES.md rows N` needs row N
of the failure catalogue.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SCANNED_DIRS = ("preflight", "checks", "tests", "bench")
EXTRA_FILES = ("README.md", "inventory.example.yaml")
EXTRA_GLOBS = ("examples/*.yaml", "preflight/sim/tools/*")

# A document name (optionally with docs/), then an optional section or row list.
REF = re.compile(
    r"(?<![\w.\-/])(?P<path>(?:docs/)?[A-Z][A-Z0-9_]*\.md)"
    r"(?:\s+§(?P<sec>[A-Z0-9]+(?:\.[0-9]+)*)(?:\s*[-–]\s*(?P<sec_end>[A-Z0-9]+(?:\.[0-9]+)*))?"
    r"|\s+rows?\s+(?P<rows>\d+(?:\s*(?:,|-|–|and)\s*\d+)*))?")
HEADING = re.compile(r"^#+\s+§?(?P<num>[A-Z0-9]+(?:\.[0-9]+)*)\.?\s")
ROW = re.compile(r"^\|\s*(?P<num>\d+)\s*\|")
FORBIDDEN = re.compile(r"\.\./shared|shared/docs|shared/fixtures")


def _sources() -> list[Path]:
    files = [p for d in SCANNED_DIRS for p in sorted((ROOT / d).rglob("*.py"))]
    files += [ROOT / f for f in EXTRA_FILES if (ROOT / f).is_file()]
    files += [p for g in EXTRA_GLOBS for p in sorted(ROOT.glob(g)) if p.is_file()]
    return [p for p in files if "__pycache__" not in p.parts]


def references() -> list[tuple[str, int, re.Match]]:
    found = []
    for path in _sources():
        if path == Path(__file__).resolve():
            continue  # its own examples below are bad on purpose
        text = path.read_text(encoding="utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            for m in REF.finditer(line):
                found.append((f"{path.relative_to(ROOT)}:{lineno}", lineno, m))
    return found


def _target(name: str) -> Path:
    return ROOT / name if name == "README.md" or name.startswith("docs/") else DOCS / name


def _headings(doc: Path) -> set[str]:
    return {m.group("num") for line in doc.read_text(encoding="utf-8").splitlines() if (m := HEADING.match(line))}


def _rows(doc: Path) -> set[int]:
    return {int(m.group("num")) for line in doc.read_text(encoding="utf-8").splitlines() if (m := ROW.match(line))}


def _numbers(spec: str) -> set[int]:
    out: set[int] = set()
    for part in re.split(r"\s*(?:,|and)\s*", spec.strip()):
        lo, _, hi = re.sub(r"\s*[-–]\s*", "-", part).partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def problems() -> list[str]:
    bad = []
    for where, _, m in references():
        name = m.group("path")
        if name != "README.md" and not name.startswith("docs/"):
            bad.append(f"{where}: {name}: write docs/{name} (the project's documents live in docs/)")
            continue
        doc = _target(name)
        if not doc.is_file():
            bad.append(f"{where}: {name} does not exist")
            continue
        for sec in filter(None, (m.group("sec"), m.group("sec_end"))):
            if sec not in _headings(doc):
                bad.append(f"{where}: {name} has no section §{sec}")
        if m.group("rows"):
            missing = sorted(_numbers(m.group("rows")) - _rows(doc))
            if missing:
                bad.append(f"{where}: {name} has no row(s) {', '.join(map(str, missing))}")
    return bad


def test_the_scan_finds_references():
    # A regex that matched nothing would make the real test pass vacuously.
    assert len(references()) > 50


def test_every_document_reference_names_an_existing_document_and_section():
    bad = problems()
    assert not bad, "dead document references:\n" + "\n".join(bad)


def test_the_docs_stand_alone():
    """Nothing in the project reads or points at documents outside the repository."""
    hits = []
    for path in _sources() + sorted(DOCS.rglob("*.md")):
        for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if FORBIDDEN.search(line) and path != Path(__file__).resolve():
                hits.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()[:120]}")
    assert not hits, "references outside the repository:\n" + "\n".join(hits)


@pytest.mark.parametrize("text, ok", [
    ("see docs/FORMATS.md §1.4", True),
    ("see FORMATS.md §1.4", False),            # bare name: not where the file is
    ("see docs/FORMATS.md §99.9", False),      # no such section
    ("see docs/%s.md" % "MISSING_ON_PURPOSE", False),  # a document the repository does not hold
    ("see docs/FAILURES.md rows 1, 2, 23", True),
    ("see docs/FAILURES.md rows 999", False),
])
def test_the_checker_itself(text, ok, tmp_path, monkeypatch):
    src = tmp_path / "tests" / "x.py"
    src.parent.mkdir()
    src.write_text(f"# {text}\n")
    (tmp_path / "docs").mkdir()
    for name in ("FORMATS.md", "FAILURES.md"):
        (tmp_path / "docs" / name).write_text((DOCS / name).read_text(encoding="utf-8") if (DOCS / name).is_file()
                                              else "## 1.4 x\n| 1 | a |\n| 2 | b |\n| 23 | c |\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "DOCS", tmp_path / "docs")
    assert (not problems()) is ok
