"""Helpers a check may use beyond the contract (preflight.checkapi): quoting outside a probe,
fragments joined, first lines of a tool's output, the worst of several statuses, and the action
of the problems a finding names (`graded(ACTIONS, "link_down")`, preflight/actions.py).

Why a module of their own: checkapi's `__all__` is the one page of contract every check follows
(docs/writing-a-check.md opens with it); these are conveniences, used by some checks and by the
shared vendor helpers (preflight/ascend, preflight/nvidia), imported explicitly by name."""
from __future__ import annotations

import shlex
from typing import Any, Iterable

from .actions import graded
from .checkapi import Shell, TemplateError
from .model import worst

__all__ = ["Shell", "first_line", "graded", "line_with", "q", "seq", "worst"]


def q(value: Any) -> str:
    """Quote one inventory- or node-derived value for the remote shell (what `sh()` does to each
    field; for texts outside a probe, such as a command shown in a remediation)."""
    return shlex.quote(str(value))


def seq(parts: Iterable[Shell], sep: str = "; ") -> Shell:
    """Several fragments built by `sh()` as one (`sep` is literal shell text: "; ", " && ", "\\n")."""
    parts = list(parts)
    for p in parts:
        if not isinstance(p, Shell):
            raise TemplateError(f"seq() takes shell text built by sh(), got {type(p).__name__}")
    return Shell(sep.join(parts))


def first_line(text: str, limit: int = 300) -> str:
    """The first non-blank line of `text`, stripped and cut at `limit` (a tool's error line, as a
    summary quotes it)."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


def line_with(text: str, needles: Iterable[tuple[str, str]]) -> tuple[str, str] | None:
    """(the first line of `text` holding one of the needles, stripped; that needle's meaning), in
    line order, then table order; None without one. The tables of a vendor tool's error strings
    (hccn_tool's, npu-smi's) are read so; each caller puts its own whole-text scan first, which
    answers most texts (none holds a needle) without splitting them into lines."""
    table = tuple(needles)
    for line in text.splitlines():
        for needle, meaning in table:
            if needle in line:
                return line.strip(), meaning
    return None
