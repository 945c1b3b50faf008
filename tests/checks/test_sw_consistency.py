"""sw.consistency: version probes, cross-node comparison with SPEC's blame rule, compatibility table."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest

from preflight.checks import sw_consistency as check
from preflight.checkapi import ClusterContext, CommandOutput, ParseError, Status
from preflight.node import Node
from preflight.ascend.versions import parse_info
from tests.support import fixture_body, fixture_names


@dataclass(frozen=True)
class CannFacts:  # the fields cann.env exposes (its module is another engineer's)
    toolkit_version: str | None = "8.1.RC1"
    driver_version: str | None = "25.2.0"
    firmware_version: str | None = "7.7.0.1.231"


GOOD = check.Facts("3.10.14", "2.1.0", "2.1.0.post12", "1.0.0", "0.10.0", kernel="5.10.0-136.12.0.86.oe2203sp1.aarch64")


def _ctx(facts: dict[str, check.Facts], cann: dict[str, CannFacts] | None = None, params=None):
    cann = cann or {}
    nodes = {n: Node(n, n) for n in facts}
    all_facts = {n: {check.ID: f, "cann.env": cann.get(n, CannFacts())} for n, f in facts.items()}
    return ClusterContext(nodes=nodes, facts=all_facts, params={**check.DEFAULTS, **(params or {})})


def _nodes(n: int, **over) -> dict[str, check.Facts]:
    return {f"node{i:02d}": over.get(f"node{i:02d}", GOOD) for i in range(1, n + 1)}


def _py_out(python="3.10.14", torch="2.1.0", npu="2.1.0.post12", ms="", mc="") -> CommandOutput:
    return CommandOutput(stdout=f"python={python}\ntorch={torch}\ntorch_npu={npu}\nmindspeed={ms}\nmegatron_core={mc}\n")


# ---------------------------------------------------------------- probes and parse

def test_probe_reads_metadata_in_launch_env_without_importing_torch():
    p = check.probes(Node("n", "h", python="/opt/py env/bin/python3"), {})
    assert set(p) == {"sw_python", "uname_r"} and p["uname_r"].cmd == "uname -r"
    assert p["sw_python"].cmd.startswith("PF_LAUNCH_SCRIPT=") and "/opt/py env/bin/python3" in p["sw_python"].cmd
    assert "import torch" not in check.SCRIPT and "metadata" in check.SCRIPT


def test_probe_script_runs_on_this_python():
    r = subprocess.run([sys.executable, "-c", check.SCRIPT], capture_output=True, text=True)
    facts = check.parse({"sw_python": CommandOutput(r.stdout, r.stderr, r.returncode), "uname_r": CommandOutput("6.1.0\n")})
    assert facts.python == "%d.%d.%d" % sys.version_info[:3] and facts.kernel == "6.1.0"


def test_parse_versions():
    f = check.parse({"sw_python": _py_out(ms="1.0.0", mc="0.10.0"), "uname_r": CommandOutput("5.10.0\n")})
    assert (f.python, f.torch, f.torch_npu, f.mindspeed, f.megatron_core, f.kernel) == \
        ("3.10.14", "2.1.0", "2.1.0.post12", "1.0.0", "0.10.0", "5.10.0")


def test_missing_interpreter_is_data_not_parse_error():
    out = CommandOutput(stderr="bash: line 1: /nope/python: No such file or directory\n", rc=127)
    f = check.parse({"sw_python": out, "uname_r": CommandOutput("5.10.0\n")})
    assert f.python is None and "/nope/python" in f.python_error


def test_timed_out_probe_is_parse_error():
    with pytest.raises(ParseError):
        check.parse({"sw_python": CommandOutput(rc=124, timed_out=True, duration_s=60)})


def test_no_python_line_is_parse_error():
    with pytest.raises(ParseError):
        check.parse({"sw_python": CommandOutput(stdout="hello\n")})


# ---------------------------------------------------------------- consistency

def test_identical_known_good_stack_passes():
    [f] = check.evaluate(_ctx(_nodes(3)))
    assert f.status is Status.PASS and "identical on 3 nodes" in f.summary and "torch_npu 2.1.0.post12" in f.summary


def test_other_cann_version_on_one_node_blames_it_alone():
    findings = check.evaluate(_ctx(_nodes(3), cann={"node03": CannFacts(toolkit_version="8.0.RC3")}))
    summary, *blamed = findings
    assert summary.status is Status.FAIL and summary.node is None
    assert [b.node for b in blamed] == ["node03"]
    assert "CANN toolkit 8.0.RC3, expected 8.1.RC1" in blamed[0].summary and blamed[0].remediation


def test_two_nodes_two_values_blames_nobody():
    [summary] = check.evaluate(_ctx(_nodes(2), cann={"node02": CannFacts(driver_version="24.1.0")}))
    assert summary.status is Status.FAIL
    assert "no majority" in summary.summary and "25.2.0 on node01" in summary.summary and "24.1.0 on node02" in summary.summary


def test_kernel_difference_warns():
    other = check.Facts(*[getattr(GOOD, k) for k in ("python", "torch", "torch_npu", "mindspeed", "megatron_core")], kernel="6.1.0")
    summary, blamed = check.evaluate(_ctx(_nodes(3, node02=other)))
    assert summary.status is Status.WARN and blamed.node == "node02" and "kernel 6.1.0" in blamed.summary


def test_package_missing_on_one_node_is_named():
    other = check.Facts("3.10.14", "2.1.0", "2.1.0.post12", "", "0.10.0", kernel=GOOD.kernel)
    summary, blamed = check.evaluate(_ctx(_nodes(3, node01=other)))
    assert blamed.node == "node01" and "mindspeed absent, expected 1.0.0" in blamed.summary
    assert "pip install mindspeed==1.0.0" in blamed.remediation


def test_ignored_field_is_not_compared():
    other = check.Facts(*[getattr(GOOD, k) for k in ("python", "torch", "torch_npu", "mindspeed", "megatron_core")], kernel="6.1.0")
    [f] = check.evaluate(_ctx(_nodes(3, node02=other), params={"ignore": ["kernel"]}))
    assert f.status is Status.PASS


def test_unusable_python_fails_that_node():
    broken = check.Facts(None, kernel=GOOD.kernel, python_error="bash: python3: command not found")
    summary, blamed = check.evaluate(_ctx(_nodes(3, node02=broken)))
    assert summary.status is Status.FAIL and blamed.node == "node02" and "command not found" in blamed.summary
    assert "python:" in blamed.remediation


def test_missing_cann_facts_are_tolerated():
    ctx = _ctx(_nodes(2))
    ctx = ClusterContext(nodes=ctx.nodes, facts={n: {check.ID: f[check.ID]} for n, f in ctx.facts.items()}, params=ctx.params)
    [f] = check.evaluate(ctx)
    assert f.status is Status.PASS


# ---------------------------------------------------------------- compatibility table

def test_torch_npu_for_other_torch_fails_on_every_node_in_summary():
    bad = check.Facts("3.10.14", "2.3.1", "2.1.0.post12", "1.0.0", "0.10.0", kernel=GOOD.kernel)
    [f] = check.evaluate(_ctx(_nodes(2, node01=bad, node02=bad)))
    assert f.status is Status.FAIL and "built for torch 2.1.0, installed torch is 2.3.1" in f.summary
    assert "hiascend.com" in f.summary and "every node" in f.summary


def test_unknown_cann_for_known_torch_npu_warns_with_reference():
    [f] = check.evaluate(_ctx(_nodes(2), cann={n: CannFacts(toolkit_version="8.3.RC2") for n in ("node01", "node02")}))
    assert f.status is Status.WARN and "documented for CANN 8.1.RC1, toolkit is 8.3.RC2" in f.summary
    assert "Pytorch/700" in f.summary


def test_python_outside_migration_validated_warns_when_no_release_row_decides():
    p311 = check.Facts("3.11.9", "2.9.0", "2.9.0.post1", "1.0.0", "0.10.0", kernel=GOOD.kernel)
    [f] = check.evaluate(_ctx(_nodes(2, node01=p311, node02=p311)))
    assert f.status is Status.WARN and "migration guides validated (3.9, 3.10" in f.summary
    assert "../" not in f.summary  # no pointer to documents outside the repository


def test_python_published_for_the_installed_torch_npu_passes():
    p311 = check.Facts("3.11.9", "2.1.0", "2.1.0.post12", "1.0.0", "0.10.0", kernel=GOOD.kernel)
    [f] = check.evaluate(_ctx(_nodes(2, node01=p311, node02=p311)))
    assert f.status is Status.PASS, f.summary


def test_unknown_torch_npu_warns():
    new = check.Facts("3.10.14", "2.9.0", "2.9.0.post1", "", "", kernel=GOOD.kernel)
    [f] = check.evaluate(_ctx(_nodes(2, node01=new, node02=new)))
    assert f.status is Status.WARN and "not in the compatibility table" in f.summary


def test_combination_problem_on_one_node_blames_it():
    bad = check.Facts("3.10.14", "2.1.0", "2.1.0.post12", "1.0.0", "0.10.0", kernel=GOOD.kernel)
    summary, blamed = check.evaluate(_ctx(_nodes(3, node03=bad), cann={"node03": CannFacts(toolkit_version="8.2.RC1")}))
    assert blamed.node == "node03" and "8.2.RC1" in blamed.summary and summary.status is Status.FAIL


def _toolkit_versions():
    for name in fixture_names("ascend_toolkit_install.info"):
        for block in fixture_body(name).split("\n\n"):
            if block.strip():
                yield name, parse_info(block)["version"]


@pytest.mark.parametrize("name, version", list(_toolkit_versions()))
def test_real_toolkit_versions_against_the_table(name, version):
    # versions read from the real install.info samples (cann.env parses them; here via the shared parser)
    documented = {"8.1.RC1", "8.2.RC1"}  # the rows below: torch_npu 2.1.0.post12 (8.1.RC1), 2.1.0.post13 (8.2.RC1)
    npu = "2.1.0.post13" if version == "8.2.RC1" else "2.1.0.post12"
    problems = check.combination_problems({"torch": "2.1.0", "torch_npu": npu, "toolkit": version, "python": "3.10.1"},
                                          check.load_table())
    assert bool(problems) == (version not in documented), (name, version, problems)


def test_table_rows_are_consistent_and_cited():
    table = check.load_table()
    for row in table["torch_npu"]:
        assert check.line_of(str(row["torch_npu"])) == str(row["torch"]), row
        assert row["ref"] in table["references"] and row["cann"] and row["python"], row
    assert table["torch_npu_naming"]["ref"] in table["references"]


@pytest.mark.parametrize("raw, base", [("8.0.RC3.beta1", "8.0.RC3"), ("8.1.RC1", "8.1.RC1"), ("8.0.0.alpha002", "8.0.0")])
def test_cann_base(raw, base):
    assert check.cann_base(raw) == base


@pytest.mark.parametrize("raw, line", [("2.1.0.post12", "2.1.0"), ("2.1.0+cpu", "2.1.0"), ("2.1.0a0+git4c55dac", "2.1.0")])
def test_line_of(raw, line):
    assert check.line_of(raw) == line


@dataclass
class CudaFacts:  # the fields cuda.env exposes
    driver_version: str = "535.183.01"
    cuda_version: str = "12.2"
    python: dict | None = None


def _mixed_ctx(cuda: dict[str, CudaFacts]):
    ascend = _nodes(2)
    gpu = {f"gpu{i}": check.Facts("3.10.14", "2.4.0", kernel=GOOD.kernel) for i in range(1, 4)}
    nodes = {n: Node(n, n, backend="ascend") for n in ascend} | {n: Node(n, n, backend="nvidia") for n in gpu}
    facts = {n: {check.ID: f, "cann.env": CannFacts()} for n, f in ascend.items()}
    facts |= {n: {check.ID: f, "cuda.env": cuda[n]} for n, f in gpu.items()}
    return ClusterContext(nodes=nodes, facts=facts, params=dict(check.DEFAULTS))


def test_mixed_cluster_compares_like_with_like():
    """No 'CANN differs' against a GPU node, no 'torch differs' between an Ascend and a GPU node."""
    nccl = {"nccl": "2.20.5"}
    [f] = check.evaluate(_mixed_ctx({f"gpu{i}": CudaFacts(python=nccl) for i in range(1, 4)}))
    assert f.status is Status.PASS, f.summary
    assert "identical on 2 Ascend nodes" in f.summary and "identical on 3 NVIDIA nodes" in f.summary
    assert "CUDA 12.2" in f.summary and "NCCL 2.20.5" in f.summary


def test_nvidia_driver_outlier_is_blamed_among_gpu_nodes_only():
    cuda = {"gpu1": CudaFacts(python={"nccl": "2.20.5"}), "gpu2": CudaFacts(python={"nccl": "2.20.5"}),
            "gpu3": CudaFacts("550.90.07", python={"nccl": "2.20.5"})}
    findings = check.evaluate(_mixed_ctx(cuda))
    assert findings[0].status is Status.FAIL
    blamed = {f.node: f.summary for f in findings if f.node}
    assert list(blamed) == ["gpu3"] and "driver 550.90.07, expected 535.183.01" in blamed["gpu3"]


# ---------------------------------------------------------------- the job's image, by digest

def test_image_digest_differing_on_one_node_fails_there_naming_both():
    from preflight.checks import container_runtime as rt
    from preflight.container import Container

    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    ctx = _ctx(_nodes(4))
    for n in ctx.nodes:  # node04 runs its job on the host: it takes no part in the image vote
        if n != "node04":
            ctx.nodes[n] = Node(n, n, container=Container("podman", image="reg/job:1"))
            ctx.facts[n]["container.runtime"] = rt.Facts(True, image_id=b if n == "node02" else a)
    ctx.facts["node04"]["container.runtime"] = rt.Facts(False)
    summary, *blamed = check.evaluate(ctx)
    assert summary.status is Status.FAIL and [f.node for f in blamed] == ["node02"]
    assert f"job image (by digest) {b}, expected {a}" in blamed[0].summary
    assert a in blamed[0].remediation
    assert summary.details["versions"]["node04"]["image"] is None
    ctx.facts["node02"]["container.runtime"] = rt.Facts(True, image_id=a)
    [ok] = check.evaluate(ctx)
    assert ok.status is Status.PASS
