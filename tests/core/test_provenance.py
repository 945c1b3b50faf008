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
    assert cfg["options"]["deadline"] == 3600.0  # no --deadline: the default in force, not null
    assert set(cfg["checks"]) >= {"npu.health", "hccn.link"}
    source = (ROOT / "checks" / "hccn_link.py").read_bytes()
    assert cfg["checks"]["hccn.link"] != hashlib.sha256(source).hexdigest()[:16]  # more than its module
    from preflight import provenance
    assert cfg["checks"]["hccn.link"] == provenance.check_digest("hccn.link")
    again = run_json(ascend128_recording, tmp_path)
    assert again["config"] == cfg and again["run_id"] != doc["run_id"]


def test_a_checks_digest_covers_the_code_it_runs(tmp_path):
    """npu.health's digest covers its module, the parser it imports (preflight/ascend/npu_smi.py)
    and preflight's data (the fault-code table): patching either in place moves it; patching a
    module it never imports does not. Computed on a copy of the package, in a fresh interpreter."""
    import shutil
    import subprocess
    import sys

    from preflight import provenance

    names = [provenance._relative(p) for p in provenance.check_sources("npu.health")]
    assert {"preflight/checks/npu_health.py", "preflight/ascend/npu_smi.py", "preflight/checkapi.py",
            "preflight/data/npu_fault_codes.yaml"} <= set(names), names
    assert "preflight/cli/run.py" not in names
    shutil.copytree(ROOT / "preflight", tmp_path / "preflight", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "checks", tmp_path / "checks", ignore=shutil.ignore_patterns("__pycache__"))

    def digest() -> str:
        return subprocess.run([sys.executable, "-c", "from preflight.provenance import check_digest as d; "
                               "print(d('npu.health'))"], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)},
                              capture_output=True, text=True, check=True).stdout.strip()

    first = digest()
    assert first == provenance.check_digest("npu.health")  # where the package lies does not matter
    for rel in ("preflight/cli/run.py", "preflight/ascend/npu_smi.py", "preflight/data/npu_fault_codes.yaml"):
        with open(tmp_path / rel, "a") as f:
            f.write("\n# patched in place\n")
        now = digest()
        assert (now == first) == (rel == "preflight/cli/run.py"), rel
        first = now


def test_the_import_reading_is_asts_on_every_module_and_gives_the_same_sources(monkeypatch):
    """provenance reads imports with a pattern (ast.parse of every module cost 0.4 s a run): on every
    module of the package it finds every import ast finds (a docstring line that reads like an
    import may add one), and every check's sources, hence its digest, come out the same."""
    from pathlib import Path

    from preflight import provenance as P
    from preflight.registry import discover

    root = Path(P.__file__).resolve().parent
    files = sorted(set(root.rglob("*.py")) | set((root / "checks").glob("*.py")))
    assert len(files) > 150
    for f in files:
        rel = f.relative_to(root).with_suffix("")
        name = ".".join(("preflight", *rel.parts)).removesuffix(".__init__")
        fast, plain = P._parse_imports(name, str(f)), P._parse_imports_ast(name, str(f))
        assert plain <= fast, (f, sorted(plain - fast))
        assert all(m.startswith("preflight") for m in fast)
    fast = {c: P.check_sources(c) for c in discover()}
    P._PARSED.clear()
    monkeypatch.setattr(P, "_parse_imports", P._parse_imports_ast)
    assert {c: P.check_sources(c) for c in discover()} == fast
    P._PARSED.clear()
