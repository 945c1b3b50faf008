"""env.comm on NVIDIA nodes: NCCL_IB_HCA against the real ibstat sample, NCCL_IB_DISABLE, NCCL_* typos."""
from __future__ import annotations

import pytest

from preflight.checkapi import CommandOutput, Status
from preflight.checks import env_comm as C
from preflight.node import Node
from preflight.nvidia import probes as nv
from tests.checks.test_env_comm import env0
from tests.net.test_helpers import IP_JSON
from tests.support import fixture_body

GPU = Node(name="gpu01", host="192.0.2.2", backend="nvidia")
# the real H100 ibstat: mlx5_0,3,4,5,6,9,10,11 InfiniBand Active 400; mlx5_1 Ethernet Active; mlx5_2,7,8 Ethernet Down
IBSTAT = fixture_body("ibstat__H100_CX7_some_down__gpud-fixture.txt")


def run(ib: str | None = IBSTAT, **env):
    outs = {"launch_env": env0(**env), C.IP_PROBE: CommandOutput(stdout=IP_JSON)}
    if ib is not None:
        outs[nv.IB_PROBE] = CommandOutput(stdout=f"@@source ibstat\n{ib}")
    facts = C.parse(outs)
    (f,) = C.evaluate(facts, dict(C.DEFAULTS), GPU)
    return f


def test_probe_asks_ib_ports_on_nvidia_nodes_only():
    assert C.probes(GPU, C.DEFAULTS)[nv.IB_PROBE].cmd == nv.IB_PORTS
    assert nv.IB_PROBE not in C.probes(Node(name="n", host="h", backend="ascend"), C.DEFAULTS)


@pytest.mark.parametrize("value", ["mlx5", "=mlx5_0:1,mlx5_3:1", "^=mlx5_2,mlx5_7,mlx5_8", "mlx5_1"])
def test_nccl_ib_hca_naming_active_ports_passes(value):
    """`mlx5` prefix-matches the Down Ethernet ports too: NCCL would try them, so that one fails."""
    f = run(NCCL_IB_HCA=value)
    if value == "mlx5":
        assert f.status is Status.FAIL and "mlx5_2:1 is Down/Disabled" in f.summary
    else:
        assert f.status is Status.PASS, f.summary


def test_nccl_ib_hca_unknown_or_down_port_fails():
    f = run(NCCL_IB_HCA="=mlx5_0:1,mlx5_12:1")
    assert f.status is Status.FAIL and "no HCA mlx5_12:1 on gpu01" in f.summary
    f = run(NCCL_IB_HCA="=mlx5_7")
    assert f.status is Status.FAIL and "mlx5_7:1 is Down/Disabled, expected Active/LinkUp" in f.summary


def test_nccl_ib_hca_on_a_node_without_rdma_fails():
    f = run(ib="", NCCL_IB_HCA="mlx5_0")
    assert f.status is Status.FAIL and "no RDMA device" in f.summary


def test_nccl_ib_disable_with_active_ib_warns():
    f = run(NCCL_IB_DISABLE="1")
    assert f.status is Status.WARN and "8 Active InfiniBand port(s)" in f.summary


def test_nccl_typo_gets_a_hint():
    f = run(NCCL_SOCKET_IFNAM="eth0")
    assert f.status is Status.WARN and "did you mean NCCL_SOCKET_IFNAME?" in f.summary
    assert run(NCCL_DEBUG="INFO").status is Status.PASS
