"""What produced a report: the effective configuration of the run, so that two reports can be
compared and a run repeated (docs/SPEC.md §5, `config`).

Why a digest per check: a check's verdict is its code's, and the package version does not move
when a check module, or a parser or data file it uses, is patched in place; the first 16 hex
digits of the sha256 over each selected check's code (its module, the preflight modules it imports,
preflight's data files) tell two reports apart that the version would not. Settings from config files and
PREFLIGHT_* variables are listed with where they came from, after redaction by name (the rule of
preflight/redact.py), so a report never carries a secret a setting held.
"""
from __future__ import annotations

import ast
import hashlib
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from . import redact
from .registry import module_name


_ROOT = Path(__file__).resolve().parent  # the preflight package (its checks/ a link to the top-level folder)


def _origin(name: str) -> str | None:
    """The source file of preflight module `name`, found by path (nothing is imported)."""
    parts = name.split(".")
    if parts[0] != "preflight":
        return None
    base = _ROOT.joinpath(*parts[1:])
    for path in (base / "__init__.py", base.with_suffix(".py") if len(parts) > 1 else None):
        if path is not None and path.is_file():
            return str(_ROOT.joinpath(path.relative_to(_ROOT)))
    return None


_PARSED: dict[tuple[str, str, int, int], frozenset[str]] = {}


def _imported(name: str, path: str) -> frozenset[str]:
    """The preflight modules `name` (source at `path`) imports anywhere in its body, with the
    packages they sit in (importing a.b runs a/__init__.py too); parsed once per file version."""
    st = os.stat(path)
    key = (name, path, st.st_mtime_ns, st.st_size)
    if key not in _PARSED:
        _PARSED[key] = frozenset(_parse_imports(name, path))
    return _PARSED[key]


# An import statement at the start of a line: `from .x import (a,\n b)`, `import a.b as c, d`. A
# line of a docstring that reads like one only adds a file to a digest; the test holds this reading
# to ast's on every module of the package.
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]*)|import[ \t]+([^\n#;]*))",
                     re.M)


def _parse_imports(name: str, path: str) -> set[str]:
    """The preflight modules (and their packages) the source at `path` imports. Read with a
    pattern, not ast: ast.parse of every module a run's checks import cost 0.4 s a run, a third of
    the prolog gate's CPU (bench/gate_cost.py); `_parse_imports_ast` is the reading it stands for."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    found: set[str] = set()
    for m in _IMPORT.finditer(text):
        dots, module, names, plain = m.groups()
        if plain is not None:
            found.update(part.split()[0] for part in plain.split(",") if part.split())
            continue
        base = _absolute(package, len(dots), module)
        found.add(base)
        found.update(f"{base}.{part.split()[0]}" for part in names.strip("()").replace("\\", " ").split(",")
                     if part.split())
    return _preflight_only(found)


def _parse_imports_ast(name: str, path: str) -> set[str]:
    """The plain reading _parse_imports stands for (tests/core/test_provenance.py compares them)."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), path)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(package, node.level, node.module or "")
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import module`
    return _preflight_only(found)


def _absolute(package: str, level: int, module: str) -> str:
    if not level:
        return module
    parts = package.split(".")
    parts = parts[:len(parts) - (level - 1)] if level > 1 else parts
    return ".".join(parts + ([module] if module else []))


def _preflight_only(found: set[str]) -> set[str]:
    out: set[str] = set()
    for mod in found:
        if mod == "preflight" or mod.startswith("preflight."):
            parts = mod.split(".")
            out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return out


def check_sources(check_id: str) -> list[str] | None:
    """The files a check's verdict comes from: its module, every preflight module it imports
    (transitively: the parsers, the helpers) and preflight's data files (read by name at run time);
    sorted paths, None where the check's module cannot be found."""
    start = f"preflight.checks.{module_name(check_id)}"
    if _origin(start) is None:
        return None
    seen: dict[str, str] = {}
    parts = start.split(".")
    todo = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    while todo:
        name = todo.pop()
        if name in seen or (path := _origin(name)) is None:
            continue
        seen[name] = path
        try:
            todo += sorted(_imported(name, path) - set(seen))
        except (OSError, SyntaxError, ValueError):
            continue
    files = set(seen.values())
    files.update(str(p) for p in sorted((_ROOT / "data").glob("*")) if p.is_file())
    return sorted(files, key=lambda p: _relative(p))


def _relative(path: str) -> str:
    """A file's name relative to the package (the same digest wherever the package is installed)."""
    parts = Path(path).parts
    for marker in ("preflight", "checks"):
        if marker in parts:
            i = len(parts) - 1 - parts[::-1].index(marker)
            return "/".join(parts[i:])
    return Path(path).name


def check_digest(check_id: str) -> str | None:
    """sha256 over the check's code (check_sources: its module, the preflight modules it imports,
    preflight's data; each as relative name and content), 16 hex digits; None where it cannot be
    read. A parser patched in place moves the digest of every check that uses it."""
    files = check_sources(check_id)
    if files is None:
        return None
    h = hashlib.sha256()
    try:
        for path in files:
            with open(path, "rb") as f:
                body = f.read()
            h.update(f"{_relative(path)}\0{len(body)}\0".encode())
            h.update(body)
    except OSError:
        return None
    return h.hexdigest()[:16]


def settings() -> dict[str, dict[str, Any]]:
    """Settings that did not come from the built-in defaults: key -> {value, source}."""
    from .config import ConfigError, resolve

    try:
        resolved = resolve()
    except ConfigError:  # the command already refused a bad config file before running
        return {}
    return {s.key: {"value": redact.value(s.key, s.value), "source": s.source}
            for s in resolved.values() if s.source != "default"}


def effective(command: str, checks: Iterable[str], options: Mapping[str, Any]) -> dict[str, Any]:
    """The `config` object of a report: the command, its options as given (None: not given), the
    checks that ran with their digests, and the settings in force with their sources."""
    ran = sorted(set(checks))
    return {"command": command,
            "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in sorted(options.items())},
            "checks": {cid: check_digest(cid) for cid in ran},
            "settings": settings()}
