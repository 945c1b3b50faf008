"""JUnit XML: one testcase per result, classname `preflight.<check>` (docs/SPEC.md §6.2).

A check may report several findings on one node (storage.data: one per broken path); CI servers key
test cases by (classname, name) and collapse duplicates, so the second and later results of one
(check, node) are named `<node> #2`, `<node> #3`, ... in the check's order: unique, and stable from
run to run while the findings are the same.

fail -> <failure>, error (could not tell) -> <error>, skip -> <skipped>; XML-illegal characters from
node output are dropped so CI servers can always parse the file.

The document is valid against the JUnit schema CI servers read (Apache Ant's JUnit/JUnitReport
schema, windyroad/JUnit-Schema `JUnit.xsd`, kept in tests/fixtures/junit): <testsuites> carries no
attributes; the suite has `package`, `id`, `hostname` (where preflight ran), a `timestamp` without
a zone (UTC) and `time`, then <properties>, the test cases, <system-out> and <system-err> in that
order; <failure>/<error> carry a `type` (the action, else the status); a test case has no output
of its own in that schema, so warnings are listed in the suite's <system-out>, one line each.
"""
from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from datetime import datetime

from ..model import Report, Status

_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
CLUSTER = "_cluster"
_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")


def _clean(text: str | None) -> str:
    return _ILLEGAL.sub("", text or "")


def case_names(report: Report) -> list[str]:
    """The testcase name of each result, in order: the node (`_cluster` for a summary), with ` #k`
    for the k-th result of the same (check, node); never equal to another case's name."""
    taken: set[tuple[str, str]] = set()
    seen: dict[tuple[str, str], int] = {}
    names = []
    for r in report.results:
        base = _clean(r.node or CLUSTER)
        k = seen[(r.check, base)] = seen.get((r.check, base), 0) + 1
        name = base if k == 1 else f"{base} #{k}"
        while (r.check, name) in taken:  # a node literally named "x #2"
            k += 1
            name = f"{base} #{k}"
        taken.add((r.check, name))
        names.append(name)
    return names


def hostname() -> str:
    """The host preflight ran on (the schema's `hostname`; 'localhost' where it cannot be told)."""
    return _clean(socket.gethostname()).strip() or "localhost"


def _timestamp(iso: str) -> str:
    """The schema's ISO8601_DATETIME_PATTERN: seconds, no zone (the report's times are UTC)."""
    return iso[:19] if _STAMP.match(iso) else "1970-01-01T00:00:00"


def _seconds(report: Report) -> float:
    try:
        span = datetime.fromisoformat(report.finished_at) - datetime.fromisoformat(report.started_at)
    except ValueError:
        return 0.0
    return max(0.0, span.total_seconds())


def render(report: Report) -> str:
    counts = report.counts()
    suite = ET.Element("testsuite", name=f"preflight{': ' + _clean(report.cluster) if report.cluster else ''}",
                       tests=str(len(report.results)), failures=str(counts["fail"]),
                       errors=str(counts["error"]), skipped=str(counts["skip"]),
                       timestamp=_timestamp(report.started_at), hostname=hostname(),
                       time=f"{_seconds(report):.3f}", package="preflight", id="0")
    ET.SubElement(suite, "properties")
    warnings = []
    for r, name in zip(report.results, case_names(report)):
        case = ET.SubElement(suite, "testcase", classname=f"preflight.{r.check}",
                             name=name, time=f"{r.duration_s:.3f}")
        text = _clean(r.summary + (f"\naction: {r.action}" if r.action else "")
                      + (f"\nremediation: {r.remediation}" if r.remediation else ""))
        tag = {Status.FAIL: "failure", Status.ERROR: "error", Status.SKIP: "skipped"}.get(r.status)
        if tag == "skipped":
            ET.SubElement(case, tag, message=_clean(r.summary)).text = text
        elif tag:
            ET.SubElement(case, tag, message=_clean(r.summary), type=r.action or r.status.value).text = text
        elif r.status is Status.WARN:
            warnings.append(f"preflight.{r.check} {name}: WARNING: " + text.replace("\n", "; "))
    ET.SubElement(suite, "system-out").text = "\n".join(warnings)
    ET.SubElement(suite, "system-err")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
