"""`preflight env` on the 8-node simulated cluster, as a user runs it (the real command, real SSH).

The expected files are derived the way a person would: each node's address on the NIC the
inventory names (read with `ip` inside the node's own namespace), the master (node01, which owns
MASTER_ADDR) first, 29500 for MASTER_PORT (torchrun's default: free, below the ephemeral range and
away from HCCL's 60000-60015), the eight devices npu-smi lists."""
from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from preflight.sim import netns
from tests.simfixtures import requires_netns
from tests.job.conftest import write_inventory

pytestmark = requires_netns
JOB = {"nproc_per_node": 8, "hccl": {"HCCL_BUFFSIZE": 200, "HCCL_CONNECT_TIMEOUT": 1200}, "entry": "/opt/Megatron-LM/pretrain_gpt.py"}


def pf(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PREFLIGHT_DEBUG"}
    return subprocess.run(["preflight", *args], capture_output=True, text=True, timeout=180, env=env)


def by_hand(c) -> dict[str, dict[str, str]]:
    """What a person writes after looking at every node's interfaces."""
    addr = {}
    for n in c.nodes:
        out = c.exec(n.name, f"ip -o -4 addr show dev {netns.HOST_IFACE}").stdout
        addr[n.name] = out.split(" inet ", 1)[1].split("/", 1)[0]
    names = [n.name for n in c.nodes]
    return {name: {"HCCL_IF_IP": addr[name], "HCCL_SOCKET_IFNAME": f"={netns.HOST_IFACE}",
                   "GLOO_SOCKET_IFNAME": netns.HOST_IFACE, "MASTER_ADDR": addr["node01"], "MASTER_PORT": "29500",
                   "NNODES": "8", "NODE_RANK": str(i), "ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
                   "HCCL_BUFFSIZE": "200", "HCCL_CONNECT_TIMEOUT": "1200"} for i, name in enumerate(names)}


def sourced(path: Path) -> dict[str, str]:
    out = subprocess.run(["env", "-i", "bash", "-c", f". {shlex.quote(str(path))} && env -0"],
                         capture_output=True, text=True, check=True).stdout
    env = dict(item.split("=", 1) for item in out.split("\0") if "=" in item)
    return {k: v for k, v in env.items() if k not in ("PWD", "SHLVL", "_")}


@pytest.fixture(scope="module")
def inventory(job_cluster, tmp_path_factory):
    return write_inventory(job_cluster, tmp_path_factory.mktemp("env") / "inv.yaml", JOB)


def test_env_files_equal_what_a_person_derives(job_cluster, inventory, tmp_path):
    res = pf("env", str(inventory), "--out-dir", str(tmp_path / "env"))
    assert res.returncode == 0, res.stderr
    expected = by_hand(job_cluster)
    files = sorted(p.name for p in (tmp_path / "env").iterdir())
    assert files == [f"{n}.env" for n in expected]
    for name, want in expected.items():
        path = tmp_path / "env" / f"{name}.env"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert sourced(path) == want, name


def test_json_and_torchrun_formats(inventory):
    res = pf("env", str(inventory), "--format", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "preflight.env/1" and [n["rank"] for n in doc["nodes"]] == list(range(8))
    assert doc["nodes"][3]["env"]["NODE_RANK"] == "3" and doc["nodes"][0]["nproc_per_node"] == 8
    res = pf("env", str(inventory), "--format", "torchrun")
    lines = res.stdout.splitlines()
    assert len(lines) == 8 and lines[2].startswith("node03: env HCCL_IF_IP=")
    assert "torchrun --nnodes=8 --node_rank=2 --nproc_per_node=8 --master_addr=" in lines[2]
    assert lines[2].endswith("--master_port=29500 /opt/Megatron-LM/pretrain_gpt.py")


def test_refuses_naming_node_and_check(job_cluster, tmp_path):
    """node04's launch environment names a NIC it does not have: no file is written for anyone."""
    job_cluster.exec("node04", "mkdir -p /etc/pfjob && echo 'export GLOO_SOCKET_IFNAME=eth9' > /etc/pfjob/job.env")
    try:
        inv = write_inventory(job_cluster, tmp_path / "inv.yaml", JOB, {"node04": ["/etc/pfjob/job.env"]},
                              drop_env=("GLOO_SOCKET_IFNAME",))
        res = pf("env", str(inv), "--out-dir", str(tmp_path / "env"))
    finally:
        job_cluster.exec("node04", "rm -rf /etc/pfjob")
    assert res.returncode == 1
    assert "preflight: env refused: node04: env.comm fail: GLOO_SOCKET_IFNAME=eth9: no interface eth9 on node04" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "env").exists()


def test_bad_job_input_is_one_line(job_cluster, tmp_path):
    bad = write_inventory(job_cluster, tmp_path / "bad.yaml", {**JOB, "hccl": {"HCCL_BUFFER_SIZE": 209715200}})
    res = pf("env", str(bad), "--format", "json")
    assert res.returncode == 2
    assert res.stderr.strip() == f"preflight: {bad}: job.hccl: HCCL_BUFFER_SIZE is not an HCCL variable (did you mean HCCL_BUFFSIZE?)"
    typo = write_inventory(job_cluster, tmp_path / "typo.yaml", {**JOB, "lod": "/x"})
    res = pf("env", str(typo), "--format", "json")
    assert res.returncode == 2 and "unknown job key (did you mean 'load'?)" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
