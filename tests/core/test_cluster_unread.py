"""A cluster check passes only over the nodes it actually read (issue: a replay whose nodes all
returned nothing passed env.consistency "agree on 3 nodes" while all three were `error`, and
sw.consistency failed "python unusable" on nodes it had not read, exit 1 instead of 3). A node
whose output could not be read is that node's `error` only; the cluster row says how many were
not read, and with none read it could not tell."""
from __future__ import annotations

import json
from pathlib import Path


from preflight import inventory, runner
from preflight.model import Status
from preflight.transport.replay import ReplayTransport

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "replay" / "ascend128"
CHECKS = ["env.consistency", "sw.consistency"]


def emptied(recording: Path, tmp: Path, blank: set[str]) -> Path:
    """The recording of node001-003 with every output of the `blank` nodes empty (rc 0, no text)."""
    out = tmp / "rec"
    out.mkdir()
    for n in ("node001", "node002", "node003"):
        doc = json.loads((recording / f"{n}.json").read_text())
        if n in blank:
            for v in doc.values():
                if isinstance(v, dict) and "stdout" in v:
                    v.update(stdout="", stderr="", rc=0)
        (out / f"{n}.json").write_text(json.dumps(doc))
    return out


def run(rec: Path):
    inv = inventory.load(str(FIX / "inventory.yaml"), limit="node[001-003]")
    return runner.run(inv, ReplayTransport(str(rec)), runner.Options(checks=CHECKS))


def rows(report, check):
    return {r.node: r for r in report.results if r.check == check}


def test_nothing_read_is_could_not_tell_never_pass_or_fail(ascend128_recording, tmp_path):
    report = run(emptied(ascend128_recording, tmp_path, {"node001", "node002", "node003"}))
    for check in CHECKS:
        got = rows(report, check)
        assert got[None].status is Status.ERROR and "could not read any node (3 unread" in got[None].summary
        assert {got[n].status for n in ("node001", "node002", "node003")} == {Status.ERROR}
        assert not [r for r in report.results if r.check == check and r.status is Status.FAIL]
    assert report.exit_code == 3


def test_the_row_passes_over_the_read_and_counts_the_rest(tmp_path):
    """sw.consistency over three nodes: two answer (this host, through a local shell), the third's
    connection is lost mid-batch: the row passes over the two it read and says one was not read;
    the third is `error` only, never "python unusable" (a fail, exit 1)."""
    import subprocess

    from preflight.model import CommandOutput
    from tests.ops import ScriptedTransport

    def shell(cmd: str) -> CommandOutput:
        p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=60)
        return CommandOutput(p.stdout, p.stderr, p.returncode)

    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - {name: n1, host: 10.0.0.1}\n  - {name: n2, host: 10.0.0.2}\n"
                   "  - {name: n3, host: 10.0.0.3}\n")
    lost = ScriptedTransport({"n1": shell, "n2": shell,
                              "n3": lambda cmd: CommandOutput("", "", None, error="connection lost")})
    report = runner.Runner(inventory.load(str(inv)), lost, runner.Options(checks=["sw.consistency"])).run()
    got = rows(report, "sw.consistency")
    assert set(got) == {None, "n3"}, got
    assert got["n3"].status is Status.ERROR and "connection lost" in got["n3"].summary
    assert got[None].status is Status.PASS and "identical on 2 nodes" in got[None].summary
    assert got[None].summary.endswith("; 1 node(s) could not be read (see their errors)")
    assert got[None].details["read"] == 2 and got[None].details["unread"] == 1
    assert report.exit_code == 3
