"""The JSON report, exactly as docs/SPEC.md §5 fixes it (schema preflight.report/1, published as
docs/report.schema.json), and the JSON-lines form: one record per result (schema
preflight.result/1, the schema's `$defs/record`), for log shippers and `jq -c` pipelines."""
from __future__ import annotations

import json
from typing import Any

from ..model import Report

SCHEMA = "preflight.report/1"
RECORD_SCHEMA = "preflight.result/1"


def to_dict(report: Report) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "run_id": report.run_id,
        "tool_version": report.tool_version,
        "started_at": report.started_at,
        "finished_at": report.finished_at,
        "cluster": report.cluster,
        "inventory": {"path": report.inventory_path, "sha256": report.inventory_sha256},
        "verdict": report.verdict,
        "exit_code": report.exit_code,
        "nodes": [n.to_dict() for n in report.nodes],
        "results": [r.to_dict() for r in report.results],
        "summary": report.counts(),
    }


# One compact line: the C encoder is ~10x faster than indented output (128 nodes carry a few MB of
# metrics); pipe through `jq .` to read it. No check for reference cycles: a report is a tree that
# to_dict builds fresh (and the checks' details are plain data), and keeping a set of every open
# container's id cost an eighth of the encoding (about 150 dicts and lists a node).
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str, separators=(",", ":"), check_circular=False)


def render(report: Report) -> str:
    return _ENCODER.encode(to_dict(report)) + "\n"


def records(report: Report) -> list[dict[str, Any]]:
    """One self-describing record per result: the result's fields plus what run it belongs to."""
    states = {n.name: n.state.value for n in report.nodes}
    return [{"schema": RECORD_SCHEMA, "run_id": report.run_id, "cluster": report.cluster,
             "finished_at": report.finished_at, "node_state": states.get(r.node) if r.node else None,
             **r.to_dict()} for r in report.results]


def render_lines(report: Report) -> str:
    return "".join(_ENCODER.encode(rec) + "\n" for rec in records(report))
