"""A report says what produced it (docs/SPEC.md §5 `config`): the command, its options, each check
that ran with its source digest, the settings in force and where they came from; valid against
the published schema; the same inputs give the same `config`, so two reports can be compared."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import jsonschema

from tests.core.test_cli import pf

ROOT = Path(__file__).resolve().parents[2]
REPLAY = ROOT / "tests" / "fixtures" / "replay" / "ascend128"
SCHEMA = json.loads((ROOT / "docs/report.schema.json").read_text())


def run_json(recording: Path, cfg_home: Path) -> dict:
    r = pf("run", str(REPLAY / "inventory.yaml"), "--replay", str(recording), "--limit", "node[001-003]",
           "--checks", "npu.health,hccn.link", "--format", "json", env={"XDG_CONFIG_HOME": str(cfg_home)})
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def test_the_report_says_what_produced_it(ascend128_recording, tmp_path):
    (tmp_path / "preflight").mkdir()
    (tmp_path / "preflight" / "config.yaml").write_text("forks: 7\n")
    doc = run_json(ascend128_recording, tmp_path)
    jsonschema.validate(doc, SCHEMA)
    cfg = doc["config"]
    assert cfg["command"] == "run"
    assert cfg["options"]["limit"] == "node[001-003]" and cfg["options"]["checks"] == "npu.health,hccn.link"
    assert cfg["options"]["forks"] == 7 and cfg["options"]["strict"] is False
    assert cfg["settings"] == {"forks": {"value": 7, "source": f"{tmp_path}/preflight/config.yaml:1"}}
    assert set(cfg["checks"]) >= {"npu.health", "hccn.link"}
    source = (ROOT / "checks" / "hccn_link.py").read_bytes()
    assert cfg["checks"]["hccn.link"] == hashlib.sha256(source).hexdigest()[:16]
    again = run_json(ascend128_recording, tmp_path)
    assert again["config"] == cfg and again["run_id"] != doc["run_id"]
