"""The pure parts of `preflight env`: MASTER_PORT choice, job.hccl values, refusals from a report."""
from __future__ import annotations

import pytest

from preflight.checks import env_comm
from preflight.job import envgen
from preflight.model import NodeState, NodeStateKind, Report, Result, Status


def test_master_port_avoids_listeners_hccl_and_ephemeral():
    assert envgen.master_port(None, [], [(60000, 60015)], (32768, 60999)) == (29500, "")
    assert envgen.master_port(None, [29500, 29501], [], None) == (29502, "")
    assert envgen.master_port(60005, [], [(60000, 60015)], None) == (None, "60005 is inside HCCL's host port range")
    assert envgen.master_port(40000, [], [], (32768, 60999))[1] == "40000 is inside the ephemeral range 32768-60999"
    assert envgen.master_port(29400, [29400], [], None)[1] == "29400 is in use on the master"


def _hccl(values):
    return envgen.hccl_settings({"hccl": values}, env_comm.VALIDATORS, env_comm.TYPOS, env_comm.DEFAULTS)


def test_hccl_settings_validated_by_env_comm():
    assert _hccl({"HCCL_BUFFSIZE": 200, "HCCL_DETERMINISTIC": "true"}) == {"HCCL_BUFFSIZE": "200", "HCCL_DETERMINISTIC": "true"}
    with pytest.raises(ValueError, match="HCCL_BUFFER_SIZE is not an HCCL variable \\(did you mean HCCL_BUFFSIZE\\?\\)"):
        _hccl({"HCCL_BUFFER_SIZE": 209715200})
    with pytest.raises(ValueError, match="the unit is MB, not bytes"):
        _hccl({"HCCL_BUFFSIZE": 209715200})
    with pytest.raises(ValueError, match="outside 120-7200"):
        _hccl({"HCCL_CONNECT_TIMEOUT": 30})


def test_refusals_name_node_and_check():
    rep = Report("t", "t", "inv", "x", (NodeState("n1", "h"), NodeState("n2", "h", NodeStateKind.UNREACHABLE, "refused")),
                 (Result("env.comm", "n1", Status.FAIL, "GLOO_SOCKET_IFNAME=eth9: no interface eth9 on n1"),
                  Result("net.ports", "n1", Status.WARN, "ephemeral"), Result("storage.disk", "n1", Status.FAIL, "full")))
    got = [r.line() for r in envgen.refusals(rep)]
    assert got == ["n2: ssh.connect error: unreachable: refused", "n1: env.comm fail: GLOO_SOCKET_IFNAME=eth9: no interface eth9 on n1"]
    assert not envgen.EnvRefused(envgen.refusals(rep)).incomplete
    assert envgen.EnvRefused(envgen.refusals(rep)[:1]).incomplete


def test_nccl_ib_hca_names_the_infiniband_ports_found_up():
    """On a real 8-port H100 ibstat with ports down, only the Active/LinkUp ones are named, exactly."""
    from preflight.checks import ib_link
    from preflight.model import CommandOutput
    from preflight.nvidia import ibstat
    from tests.support import fixture_body

    text = fixture_body("ibstat__H100_CX7_some_down__gpud-fixture.txt")
    facts = ib_link.parse({"ib_ports": CommandOutput(stdout="@@source ibstat\n" + text)})
    ports = ibstat.parse_ibstat(text)
    up = [p.name for p in ports if p.up and p.link_layer == "InfiniBand"]
    assert up and len(up) < len(ports)  # the sample has ports down: they must be left out
    assert envgen.ib_hca(facts) == "=" + ",".join(up)
    assert envgen.ib_hca(None) is None and envgen.ib_hca(ib_link.Facts("none")) is None


@pytest.mark.parametrize("trap", ["$(touch {M})", "`touch {M}`", "; touch {M}; ", "' ; touch {M}; '", "\ntouch {M}\n"])
def test_the_printed_torchrun_line_keeps_every_value_one_word(tmp_path, trap):
    """The operator pastes it into a shell: a node's address, an HCCL value or the entry with shell
    syntax in it stays one word (run here in a real sh, with printf in env's place)."""
    import subprocess
    marker = tmp_path / "M"
    t = trap.replace("{M}", str(marker))
    e = envgen.NodeEnv("n1", "h", 0, "ascend", {"MASTER_ADDR": f"10.0.0.1{t}", "MASTER_PORT": "29500", "NNODES": "2",
                                                "HCCL_IF_IP": t}, nproc_per_node=8)
    line = e.torchrun(f"/train{t}.py")
    out = subprocess.run(["sh", "-c", "printf '%s\\0' " + line.removeprefix("env ")], capture_output=True, text=True)
    words = out.stdout.split("\0")[:-1]
    assert not marker.exists()
    assert f"MASTER_ADDR=10.0.0.1{t}" in words and f"HCCL_IF_IP={t}" in words
    assert f"--master_addr=10.0.0.1{t}" in words and words[-1] == f"/train{t}.py"
