"""node-problem-detector's custom plugin protocol (kubernetes/node-problem-detector,
pkg/custompluginmonitor/plugin/plugin.go): NPD runs the plugin on a schedule under a timeout, keeps
at most 4 KiB of its stdout, trims it, cuts it to `max_output_length` (80 by default) and reads the
exit status: 0 OK, 1 NonOK (the problem's condition is set, the line is its message), anything else
Unknown. `preflight gate --local --format npd` answers in that shape: the gate's own SPEC exit codes
already are NPD's (0 ready, 1 not ready, 2/3/4/130 unknown), and this renderer gives the one line.

Why one line a person can act on within 80 characters: NPD shows it as the node condition's message
in `kubectl describe node`; the first problem by severity goes first, named by check and node.
"""
from __future__ import annotations

import re

from ..model import NodeStateKind, Report, Status
from ..transport.clean import clean

MAX = 80  # NPD's default max_output_length (config/custom-plugin-monitor.json)
# node text is data: escape sequences go whole (the transport's own rule, transport/clean.py), the
# control characters it keeps (TAB, LF, CR, NUL), bidi overrides and runs of white space become one
# space, so nothing reaches NPD's log or `kubectl describe` raw
_SPACE = re.compile("[\x00-\x20\x7f-\x9f\u202a-\u202e\u2066-\u2069]+")


def _clean(text: str) -> str:
    return _SPACE.sub(" ", clean(text)).strip()


def line(report: Report) -> str:
    """The one line: `ready: ...`, `NOT READY: check node summary`, or `could not tell: ...`."""
    code = report.exit_code
    counted = [r for r in report.results if report.strict or not r.ack]
    if code == 0:
        text = f"preflight ready: {sum(r.status is Status.PASS for r in report.results)} checks passed"
    elif code == 1:
        bad = [r for r in counted if r.status is Status.FAIL or (report.strict and r.status is Status.WARN)]
        first = bad[0]
        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        text = f"NOT READY: {first.check} {first.summary}{more}"
    else:
        down = [n for n in report.nodes if n.state is not NodeStateKind.OK]
        errors = [r for r in counted if r.status is Status.ERROR]
        if report.interrupted:
            text = "could not tell: interrupted"
        elif down:
            text = f"could not tell: {down[0].name} {down[0].state.value}: {down[0].error or ''}"
        elif errors:
            text = f"could not tell: {errors[0].check} {errors[0].summary}"
        else:
            text = "could not tell: internal error (see stderr)"
    return _cut(_clean(text))


def refusal(message: str) -> str:
    """The one line of a gate that refused before running (a usage error, a bad inventory): it
    could not tell; the exit code (2, 4, 5) is what NPD reads as Unknown."""
    return _cut(_clean(f"could not tell: {message}"))


def _cut(text: str) -> str:
    return text if len(text) <= MAX else text[: MAX - 3] + "..."


def render(report: Report) -> str:
    return line(report) + "\n"
