"""The published machine contract: docs/report.schema.json validates real reports (runner over the
simulated cluster with injected faults), `run_id` is in every report, `--format jsonl` is one valid
record per result, and every fail/warn carries an action."""
from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from preflight.cli import main

jsonschema = pytest.importorskip("jsonschema", reason="pip install jsonschema (test extra)")

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "report.schema.json").read_text(encoding="utf-8"))
SIM_SPEC = {"nodes": 3}
SIM_MODE = "loopback"
CHECKS = "npu.health,hccn.link,hccn.ip,npu.idle,cann.env,storage.disk"


def validator(ref: str | None = None):
    schema = SCHEMA if ref is None else {"$ref": f"#/$defs/{ref}", "$defs": SCHEMA["$defs"]}
    cls = jsonschema.validators.validator_for(SCHEMA)
    cls.check_schema(SCHEMA)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _run(inv: str, fmt: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["run", inv, "--checks", CHECKS, "--format", fmt, "-q"])
    return r.exit_code, r.output


@pytest.fixture(scope="module")
def faulty(sim_cluster):
    sim_cluster.inject("node01", "npu_health", device=2, status="Alarm")
    sim_cluster.inject("node02", "link_down", device=5)
    sim_cluster.inject("node03", "link_flap", device=1, count=4)
    sim_cluster.inject("node03", "npu_process", device=0, pid=4242, name="python3")
    yield str(sim_cluster.inventory_path)
    for n in ("node01", "node02", "node03"):
        sim_cluster.reset(n)


def test_real_report_validates_and_carries_run_id_and_actions(faulty):
    code, out = _run(faulty, "json")
    assert code == 1, out
    doc = json.loads(out)
    validator().validate(doc)
    uuid.UUID(doc["run_id"])
    by = {(r["node"], r["check"]): r for r in doc["results"]}
    # npu-smi codes A4025021 (NotHandleFault) 8C03A000 (RestartNPU) 8C084E00 (FreeRestartNPU): the worst
    assert by[("node01", "npu.health")]["action"] == "reset_device"
    assert by[("node02", "hccn.link")]["action"] == "replace_hardware"
    assert by[("node03", "hccn.link")]["status"] == "warn" and by[("node03", "hccn.link")]["action"] == "monitor"
    assert by[("node03", "npu.idle")]["action"] == "restart_process"
    graded = [r for r in doc["results"] if r["status"] in ("fail", "warn")]
    assert graded and all(r["action"] for r in graded)
    assert all(r["action"] is None for r in doc["results"] if r["status"] not in ("fail", "warn"))
    code2, out2 = _run(faulty, "json")
    assert json.loads(out2)["run_id"] != doc["run_id"], "run_id must differ between runs"


def test_schema_rejects_a_report_that_breaks_the_contract(faulty):
    doc = json.loads(_run(faulty, "json")[1])
    v = validator()
    bad = [r for r in doc["results"] if r["status"] == "fail"][0]
    for mutate in (lambda d: d.pop("run_id"), lambda d: bad.update(action=None),
                   lambda d: bad.update(action="pray"), lambda d: d["results"][0].update(extra=1),
                   lambda d: d.update(verdict="maybe")):
        copy = json.loads(json.dumps(doc))
        bad = [r for r in copy["results"] if r["status"] == "fail"][0]
        mutate(copy)
        assert not v.is_valid(copy)


def test_jsonl_is_one_valid_record_per_result(faulty):
    code, out = _run(faulty, "jsonl")
    assert code == 1
    lines = out.splitlines()
    records = [json.loads(line) for line in lines]
    v = validator("record")
    for rec in records:
        v.validate(rec)
    assert len({r["run_id"] for r in records}) == 1
    doc = json.loads(_run(faulty, "json")[1])
    assert len(records) == len(doc["results"])
    assert {(r["node"], r["check"], r["status"]) for r in records} == \
           {(r["node"], r["check"], r["status"]) for r in doc["results"]}
    assert not v.is_valid({**records[0], "schema": "preflight.report/1"})


def test_unreachable_node_report_validates(sim_cluster):
    inv = str(sim_cluster.inventory_path)
    sim_cluster.inject("node02", "sshd_down")
    try:
        doc = json.loads(_run(inv, "json")[1])
        records = [json.loads(x) for x in _run(inv, "jsonl")[1].splitlines()]
    finally:
        sim_cluster.reset("node02")
    assert {n["name"]: n["state"] for n in doc["nodes"]}["node02"] == "unreachable"
    validator().validate(doc)
    v = validator("record")
    for rec in records:
        v.validate(rec)
    (rec,) = [r for r in records if r["check"] == "ssh.connect" and r["node"] == "node02"]
    assert rec["node_state"] == "unreachable" and rec["status"] == "error" and rec["action"] is None


def test_json_writer_writes_what_the_standard_library_writes(monkeypatch):
    """The report's JSON (orjson, for speed) is json.dumps's compact output byte for byte for what
    a report holds, int keys and objects included (written as json writes them: a string key, the
    object's str()), the same number where a float's exponent is spelled differently, and the
    standard library's own output where orjson refuses (an int past 64 bits, a lone surrogate)."""
    import dataclasses
    import datetime

    from preflight.model import Report, Result, Status
    from preflight.report import json_report

    @dataclasses.dataclass
    class Point:
        x: int

    def std(doc):
        return json.dumps(doc, ensure_ascii=False, default=str, separators=(",", ":"))

    plain = {"s": "Ascend 910B \u00e9\u4e2d", "i": -7, "f": 1.4035, "t": 47.0, "b": True, "n": None, "l": [1, (2, 3)],
             "d": {0: "int key", "status": Status.FAIL}, "obj": Point(3), "when": datetime.datetime(2026, 12, 4, 5, 0),
             "path": Path("/etc/hccn.conf"), "set": {"only"}, "quote": 'say "x"\n\t\\'}
    assert json_report._encode(plain) == std(plain)
    with monkeypatch.context() as m:  # ... and all of it without falling back to the standard library
        m.setattr(json_report, "_ENCODER", None)
        assert json_report._encode(plain) == std(plain)
    tiny = {"v": 1e-05, "w": 1e22}
    assert json.loads(json_report._encode(tiny)) == tiny
    for refused in ({"big": 2 ** 70}, {"lone": "\ud800"}):
        assert json_report._encode(refused) == std(refused)
    report = Report("2026-12-04T05:00:00Z", "2026-12-04T05:00:01Z", "inv.yaml", "0" * 64, (),
                    (Result("hccn.optical", "n1", Status.PASS, "ok", {"metrics": [{"name": "m", "value": 0.99}]}),))
    assert json_report.render(report) == std(json_report.to_dict(report)) + "\n"
    assert json_report.render_lines(report) == "".join(std(r) + "\n" for r in json_report.records(report))
