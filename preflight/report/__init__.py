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


_COLOR: bool | None = None  # False: --no-color was given


def set_color(on: bool | None) -> None:
    """The command line's --no-color (False) for every console and progress line of this process."""
    global _COLOR
    _COLOR = on


def color_wanted(stream) -> bool:
    """Escape codes or not, for one stream: --no-color forbids them; FORCE_COLOR (non-empty) forces
    them; NO_COLOR (non-empty, no-color.org) and TERM=dumb forbid them; else only on a terminal."""
    if _COLOR is False:
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return hasattr(stream, "isatty") and stream.isatty()


def console(file=None, color: bool | None = None) -> "Console":
    """The one rich Console, markup off (node ranges hold brackets). Without colour no escape code
    at all: rich's no_color alone still writes bold and dim."""
    from rich.console import Console

    f = file or sys.stdout
    tty = hasattr(f, "isatty") and f.isatty()
    on = color_wanted(f) if color is None else color
    return Console(file=f, width=None if tty else 200, color_system="auto" if on else None, no_color=not on,
                   highlight=False, emoji=False, markup=False, force_terminal=on)


def render(report: "Report", fmt: str) -> str:
    """The report as text in format `fmt` (one of FORMATS)."""
    from ..gcwindow import fewer_collections

    with fewer_collections():  # a reporter's objects die with it: GC passes meanwhile free nothing
        return _render(report, fmt)


def _render(report: "Report", fmt: str) -> str:
    if fmt not in ("table", "json", "jsonl", "npd"):  # the table cleans its own, npd drops them; JSON escapes
        from . import nodetext
        report = nodetext.report(report)
    if fmt == "table":
        from . import table
        buf = io.StringIO()
        table.render(report, console(buf, color=False))
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
    if fmt == "npd":
        from . import npd
        return npd.render(report)
    raise ValueError(f"unknown report format {fmt!r}")
