"""sw.stack: the probe runs in a local shell against real trees (a Megatron-LM tree with the real
package_info.py, a MindSpeed checkout as `pip install -e` leaves it, git branches)."""
from __future__ import annotations

import subprocess
import sys


from preflight.checkapi import ClusterContext, CommandOutput, Status
from preflight.checks import sw_stack as check
from preflight.node import Node
from tests.job.trees import FIXTURE, megatron_source, mindspeed_checkout


def _sh(cmd: str) -> CommandOutput:
    p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=120)
    return CommandOutput(p.stdout, p.stderr, p.returncode)


def _run(job, pythonpath: str, backend="ascend", nodes=("node01",)):
    ns = {n: Node(n, n, python=sys.executable, backend=backend, env={"PYTHONPATH": pythonpath}) for n in nodes}
    ctx = ClusterContext(nodes=ns, facts={}, params=dict(check.DEFAULTS), planned={}, job=job)
    for node, probes in check.plan(ctx).items():
        ctx.planned[node] = {k: _sh(p.cmd) for k, p in probes.items()}
    return check.evaluate(ctx)


def test_package_info_parsed_from_the_real_file():
    text = FIXTURE.read_text().split("# ---\n", 1)[1]
    assert check.package_version(text) == ("0.13.0", "0.13.0rc2")
    assert check.package_version("VERSION = 1") is None


def test_matching_branches_pass(tmp_path):
    mg = megatron_source(tmp_path / "Megatron-LM", "0.8.0", branch="core_r0.8.0")
    ms = mindspeed_checkout(tmp_path / "MindSpeed", "0.8.0", branch="2.0.0_core_r0.8.0")
    [f] = _run({"megatron_path": str(mg)}, str(ms))
    assert f.status is Status.PASS, f.summary
    assert "Megatron-LM 0.8.0 with MindSpeed 2.0.0_core_r0.8.0" in f.summary


def test_mismatched_pair_fails_naming_both(tmp_path):
    mg = megatron_source(tmp_path / "Megatron-LM", "0.12.1", branch="core_v0.12.1")
    ms = mindspeed_checkout(tmp_path / "MindSpeed", "0.8.0", branch="2.0.0_core_r0.8.0")
    head, node = _run({"megatron_path": str(mg)}, str(ms))
    assert head.status is Status.FAIL and node.node == "node01"
    assert "MindSpeed 2.0.0_core_r0.8.0 is made for Megatron core 0.8.0" in node.summary
    assert "is 0.12.1 (branch core_v0.12.1)" in node.summary
    assert "install MindSpeed master (made for 0.12.1)" in node.remediation or "2.3.0_core_r0.12.1" in node.remediation


def test_version_without_checkout_reads_the_core_line(tmp_path):
    mg = megatron_source(tmp_path / "Megatron-LM", "0.10.0")
    ms = mindspeed_checkout(tmp_path / "MindSpeed", "0.9.0")
    head, node = _run({"megatron_path": str(mg)}, str(ms))
    assert node.status is Status.FAIL and "MindSpeed 0.9.0 is made for Megatron core 0.9.0" in node.summary
    ms10 = mindspeed_checkout(tmp_path / "MindSpeed10", "0.10.0")
    assert _run({"megatron_path": str(mg)}, str(ms10))[0].status is Status.PASS


def test_adaptor_that_does_not_import_fails(tmp_path):
    mg = megatron_source(tmp_path / "Megatron-LM", "0.8.0")
    ms = mindspeed_checkout(tmp_path / "MindSpeed", "0.8.0", broken="No module named 'torch_npu'")
    head, node = _run({"megatron_path": str(mg)}, str(ms))
    assert node.status is Status.FAIL
    assert "import mindspeed.megatron_adaptor fails: ImportError: No module named 'torch_npu'" in node.summary


def test_entry_without_the_adaptor_import_warns(tmp_path):
    mg = megatron_source(tmp_path / "Megatron-LM", "0.8.0")
    ms = mindspeed_checkout(tmp_path / "MindSpeed", "0.8.0")
    entry = mg / "pretrain_gpt.py"
    entry.write_text("import os\nimport torch\nfrom functools import partial\n")
    head, node = _run({"megatron_path": str(mg), "entry": str(entry)}, str(ms))
    assert node.status is Status.WARN and "does not import mindspeed.megatron_adaptor" in node.summary
    entry.write_text("import os\nimport torch\nimport mindspeed.megatron_adaptor\n")
    assert _run({"megatron_path": str(mg), "entry": str(entry)}, str(ms))[0].status is Status.PASS


def test_nvidia_node_checks_only_megatron(tmp_path):
    mg = megatron_source(tmp_path / "Megatron-LM", "0.8.0")
    assert _run({"megatron_path": str(mg)}, str(tmp_path), backend="nvidia")[0].status is Status.PASS
    head, node = _run({"megatron_path": str(tmp_path / "nowhere")}, str(tmp_path), backend="nvidia")
    assert node.status is Status.FAIL and "package_info.py" in node.summary


def test_no_mindspeed_on_ascend_fails(tmp_path):
    mg = megatron_source(tmp_path / "Megatron-LM", "0.8.0")
    head, node = _run({"megatron_path": str(mg)}, str(tmp_path / "empty"))
    assert node.status is Status.FAIL and "mindspeed is not installed" in node.summary


def test_no_megatron_path_skips():
    [f] = check.evaluate(ClusterContext(nodes={}, facts={}, params={}, job={"tp": 1}))
    assert f.status is Status.SKIP


def test_table_rows_cite_mindspeed():
    table = check.load_table()
    assert "版本配套表" in table["reference"]["title"]
    assert {r["mindspeed"]: r["megatron_core"] for r in table["rows"]}["2.0.0_core_r0.8.0"] == "0.8.0"
