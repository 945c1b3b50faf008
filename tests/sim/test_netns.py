"""One netns cluster shared by the module: real sshd, real tools' formats, real pings."""
from __future__ import annotations

import shutil
import socket
import subprocess

import pytest

from preflight.sim import Cluster, render_npusmi
from tests.simfixtures import requires_netns

from .sshutil import Shell

pytestmark = requires_netns

SIM_MODE = "netns"
SIM_SPEC = {
    "cluster": "t",
    "nodes": ["n1", "n2", {"name": "n3", "layout": "A3"}, {"name": "n4", "layout": "310P", "npus": 1}],
}


@pytest.fixture(scope="module")
def sh(sim_cluster: Cluster):
    s = Shell(sim_cluster)
    yield s
    s.close()


def test_sshd_reachable_with_client_key_and_strict_known_hosts(sim_cluster: Cluster, sh: Shell) -> None:
    assert sh.run("n1", "hostname")[1] == "n1\n"
    n2 = sim_cluster.node("n2")
    cp = subprocess.run(["ssh", "-i", str(sim_cluster.client_key), "-o", f"UserKnownHostsFile={sim_cluster.known_hosts}",
                         "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
                         f"root@{n2.host}", "hostname"], capture_output=True, text=True, timeout=20)
    assert (cp.returncode, cp.stdout) == (0, "n2\n"), cp.stderr


def test_tools_print_rendered_text_over_ssh(sim_cluster: Cluster, sh: Shell) -> None:
    rc, out, _ = sh.run("n1", "npu-smi info")
    assert rc == 0 and out == render_npusmi.render_info(sim_cluster.state("n1"))
    assert "| Chip  Phy-ID " in sh.run("n3", "npu-smi info")[1]
    assert "| Chip    Device " in sh.run("n4", "npu-smi info")[1]
    assert sh.run("n1", "npu-smi info -t health -i 0 -c 0")[1].startswith("\tHealth Status                  : OK\n")
    assert sh.run("n1", "npu-smi info -i 0 -c 0 -t health")[0] == 0
    assert sh.run("n1", "npu-smi info -t usages -i 1")[1].startswith("\tNPU ID                         : 1\n")
    assert "HBM Double Bit Error Count" in sh.run("n3", "npu-smi info -t ecc -i 7 -c 1")[1]
    rc, out, _ = sh.run("n1", "npu-smi info -t board -i 99")
    assert rc != 0 and out == render_npusmi.INVALID_CARD
    assert sh.run("n1", "npu-smi info -x")[1].startswith("Command or option is not found.")
    tool = "/usr/local/Ascend/driver/tools/hccn_tool"
    assert sh.run("n1", f"{tool} -i 0 -link -g") == (0, "link status: UP\n", "")
    assert sh.run("n3", f"{tool} -i 15 -net_health -g") == (0, "net health status: Success\n", "")
    ip = sim_cluster.state("n1")["devices"][3]["ip"]
    assert sh.run("n1", f"{tool} -i 3 -ip -g")[1] == f"ipaddr:{ip}\nnetmask:255.255.255.0\n"
    assert sh.run("n1", f"{tool} -i 8 -link -g") == (1, "", "Get invalid device id.\n")
    assert sh.run("n4", f"{tool} -i 0 -link -g") == (1, "", "The command is not supported on this product.\n")
    assert sh.run("n1", f"{tool} -i 0 -bogus -g")[2] == "Get invalid major cmd.\n"


def test_install_tree_at_real_paths(sim_cluster: Cluster, sh: Shell) -> None:
    st = sim_cluster.state("n1")
    rc, out, _ = sh.run("n1", "cat /usr/local/Ascend/driver/version.info /usr/local/Ascend/firmware/version.info "
                              f"/usr/local/Ascend/ascend-toolkit/latest/{st['arch']}-linux/ascend_toolkit_install.info "
                              "/etc/hccn.conf")
    assert rc == 0 and f"Version={st['driver_version']}\n" in out and f"version={st['cann_version']}\n" in out
    assert f"address_0={st['devices'][0]['ip']}\n" in out
    rc, out, _ = sh.run("n1", "bash -c '. /usr/local/Ascend/ascend-toolkit/set_env.sh && for v in ASCEND_HOME_PATH "
                              "ASCEND_TOOLKIT_HOME ASCEND_OPP_PATH; do eval d=\\$$v; test -d $d || echo missing $v; done; "
                              "echo $LD_LIBRARY_PATH | tr : \"\\n\" | while read d; do [ -z \"$d\" ] || test -d $d || echo missing $d; done'")
    assert rc == 0 and out == "", out
    listed = sh.run("n1", "ls " + str(sim_cluster.dir / "mnt" / "data"))[1].split()
    assert listed == sorted(sim_cluster.state("n1")["data_files"]) and "train.bin" in listed


def test_host_and_device_pings(sim_cluster: Cluster, sh: Shell) -> None:
    n2 = sim_cluster.node("n2")
    assert sh.run("n1", f"ping -c1 -W1 {n2.host} >/dev/null")[0] == 0
    # nothing but our subnets is routable from a node
    assert sh.run("n1", "ip route | grep -c default")[1].strip() == "0"
    peer = sim_cluster.state("n2")["devices"][0]["ip"]
    tool = "/usr/local/Ascend/driver/tools/hccn_tool"
    rc, out, _ = sh.run("n1", f"{tool} -i 0 -ping -g address {peer} pkt 3")
    assert rc == 0 and out == f"device 0 PING {peer}\n3 packets transmitted, 3 received, 0.00% packet loss\n"


@pytest.mark.skipif(not shutil.which("iptables-restore"), reason="iptables not installed (apt-get install iptables)")
def test_drop_rule_makes_device_ping_fail(sim_cluster: Cluster, sh: Shell) -> None:
    peer = sim_cluster.state("n2")["devices"][1]["ip"]
    tool = "/usr/local/Ascend/driver/tools/hccn_tool"
    sim_cluster.inject("n2", "device_drop", device=1)
    try:
        out = sh.run("n1", f"{tool} -i 1 -ping -g address {peer} pkt 2")[1]
        assert "recv time out seq 0" in out and "2 packets transmitted, 0 received, 100.00% packet loss" in out
        other = sim_cluster.state("n2")["devices"][2]["ip"]
        assert "0.00% packet loss" in sh.run("n1", f"{tool} -i 2 -ping -g address {other} pkt 1")[1]
    finally:
        sim_cluster.reset("n2")
    assert "2 received" in sh.run("n1", f"{tool} -i 1 -ping -g address {peer} pkt 2")[1]


def test_link_down_and_missing_ip_really_fail(sim_cluster: Cluster, sh: Shell) -> None:
    tool = "/usr/local/Ascend/driver/tools/hccn_tool"
    peer = sim_cluster.state("n2")["devices"][4]["ip"]
    sim_cluster.inject("n1", "link_down", device=4)
    sim_cluster.inject("n1", "ip_missing", device=5)
    try:
        assert sh.run("n1", f"{tool} -i 4 -link -g")[1] == "link status: DOWN\n"
        assert "100.00% packet loss" in sh.run("n1", f"{tool} -i 4 -ping -g address {peer} pkt 1")[1]
        assert sh.run("n1", f"{tool} -i 5 -ip -g") == (1, "", "Get ipconf failed, because no ip was preset there!\n")
        assert "LINK DOWN" in sh.run("n1", f"{tool} -i 4 -link_stat -g")[1].splitlines()[3]
    finally:
        sim_cluster.reset("n1")
    assert "1 received" in sh.run("n1", f"{tool} -i 4 -ping -g address {peer} pkt 1")[1]


def test_npu_faults_show_in_tool_output(sim_cluster: Cluster, sh: Shell) -> None:
    sim_cluster.inject("n1", "npu_health", chip=3, status="Alarm", codes=["A4025021"])
    sim_cluster.inject("n1", "npu_process", device=2, pid=4242, name="python")
    try:
        table = sh.run("n1", "npu-smi info")[1]
        assert "| 3     910B3               | Alarm         |" in table
        assert "| 2       0                 | 4242          | python " in table
        health = sh.run("n1", "npu-smi info -t health -i 3 -c 0")[1]
        assert "Health Status                  : Alarm" in health and "A4025021" in health
        sim_cluster.inject("n1", "npu_smi_hang")
        assert sh.run("n1", "timeout 1 npu-smi info")[0] == 124
        sim_cluster.inject("n1", "npu_smi_busy")
        assert "ret is -8020" in sh.run("n1", "npu-smi info")[1]
        sim_cluster.inject("n1", "npu_smi_missing")
        assert sh.run("n1", "command -v npu-smi")[0] != 0
        sim_cluster.inject("n1", "set_env_missing")
        assert sh.run("n1", "test -e /usr/local/Ascend/ascend-toolkit/set_env.sh")[0] == 1
        sim_cluster.inject("n1", "version", component="cann", value="8.2.RC1")
        assert "version=8.2.RC1" in sh.run("n1", "cat /usr/local/Ascend/ascend-toolkit/latest/*-linux/ascend_toolkit_install.info")[1]
    finally:
        sim_cluster.reset("n1")
    assert "| 3     910B3               | OK " in sh.run("n1", "npu-smi info")[1]


def test_port_held_and_nothing_left_after_reset(sim_cluster: Cluster, sh: Shell) -> None:
    sim_cluster.inject("n2", "port_held", port=29500)
    out = sh.run("n2", "ss -Hltnp 'sport = :29500'")[1]
    assert ":29500" in out and "python" in out
    ns = sim_cluster.node("n2").namespace
    before = set(subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split())
    sim_cluster.reset("n2")
    after = set(subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split())
    assert len(before - after) >= 1 and sh.run("n2", "ss -Hltn 'sport = :29500'")[1] == ""


def test_data_faults(sim_cluster: Cluster, sh: Shell) -> None:
    data = sim_cluster.dir / "mnt" / "data"
    h1 = sh.run("n1", f"sha256sum {data}/train.bin")[1].split()[0]
    assert sh.run("n2", f"sha256sum {data}/train.bin")[1].split()[0] == h1
    sim_cluster.inject("n2", "data_different")
    sim_cluster.inject("n3", "data_missing")
    try:
        assert sh.run("n2", f"sha256sum {data}/train.bin")[1].split()[0] != h1
        assert sh.run("n3", f"test -e {data}/train.bin")[0] == 1
    finally:
        sim_cluster.reset("n2")
        sim_cluster.reset("n3")


def test_sshd_down_and_silent_banner(sim_cluster: Cluster) -> None:
    n4 = sim_cluster.node("n4")
    sim_cluster.stop_sshd("n4")
    try:
        with pytest.raises(OSError):
            socket.create_connection((n4.host, 22), timeout=2).close()
        sim_cluster.inject("n4", "silent_banner")
        with socket.create_connection((n4.host, 22), timeout=2) as s:
            s.settimeout(1.0)
            with pytest.raises(socket.timeout):
                s.recv(10)
    finally:
        sim_cluster.start_sshd("n4")
    with socket.create_connection((n4.host, 22), timeout=2) as s:
        s.settimeout(5)
        assert s.recv(4) == b"SSH-"


def test_exec_runs_inside_the_node(sim_cluster: Cluster) -> None:
    cp = sim_cluster.exec("n3", "hostname; ip -o -4 addr show eth0 | wc -l; npu-smi info -l | head -1")
    assert cp.stdout.splitlines() == ["n3", "1", "\tTotal Count                    : 8"]
    procs = sim_cluster.node_processes("n3")
    # the listener and the sessions the module's paramiko connections hold: sshd only, nothing left over
    assert sim_cluster.sshd_pid("n3") in [p for p, _ in procs] and all("sshd" in cmd for _, cmd in procs), procs
