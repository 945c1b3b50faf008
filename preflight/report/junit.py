"""JUnit XML: one testcase per (check, node), classname `preflight.<check>` (docs/SPEC.md §6.2).

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


def render(report: Report) -> str:
    counts = report.counts()
    suite = ET.Element("testsuite", name=f"preflight{': ' + report.cluster if report.cluster else ''}",
                       tests=str(len(report.results)), failures=str(counts["fail"]),
                       errors=str(counts["error"]), skipped=str(counts["skip"]), timestamp=report.started_at)
    for r in report.results:
        case = ET.SubElement(suite, "testcase", classname=f"preflight.{r.check}",
                             name=_clean(r.node or CLUSTER), time=f"{r.duration_s:.3f}")
        text = _clean(r.summary + (f"\nremediation: {r.remediation}" if r.remediation else ""))
        tag = {Status.FAIL: "failure", Status.ERROR: "error", Status.SKIP: "skipped"}.get(r.status)
        if tag:
            ET.SubElement(case, tag, message=_clean(r.summary)).text = text
        elif r.status is Status.WARN:
            ET.SubElement(case, "system-out").text = "WARNING: " + text
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
