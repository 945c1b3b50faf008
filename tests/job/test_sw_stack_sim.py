"""sw.stack over real SSH on the 8-node simulated cluster: one Megatron-LM tree for the job, a
MindSpeed checkout made for it on every node but node06, whose PYTHONPATH finds another branch."""
from __future__ import annotations

import dataclasses

from preflight import inventory as inv_mod
from preflight import runner
from preflight.model import Status
from tests.simfixtures import requires_netns
from preflight.transport.ssh import SSHTransport
from tests.job.conftest import write_inventory
from tests.job.trees import megatron_source, mindspeed_checkout

pytestmark = requires_netns


def test_mismatched_pair_on_one_node_fails_that_node(job_cluster, tmp_path):
    mg = megatron_source(tmp_path / "Megatron-LM", "0.8.0", branch="core_r0.8.0")
    good = mindspeed_checkout(tmp_path / "MindSpeed", "0.8.0", branch="2.0.0_core_r0.8.0")
    other = mindspeed_checkout(tmp_path / "MindSpeed-new", "0.12.1", branch="2.3.0_core_r0.12.1")
    inv_path = write_inventory(job_cluster, tmp_path / "inv.yaml", {"megatron_path": str(mg)},
                               defaults={"python": "/usr/bin/python3"})
    inv = inv_mod.load(inv_path)
    nodes = tuple(dataclasses.replace(n, env={**n.env, "PYTHONPATH": str(other if n.name == "node06" else good)})
                  for n in inv.nodes)
    report = runner.run(dataclasses.replace(inv, nodes=nodes), SSHTransport(), runner.Options(checks=["sw.stack"]))
    results = [r for r in report.results if r.check == "sw.stack"]
    assert results[0].status is Status.FAIL
    blamed = {r.node: r.summary for r in results if r.node}
    assert set(blamed) == {"node06"}
    assert "MindSpeed 2.3.0_core_r0.12.1 is made for Megatron core 0.12.1" in blamed["node06"]
    assert "is 0.8.0 (branch core_r0.8.0)" in blamed["node06"]
