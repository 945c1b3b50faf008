"""Nagios/Icinga/Naemon plugin output: one status line with perfdata, a few lines of long output.

Why its own module and exit codes: Nagios decides state from the exit code alone (0 OK, 1 WARNING,
2 CRITICAL, 3 UNKNOWN), which differ from SPEC's run codes. By the plugin guidelines UNKNOWN is
for the plugin's own trouble (bad arguments, a bug); a node that is down, refuses us or times out
is a real finding about the cluster, so it is CRITICAL. A check that ran but could not tell
(`error`) is WARNING: someone should look, but nothing is known to be broken. NRPE truncates
around 4 KB, so the output is capped.
"""
from __future__ import annotations

import re
from ..model import NodeStateKind, Report, Status
from ..nodeset import fold
from ..registry import CONNECT_ID
from ..report import nodetext

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
NAMES = {OK: "OK", WARNING: "WARNING", CRITICAL: "CRITICAL", UNKNOWN: "UNKNOWN"}
MAX_BYTES = 4000
MAX_LONG_LINES = 15
# details.metrics unit -> (Nagios UOM, factor); UOMs Nagios knows: s ms us % B KB MB TB c
UOM = {"bytes": ("B", 1.0), "B": ("B", 1.0), "MB": ("MB", 1.0), "KB": ("KB", 1.0), "TB": ("TB", 1.0),
       "GiB": ("B", 2.0 ** 30), "ms": ("ms", 1.0), "s": ("s", 1.0), "us": ("us", 1.0), "%": ("%", 1.0)}


def _label(text: str) -> str:
    """A perfdata label: quoted when it holds a space, `=` or a quote (a quote doubled, as the
    plugin guidelines say); `|` and control characters cannot be quoted, so they are replaced."""
    text = _text(text)
    return "'" + text.replace("'", "''") + "'" if re.search(r"[\s=']", text) else text


def _text(text: str) -> str:
    """Node text on a plugin output line: one line, and no `|` (Nagios reads perfdata after the
    first `|` of any line)."""
    return nodetext.one_line(text).replace("|", "/")


def _num(v: float) -> str:
    return f"{v:.6g}"


def perfdata(report: Report) -> list[str]:
    """Counts, then per metric name its min and max over the cluster (bounded, whatever the size)."""
    nodes = len(report.nodes)
    bad_nodes = len(failing_nodes(report))
    unreachable = sum(1 for n in report.nodes if n.state is not NodeStateKind.OK)
    c = report.counts()
    out = [f"nodes={nodes};;;0", f"failing_nodes={bad_nodes};;1;0;{nodes}",
           f"unreachable_nodes={unreachable};;1;0;{nodes}",
           f"fail={c['fail']};;1;0", f"error={c['error']};1;;0", f"warn={c['warn']};1;;0"]
    seen: dict[str, list[float]] = {}
    units: dict[str, str] = {}
    for r in report.results:
        for m in r.details.get("metrics") or ():
            if isinstance(m, dict) and isinstance(m.get("value"), (int, float)) and m.get("name"):
                seen.setdefault(str(m["name"]), []).append(float(m["value"]))
                units[str(m["name"])] = str(m.get("unit") or "")
    for name in sorted(seen):
        uom, factor = UOM.get(units[name], ("", 1.0))
        vals = seen[name]
        out.append(f"{_label(name + '_min')}={_num(min(vals) * factor)}{uom}")
        out.append(f"{_label(name + '_max')}={_num(max(vals) * factor)}{uom}")
    return out


def failing_nodes(report: Report) -> list[str]:
    bad = {n.name for n in report.nodes if n.state is not NodeStateKind.OK}
    bad |= {r.node for r in report.results if r.node and r.status in (Status.FAIL, Status.ERROR)}
    return [n.name for n in report.nodes if n.name in bad]


def state(report: Report) -> int:
    statuses = {r.status for r in report.results}
    if Status.FAIL in statuses or any(n.state is not NodeStateKind.OK for n in report.nodes):
        return CRITICAL
    if Status.ERROR in statuses or Status.WARN in statuses or report.interrupted:
        return WARNING
    return OK


def _problems(report: Report) -> list[str]:
    lines = [_text(f"{n.name}: {n.state.value}{': ' + n.error if n.error else ''}")
             for n in report.nodes if n.state is not NodeStateKind.OK]
    order = {Status.FAIL: 0, Status.ERROR: 1, Status.WARN: 2}
    rows = sorted((r for r in report.results if r.status in order and not
                   (r.check == CONNECT_ID and r.status is Status.ERROR)), key=lambda r: order[r.status])
    lines += [_text(f"{r.node or '_cluster'} {r.check} {r.status.value}: {r.summary}") for r in rows]
    return [line[:200] for line in lines]


def output(report: Report) -> tuple[int, str]:
    """(Nagios exit code, text): first line `PREFLIGHT <STATE> - ... | perfdata`, then long output."""
    code = state(report)
    nodes = len(report.nodes)
    bad = failing_nodes(report)
    c = report.counts()
    if code == OK:
        head = f"all {nodes} nodes ready ({c['pass']} checks passed)"
    else:
        head = (f"{len(bad)}/{nodes} nodes not usable: {fold(bad)}" if bad else f"{nodes} nodes usable") + \
               f"; {c['fail']} fail, {c['error']} error, {c['warn']} warn"
    perf = ""
    for item in perfdata(report):  # whole items only, and the status line stays well under the cap
        if len(perf) + len(item) + 1 > MAX_BYTES // 2:
            break
        perf += (" " if perf else "") + item
    first = f"PREFLIGHT {NAMES[code]} - {_text(head[:500])} | {perf}"
    lines = [first]
    problems = _problems(report)
    lines += problems[:MAX_LONG_LINES]
    if len(problems) > MAX_LONG_LINES:
        lines.append(f"... and {len(problems) - MAX_LONG_LINES} more")
    return code, _cap("\n".join(lines))


def unknown(message: str) -> tuple[int, str]:
    return UNKNOWN, f"PREFLIGHT UNKNOWN - {_text(message)}"[:MAX_BYTES]


def _cap(text: str) -> str:
    raw = text.encode()
    if len(raw) <= MAX_BYTES:
        return text
    return raw[: MAX_BYTES - 20].decode(errors="ignore").rsplit("\n", 1)[0] + "\n... (truncated)"

