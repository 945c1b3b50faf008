"""The checklist a person reads: verdict first, failures first, identical lines folded across nodes,
each fail/warn with its fix; past a handful of nodes, a node-by-check matrix as well (identical
rows folded)."""
from __future__ import annotations

from rich.console import Console, Group as RGroup
from rich.table import Table
from rich.text import Text

from ..model import NodeStateKind, Report, Status
from ..nodeset import fold
from . import nodetext
from .group import by_node, condensed, grouped, sections

STYLE = {Status.FAIL: "bold red", Status.ERROR: "bold magenta", Status.WARN: "yellow",
         Status.PASS: "green", Status.SKIP: "dim"}
MARK = {Status.FAIL: "✗", Status.ERROR: "?", Status.WARN: "!", Status.PASS: "✓", Status.SKIP: "-"}
VERDICT = {"ready": ("READY", "bold green"), "not_ready": ("NOT READY", "bold red"),
           "incomplete": ("INCOMPLETE", "bold magenta")}
MATRIX_FROM_NODES = 6


def header(report: Report) -> Text:
    word, style = VERDICT[report.verdict]
    states: dict[str, int] = {}
    for n in report.nodes:
        states[n.state.value] = states.get(n.state.value, 0) + 1
    t = Text("preflight", style="bold")
    if report.cluster:
        t.append(f" · {report.cluster}")
    t.append(" · ")
    t.append(word, style=style)
    t.append(f" (exit {report.exit_code}) · {len(report.nodes)} nodes: ")
    t.append(", ".join(f"{v} {k}" for k, v in sorted(states.items())))
    if report.interrupted:
        t.append(" · interrupted, partial report", style="bold magenta")
    return t


def checklist(report: Report, show_pass: bool = True) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False, expand=False)
    for col in ("status", "check", "nodes", "finding"):
        table.add_column(col, overflow="fold")
    for title, groups in sections(report, grouped(report)):
        if title:
            table.add_row(Text(""), Text(f"— {title} —", style="bold"), Text(""), Text(""))
        for g in condensed(groups):
            if g.status is Status.PASS and not show_pass:
                continue
            finding = Text(g.summary, style="dim" if g.ack else "")  # node text: never markup (brackets in node ranges and tool output)
            if g.note:
                finding.append(f"\n{g.note}", style="dim italic" if g.ack else "bold yellow")
            if g.action:
                finding.append("\naction: ", style="bold")
                finding.append(g.action, style=STYLE[g.status])
            if g.remediation and g.status in (Status.FAIL, Status.WARN, Status.ERROR):
                finding.append("\nfix: ", style="bold")
                finding.append(g.remediation)
            word = g.status.value.upper() + (" (ack)" if g.ack else "")
            table.add_row(Text(word, style="dim" if g.ack else STYLE[g.status]), Text(g.check), Text(g.label), finding)
    return table


def matrix(report: Report) -> Table:
    """Node by check, nodes whose rows are identical (same state, same marks) folded into one node
    range, in inventory order: a thousand healthy nodes are one line, and the odd ones stand out.
    (The HTML heat map folds the same way.)"""
    cells = by_node(report)
    checks = list(dict.fromkeys(r.check for r in report.results if r.node))
    rows: dict[tuple, list[str]] = {}
    for n in report.nodes:
        row = cells.get(n.name, {})
        rows.setdefault((n.state is NodeStateKind.OK, tuple(row.get(c) for c in checks)), []).append(n.name)
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("node", overflow="fold")  # a node range is never cut short
    for c in checks:
        table.add_column(c, justify="center")
    for (ok, marks), names in rows.items():
        label = Text(fold(names), style="" if ok else "bold magenta")
        table.add_row(label, *[Text(MARK[s], style=STYLE[s]) if s is not None else Text("") for s in marks])
    return table


def render(report: Report, console: Console) -> None:
    """On a terminal too (cli.common.emit): node text never carries an escape sequence there."""
    report = nodetext.report(report)
    parts = [header(report), Text(""), checklist(report)]
    if len(report.nodes) >= MATRIX_FROM_NODES:
        parts += [Text(""), matrix(report)]
    counts = report.counts()
    parts += [Text(""), Text("summary: " + ", ".join(f"{v} {k}" for k, v in counts.items()))]
    console.print(RGroup(*parts))

