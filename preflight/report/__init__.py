"""Reporters: each renders a finished Report and never decides the exit code.

`render(report, fmt)` is the one place a format name becomes text; the CLI, the gate and the
sweep all go through it so that `--format X` means the same everywhere.
"""
from __future__ import annotations

import io
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from ..model import Report

FORMATS = ("table", "json", "jsonl", "junit", "markdown", "prometheus", "html")


def console(file=None, color: bool | None = None) -> "Console":
    """The one rich Console: colour only for a terminal, markup off (node ranges hold brackets)."""
    from rich.console import Console

    f = file or sys.stdout
    tty = hasattr(f, "isatty") and f.isatty()
    return Console(file=f, width=None if tty else 200, no_color=not tty or "NO_COLOR" in os.environ,
                   highlight=False, emoji=False, markup=False, force_terminal=tty and color is not False)


def render(report: "Report", fmt: str) -> str:
    """The report as text in format `fmt` (one of FORMATS)."""
    if fmt == "table":
        from . import table
        buf = io.StringIO()
        table.render(report, console(buf))
        return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"
    if fmt == "prometheus":
        from . import prometheus
        return prometheus.render(report)
    if fmt == "json":
        from . import json_report
        return json_report.render(report)
    if fmt == "jsonl":
        from . import json_report
        return json_report.render_lines(report)
    if fmt == "html":
        from . import html
        return html.render(report)
    if fmt == "junit":
        from . import junit
        return junit.render(report)
    if fmt == "markdown":
        from . import markdown
        return markdown.render(report)
    raise ValueError(f"unknown report format {fmt!r}")
