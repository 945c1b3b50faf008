"""Markdown for tickets and chat: the same grouped checklist as the terminal view."""
from __future__ import annotations

from ..model import Report, Status
from .group import condensed, grouped, sections
from .table import VERDICT


def _cell(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", "<br>")


def render(report: Report) -> str:
    word, _ = VERDICT[report.verdict]
    lines = [f"# preflight{': ' + report.cluster if report.cluster else ''} — {word} (exit {report.exit_code})", "",
             f"Started {report.started_at}, finished {report.finished_at}; {len(report.nodes)} nodes; "
             f"inventory `{report.inventory_path}`.", ""]
    bad = [n for n in report.nodes if n.state.value != "ok"]
    if bad:
        lines += ["## Nodes not reached", ""] + [f"- `{n.name}` ({n.host}): {n.state.value}: {n.error}" for n in bad] + [""]
    lines += ["## Checks", ""]
    for title, groups in sections(report, grouped(report)):
        if title:
            lines += [f"### {title}", ""]
        lines += ["| status | check | nodes | finding | action | fix |", "|---|---|---|---|---|---|"]
        for g in condensed(groups):
            fix = g.remediation if g.status in (Status.FAIL, Status.WARN, Status.ERROR) else ""
            lines.append(f"| {g.status.value.upper()}{' (ack)' if g.ack else ''} | `{g.check}` | `{g.label}` | "
                         f"{_cell(g.summary + (' — ' + g.note if g.note else ''))} | "
                         f"{g.action or ''} | {_cell(fix)} |")
        lines.append("")
    counts = report.counts()
    lines += ["Summary: " + ", ".join(f"{v} {k}" for k, v in counts.items()), ""]
    return "\n".join(lines)
