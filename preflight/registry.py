"""Find the checks (every module of `preflight.checks` with an ID) and select them by id or prefix."""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType
from typing import Any

CONNECT_ID = "ssh.connect"


@dataclass(frozen=True)
class CheckInfo:
    id: str
    scope: str
    module: ModuleType
    requires: tuple[str, ...]
    uses: tuple[str, ...]
    defaults: dict[str, Any]

    @property
    def doc(self) -> str:
        return (self.module.__doc__ or "").strip()

    @property
    def title(self) -> str:
        """The docstring's first line, without a leading `id:` / `id —` that repeats the id."""
        para = self.doc.split("\n\n")[0] if self.doc else ""
        first = " ".join(line.strip() for line in para.splitlines())
        for sep in (":", " —", " -"):
            if first.startswith(self.id + sep):
                return first[len(self.id) + len(sep):].strip(" :—-")
        return first

    def has(self, name: str) -> bool:
        return callable(getattr(self.module, name, None))


def module_name(check_id: str) -> str:
    return check_id.replace(".", "_", 1)


@lru_cache(maxsize=1)
def discover() -> dict[str, CheckInfo]:
    """All checks, ssh.connect first, then node checks, then cluster checks, each by id."""
    from . import checks as _pkg  # preflight.checks: the top-level checks/ folder, packaged

    found: list[CheckInfo] = []
    for mod in pkgutil.iter_modules(_pkg.__path__):
        m = importlib.import_module(f"{_pkg.__name__}.{mod.name}")
        if not hasattr(m, "ID"):
            continue
        found.append(CheckInfo(id=m.ID, scope=getattr(m, "SCOPE", "node"), module=m,
                               requires=tuple(getattr(m, "REQUIRES", ())), uses=tuple(getattr(m, "USES", ())),
                               defaults=dict(getattr(m, "DEFAULTS", {}))))
    found.sort(key=lambda c: (c.id != CONNECT_ID, c.scope != "node", c.id))
    return {c.id: c for c in found}


class SelectionError(ValueError):
    pass


def check_parameters(params_by_check: dict[str, dict[str, Any]], where: str) -> None:
    """Refuse an unknown check id or parameter in the inventory's `checks:` (a typo would
    otherwise silently leave the default threshold in force)."""
    import difflib

    every = discover()
    for cid, params in params_by_check.items():
        if cid not in every:
            close = difflib.get_close_matches(cid, list(every), n=1)
            raise SelectionError(f"{where}: checks: unknown check {cid!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        for key in params:
            if key not in every[cid].defaults:
                known = sorted(every[cid].defaults)
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"did you mean {close[0]!r}?" if close else (f"known: {', '.join(known)}" if known else "it takes none")
                raise SelectionError(f"{where}: checks: {cid}: unknown parameter {key!r} ({hint})")


def _matches(check_id: str, pattern: str) -> bool:
    return check_id == pattern or check_id.startswith(pattern.rstrip(".") + ".")


def select(checks: list[str] | None, skip: list[str] | None) -> tuple[list[str], list[str]]:
    """(reported ids, ids whose probes run). `hccn` selects every hccn.*; USES pull facts in."""
    every = discover()
    for pattern in (checks or []) + (skip or []):
        if not any(_matches(c, pattern) for c in every):
            raise SelectionError(f"no check matches {pattern!r} (see: preflight list-checks)")
    chosen = [c for c in every if not checks or any(_matches(c, p) for p in checks)]
    chosen = [c for c in chosen if not any(_matches(c, p) for p in (skip or []))]
    if CONNECT_ID not in chosen:
        chosen.insert(0, CONNECT_ID)  # reachability is always reported: it explains every skip
    active = list(chosen)
    stack = list(chosen)
    while stack:
        for dep in every[stack.pop()].uses:
            if dep not in active and dep in every:
                active.append(dep)
                stack.append(dep)
    order = list(every)
    return sorted(chosen, key=order.index), sorted(active, key=order.index)
