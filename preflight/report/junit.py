"""JUnit XML: one testcase per result, classname `preflight.<check>` (docs/SPEC.md §6.2).

A check may report several findings on one node (storage.data: one per broken path); CI servers key
test cases by (classname, name) and collapse duplicates, so the second and later results of one
(check, node) are named `<node> #2`, `<node> #3`, ... in the check's order: unique, and stable from
run to run while the findings are the same.

fail -> <failure>, error (could not tell) -> <error>, skip -> <skipped>; XML-illegal characters from
node output are dropped so CI servers can always parse the file.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ..model import Report, Status

_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
CLUSTER = "_cluster"


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


def render(report: Report) -> str:
    counts = report.counts()
    suite = ET.Element("testsuite", name=f"preflight{': ' + report.cluster if report.cluster else ''}",
                       tests=str(len(report.results)), failures=str(counts["fail"]),
                       errors=str(counts["error"]), skipped=str(counts["skip"]), timestamp=report.started_at)
    for r, name in zip(report.results, case_names(report)):
        case = ET.SubElement(suite, "testcase", classname=f"preflight.{r.check}",
                             name=name, time=f"{r.duration_s:.3f}")
        text = _clean(r.summary + (f"\naction: {r.action}" if r.action else "")
                      + (f"\nremediation: {r.remediation}" if r.remediation else ""))
        tag = {Status.FAIL: "failure", Status.ERROR: "error", Status.SKIP: "skipped"}.get(r.status)
        if tag:
            ET.SubElement(case, tag, message=_clean(r.summary)).text = text
        elif r.status is Status.WARN:
            ET.SubElement(case, "system-out").text = "WARNING: " + text
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
