"""docs/SPEC.md §7's exit-code table is the one truth about exit codes: every row is pinned by a
test that runs the real command, listed in ROWS, and the table and ROWS must name the same codes
(a row added to, or dropped from, either side fails here)."""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path


from tests.core.test_cli import pf

ROOT = Path(__file__).resolve().parents[2]
REPLAY = ROOT / "tests" / "fixtures" / "replay" / "ascend128"

ROWS: dict[int, list[str]] = {
    0: ["tests/core/test_exit_codes.py::test_0_ready"],
    1: ["tests/core/test_exit_codes.py::test_1_not_ready"],
    2: ["tests/core/test_cli.py::test_run_missing_inventory",
        "tests/core/test_exit_codes.py::test_2_a_record_dir_that_cannot_be_made",
        "tests/ops/test_history.py::test_run_with_unwritable_history_fails_before_connecting"],
    3: ["tests/core/test_exit_codes.py::test_3_a_checks_own_bug_is_could_not_tell",
        "tests/core/test_cli.py::test_refused_node_report"],
    4: ["tests/core/test_cli.py::test_a_command_whose_module_fails_to_import_exits_4_with_the_message",
        "tests/integration/test_transport_faults.py::test_a_bug_in_one_node_worker_is_exit_4_with_the_message_and_the_others_intact"],
    5: ["tests/slurm/test_slurm_logic.py::test_no_slurm_on_path_is_exit_5"],
    6: ["tests/slurm/test_slurm_logic.py::test_need_without_an_allocation_is_exit_6"],
    7: ["tests/slurm/test_slurm_logic.py::test_need_larger_than_the_allocation_is_exit_7"],
    8: ["tests/slurm/test_drain.py::test_scontrol_denied_is_one_line_and_its_own_code"],
    75: ["tests/ops/test_lock.py::test_concurrent_run_exits_75_and_runs_nothing"],
    130: ["tests/core/test_terminal.py::test_ctrl_c_while_the_inventory_loads_exits_130"],
}


def spec_codes() -> list[int]:
    text = (ROOT / "docs/SPEC.md").read_text()
    section = text.split("## 7. Exit codes", 1)[1].split("\n## ", 1)[0]
    return [int(m.group(1)) for m in re.finditer(r"^\| (\d+) \|", section, re.M)]


def test_the_table_names_each_code_once_and_every_row_has_its_tests():
    codes = spec_codes()
    assert len(codes) == len(set(codes)), f"a code listed twice in SPEC §7: {codes}"
    assert set(codes) == set(ROWS), (sorted(codes), sorted(ROWS))
    for code, tests in ROWS.items():
        for ref in tests:
            path, name = ref.split("::")
            tree = ast.parse((ROOT / path).read_text())
            names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            assert name in names, f"exit {code}: {ref} does not exist"


def replay(recording: Path, node: str, *extra: str) -> subprocess.CompletedProcess:
    return pf("run", str(REPLAY / "inventory.yaml"), "--replay", str(recording), "--limit", node,
              "--checks", "npu.health", "--format", "json", *extra)


def test_0_ready(ascend128_recording):
    r = replay(ascend128_recording, "node001")
    assert r.returncode == 0, r.stderr


def test_1_not_ready(ascend128_recording):
    r = replay(ascend128_recording, "node042")  # the recording's NPU in Alarm
    assert r.returncode == 1, r.stderr


def test_2_a_record_dir_that_cannot_be_made(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - {name: n1, host: 127.0.0.1, port: 1}\n")
    (tmp_path / "file").write_text("")
    r = pf("run", str(inv), "--record", str(tmp_path / "file" / "rec"))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == f"preflight: --record {tmp_path}/file/rec: cannot create directory: Not a directory"


def test_3_a_checks_own_bug_is_could_not_tell(ascend128_recording, monkeypatch):
    """An exception in a check's evaluate is that check's `error` (it could not tell: 3), on that
    node only; exit 4 is kept for preflight's own core."""
    import json

    from click.testing import CliRunner

    from preflight.checks import npu_health
    from preflight.cli import main

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug in the check")

    monkeypatch.setattr(npu_health, "evaluate", broken)
    r = CliRunner().invoke(main, ["run", str(REPLAY / "inventory.yaml"), "--replay", str(ascend128_recording), "--limit",
                                  "node001", "--checks", "npu.health", "--format", "json"])
    assert r.exit_code == 3, r.output
    doc = json.loads(r.stdout)
    [res] = [x for x in doc["results"] if x["check"] == "npu.health"]
    assert res["status"] == "error" and "ZeroDivisionError" in res["summary"]
