"""The checklist folds the other backend's skipped checks into one line per backend pair; the JSON
keeps every result. Skip summaries come from the runner's own text (backend.skip_reason)."""
from __future__ import annotations

import json

from preflight import backend
from preflight.model import NodeState, Report, Result, Status
from preflight.report import render

NVIDIA_CHECKS = ("gpu.health", "gpu.idle", "gpu.topology", "cuda.env", "ib.link")
ASCEND = [f"asc0{i}" for i in range(1, 5)]


def _report(nodes: list[NodeState], results: list[Result]) -> Report:
    return Report("t0", "t1", "inv.yaml", "0" * 64, tuple(nodes), tuple(results))


def _ascend_cluster() -> Report:
    nodes = [NodeState(n, n, backend="ascend") for n in ASCEND]
    results = []
    for i, n in enumerate(ASCEND):
        how = "backend: ascend in the inventory" if i < 3 else "backend: auto -> ascend (npu-smi found)"
        results.append(Result("npu.health", n, Status.PASS, "8 NPUs healthy"))
        results += [Result(c, n, Status.SKIP, backend.skip_reason("nvidia", "ascend", how)) for c in NVIDIA_CHECKS]
    return _report(nodes, results)


def test_other_backend_checks_are_one_line_on_a_one_backend_cluster():
    rep = _ascend_cluster()
    text = render(rep, "table")
    lines = [ln for ln in text.splitlines() if ln.startswith("SKIP")]
    assert len(lines) == 1, text
    assert "5 NVIDIA checks" in lines[0] and "asc[01-04]" in lines[0]
    assert "not applicable on Ascend nodes (gpu.health, gpu.idle, gpu.topology, cuda.env, ib.link)" in text
    assert "this is an Ascend node" not in text
    md = render(rep, "markdown")
    assert md.count("not applicable on Ascend nodes") == 1 and "this is an Ascend node" not in md
    # JSON: every result as the runner made it
    doc = json.loads(render(rep, "json"))
    skips = [r for r in doc["results"] if r["status"] == "skip"]
    assert len(skips) == 20 and all("NVIDIA check: this is an Ascend node" in r["summary"] for r in skips)


def test_a_mixed_cluster_folds_within_each_backend_and_keeps_other_skips():
    nodes = [NodeState("asc01", "h", backend="ascend"), NodeState("gpu01", "h", backend="nvidia")]
    how = "backend: {} in the inventory"
    results = [Result(c, "asc01", Status.SKIP, backend.skip_reason("nvidia", "ascend", how.format("ascend")))
               for c in NVIDIA_CHECKS]
    results += [Result(c, "gpu01", Status.SKIP, backend.skip_reason("ascend", "nvidia", how.format("nvidia")))
                for c in ("npu.health", "npu.idle")]
    results.append(Result("gpu.topology", "gpu01", Status.SKIP, "1 GPU on this node: no GPU pair to judge"))
    text = render(_report(nodes, results), "table")
    assert "5 NVIDIA checks" in text and "not applicable on Ascend nodes" in text
    assert "2 Ascend checks" in text and "not applicable on NVIDIA nodes (npu.health, npu.idle)" in text
    assert "1 GPU on this node: no GPU pair to judge" in text  # a skip with a reason of its own stays
    assert text.index("— Ascend nodes —") < text.index("5 NVIDIA checks") < text.index("— NVIDIA nodes —")
