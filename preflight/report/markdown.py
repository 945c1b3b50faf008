"""Markdown for tickets and chat: the same grouped checklist as the terminal view."""
from __future__ import annotations

import html

from ..model import Report, Status
from . import nodetext
from .group import condensed, grouped, sections
from .table import VERDICT


def _cell(text: str | None) -> str:
    """Node text in a table cell: HTML escaped (a renderer would run a <script> from a process
    name), `|` escaped, newlines as <br> (the only markup of ours in a cell)."""
    return html.escape(text or "", quote=False).replace("|", "\\|").replace("\n", "<br>")


def _code(text: str) -> str:
    """A name in a code span: a backtick would end the span, a newline the line."""
    return "`" + nodetext.one_line(text).replace("`", "'") + "`"


def render(report: Report) -> str:
    word, _ = VERDICT[report.verdict]
    cluster = ": " + _cell(nodetext.one_line(report.cluster)) if report.cluster else ""
    lines = [f"# preflight{cluster} — {word} (exit {report.exit_code})", "",
             f"Started {report.started_at}, finished {report.finished_at}; {len(report.nodes)} nodes; "
             f"inventory {_code(report.inventory_path)}.", ""]
    bad = [n for n in report.nodes if n.state.value != "ok"]
    if bad:
        lines += ["## Nodes not reached", ""] + [
            f"- {_code(n.name)} ({_cell(nodetext.one_line(n.host))}): {n.state.value}: "
            f"{_cell(nodetext.one_line(n.error or ''))}" for n in bad] + [""]
    lines += ["## Checks", ""]
    for title, groups in sections(report, grouped(report)):
        if title:
            lines += [f"### {title}", ""]
        lines += ["| status | check | nodes | finding | action | fix |", "|---|---|---|---|---|---|"]
        for g in condensed(groups):
            fix = g.remediation if g.status in (Status.FAIL, Status.WARN, Status.ERROR) else ""
            lines.append(f"| {g.status.value.upper()}{' (ack)' if g.ack else ''} | {_code(g.check)} | {_code(g.label)} | "
                         f"{_cell(g.summary + (' — ' + g.note if g.note else ''))} | "
                         f"{g.action or ''} | {_cell(fix)} |")
        lines.append("")
    counts = report.counts()
    lines += ["Summary: " + ", ".join(f"{v} {k}" for k, v in counts.items()), ""]
    return "\n".join(lines)
