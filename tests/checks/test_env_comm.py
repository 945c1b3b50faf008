"""env.comm on real `ip` output (captured on the test machine, see tests/net/test_helpers.py) and
launch environments built as `env -0` prints them."""
import pytest

from preflight.checks import env_comm as C
from preflight.checkapi import CommandOutput, Status
from preflight.net import procnet
from preflight.node import Node
from tests.net.test_helpers import IP_JSON, IP_TEXT
from tests.support import fixture_body

# A second NIC for the multi-NIC cases, in `ip addr` text form (same grammar as IP_TEXT).
TWO_NICS = IP_TEXT + """\
5: eth1: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc pfifo_fast state UP group default qlen 1000
    link/ether 02:fc:00:00:00:02 brd ff:ff:ff:ff:ff:ff
    inet 10.9.0.2/16 brd 10.9.255.255 scope global eth1
       valid_lft forever preferred_lft forever
6: eth2: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 1500 qdisc pfifo_fast state DOWN group default qlen 1000
    link/ether 02:fc:00:00:00:03 brd ff:ff:ff:ff:ff:ff
    inet 10.8.0.2/16 brd 10.8.255.255 scope global eth2
       valid_lft forever preferred_lft forever
"""
ROUTE_OK = "192.0.2.9 dev eth0 src 192.0.2.2 uid 0 \n    cache \n"
ROUTE_LOCAL = "local 192.0.2.2 dev lo src 192.0.2.2 uid 0 \n    cache <local> \n"
NODE = Node(name="node02", host="192.0.2.2", backend="ascend")


def env0(**env) -> CommandOutput:
    return CommandOutput(stdout="".join(f"{k}={v}\0" for k, v in {"PATH": "/usr/bin", **env}.items()))


def master_out(ips=("192.0.2.9",), route=ROUTE_OK) -> CommandOutput:
    lines = "".join(f"{ip}       STREAM {ip}\n{ip}       DGRAM  \n" for ip in ips)
    return CommandOutput(stdout=f"{lines}{C.ROUTE_MARK} {0 if ips else 2}\n{route}")


def run(env, ip=IP_JSON, master=None, node=NODE, params=None):
    outs = {"launch_env": env0(**env), C.IP_PROBE: CommandOutput(stdout=ip)}
    if master is not None:
        outs[C.MASTER_PROBE] = master
    facts = C.parse(outs)
    (f,) = C.evaluate(facts, {**C.DEFAULTS, **(params or {})}, node)
    return facts, f


def test_probes_share_launch_env_and_ip():
    p = C.probes(NODE, C.DEFAULTS)
    assert "LC_ALL=C ip -j addr" in p[C.IP_PROBE].cmd and "launch_env" in p


def test_followup_asks_master_only_when_set():
    assert C.followup({"launch_env": env0()}, NODE, {}) == {}
    f = C.followup({"launch_env": env0(MASTER_ADDR="head; rm -rf /")}, NODE, {})
    assert "'head; rm -rf /'" in f[C.MASTER_PROBE].cmd  # quoted


@pytest.mark.parametrize("ip", [IP_JSON, IP_TEXT], ids=["json", "text"])
def test_good_env_passes(ip):
    facts, f = run({"HCCL_IF_IP": "192.0.2.2", "HCCL_SOCKET_IFNAME": "eth", "GLOO_SOCKET_IFNAME": "eth0",
                    "MASTER_ADDR": "192.0.2.9", "MASTER_PORT": "29500", "HCCL_CONNECT_TIMEOUT": "600",
                    "HCCL_BUFFSIZE": "200"}, ip=ip, master=master_out())
    assert f.status is Status.PASS, f.summary
    assert facts.comm().ip == "192.0.2.2" and facts.comm().iface == "eth0"
    assert f.details["launch_env"]["MASTER_PORT"] == "29500" and "PATH" not in f.details["launch_env"]
    assert not facts.is_master


def test_secret_redacted_in_details():
    _, f = run({"HCCL_IF_IP": "192.0.2.2", "NCCL_IB_TOKEN": "s3cret"})
    assert f.details["launch_env"]["NCCL_IB_TOKEN"] == "********"


def test_if_ip_not_on_node_fails():
    _, f = run({"HCCL_IF_IP": "10.0.0.7"})
    assert f.status is Status.FAIL and "HCCL_IF_IP=10.0.0.7 is not an address of node02" in f.summary
    assert "eth0 (UP, 192.0.2.2)" in f.summary and f.remediation


def test_if_ip_on_down_interface_fails():
    _, f = run({"HCCL_IF_IP": "10.8.0.2"}, ip=TWO_NICS)
    assert f.status is Status.FAIL and "eth2, which is NO-CARRIER" in f.summary


def test_if_ip_loopback_fails():
    _, f = run({"HCCL_IF_IP": "127.0.0.1"})
    assert f.status is Status.FAIL and "loopback" in f.summary


@pytest.mark.parametrize("value,ok", [("eth", True), ("=eth0", True), ("^=lo,ifb0", True), ("^eth", False),
                                      ("=eth", False), ("ens", False), ("lo", False), ("ifb", False)])
def test_hccl_socket_ifname_syntax(value, ok):
    _, f = run({"HCCL_SOCKET_IFNAME": value})
    assert (f.status is Status.PASS) == ok, f.summary


def test_gloo_missing_nic_fails():
    _, f = run({"GLOO_SOCKET_IFNAME": "eth9"})
    assert f.status is Status.FAIL and "no interface eth9 on node02" in f.summary


def test_gloo_nccl_syntax_fails_with_gloo_error():
    _, f = run({"GLOO_SOCKET_IFNAME": "^lo,docker"})
    assert f.status is Status.FAIL and "Unable to find address for: ^lo" in f.summary


def test_gloo_down_nic_fails():
    _, f = run({"GLOO_SOCKET_IFNAME": "ifb0", "HCCL_SOCKET_IFNAME": "eth0"})
    assert f.status is Status.FAIL and "ifb0 is DOWN" in f.summary


def test_if_ip_and_ifname_disagree_warns():
    _, f = run({"HCCL_IF_IP": "10.9.0.2", "HCCL_SOCKET_IFNAME": "=eth0"}, ip=TWO_NICS)
    assert f.status is Status.WARN and "disagree" in f.summary


def test_gloo_on_other_network_warns():
    _, f = run({"HCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth1"}, ip=TWO_NICS)
    assert f.status is Status.WARN and "not on the HCCL network" in f.summary


def test_implicit_nic_on_multi_nic_host_warns():
    facts, f = run({}, ip=TWO_NICS)
    assert f.status is Status.WARN and "HCCL picks eth0 by name order" in f.summary
    assert facts.comm().source == "default" and facts.comm().iface == "eth0"
    _, f = run({}, ip=TWO_NICS, params={"warn_implicit_nic": False})
    assert f.status is Status.PASS


def test_implicit_nic_single_nic_passes():
    _, f = run({})
    assert f.status is Status.PASS and "eth0 192.0.2.2 (from default)" in f.summary


def test_nccl_ifname_on_ascend_warns():
    _, f = run({"NCCL_SOCKET_IFNAME": "eth0"}, ip=TWO_NICS, params={"warn_implicit_nic": False})
    assert f.status is Status.WARN and "no effect on Ascend" in f.summary


def test_nccl_ifname_on_nvidia_is_judged():
    nv = Node(name="gpu1", host="h", backend="nvidia")
    facts, f = run({"NCCL_SOCKET_IFNAME": "^=eth0"}, node=nv)
    assert f.status is Status.FAIL and "NCCL_SOCKET_IFNAME=^=eth0 selects no UP" in f.summary
    facts, f = run({"NCCL_SOCKET_IFNAME": "eth"}, node=nv)
    assert f.status is Status.PASS and facts.comm("nvidia").iface == "eth0"


def test_typo_buffer_size_warns_with_converted_value():
    _, f = run({"HCCL_BUFFER_SIZE": "209715200"})
    assert f.status is Status.WARN and "HCCL_BUFFER_SIZE is not an HCCL variable (did you mean HCCL_BUFFSIZE?)" in f.summary
    assert "export HCCL_BUFFSIZE=200" in f.remediation


def test_close_name_typo_and_unknown_name():
    _, f = run({"HCCL_CONECT_TIMEOUT": "600"})
    assert f.status is Status.WARN and "HCCL_CONNECT_TIMEOUT" in f.summary
    _, f = run({"HCCL_SOMETHING_NEW": "1"})  # unknown but close to nothing: not judged
    assert f.status is Status.PASS


@pytest.mark.parametrize("name,value,ok", [
    ("HCCL_CONNECT_TIMEOUT", "120", True), ("HCCL_CONNECT_TIMEOUT", "60", False), ("HCCL_CONNECT_TIMEOUT", "7201", False),
    ("HCCL_CONNECT_TIMEOUT", "2m", False), ("HCCL_BUFFSIZE", "200", True), ("HCCL_BUFFSIZE", "0", False),
    ("HCCL_BUFFSIZE", "209715200", False), ("HCCL_BUFFSIZE", "1.5", False), ("HCCL_IF_BASE_PORT", "50000", True),
    ("HCCL_IF_BASE_PORT", "65530", False), ("HCCL_IF_BASE_PORT", "80", False), ("MASTER_PORT", "70000", False),
    ("HCCL_HOST_SOCKET_PORT_RANGE", "60000-60050", True), ("HCCL_HOST_SOCKET_PORT_RANGE", "auto", True),
    ("HCCL_HOST_SOCKET_PORT_RANGE", "60000,60050-60100", True), ("HCCL_HOST_SOCKET_PORT_RANGE", "6-x", False),
    ("HCCL_ALGO", "level0:NA;level1:H-D_R", True), ("HCCL_ALGO", "allreduce=level0:NA;level1:ring/alltoall=level0:NA;level1:pairwise", True),
    ("HCCL_ALGO", "ring", False), ("HCCL_SOCKET_FAMILY", "AF_INET7", False), ("HCCL_INTRA_ROCE_ENABLE", "yes", False),
])
def test_values(name, value, ok):
    _, f = run({name: value})
    assert (f.status is Status.PASS) == ok, f.summary
    if not ok:
        assert name in f.summary


def test_master_owned_here_is_master():
    facts, f = run({"MASTER_ADDR": "192.0.2.2"}, master=master_out(("192.0.2.2",), ROUTE_LOCAL))
    assert facts.is_master and f.status is Status.PASS and f.details["master"] is True


def test_master_unresolvable_fails():
    _, f = run({"MASTER_ADDR": "head.invalid"}, master=master_out((), ""))
    assert f.status is Status.FAIL and "MASTER_ADDR=head.invalid does not resolve" in f.summary


def test_master_loopback_fails():
    _, f = run({"MASTER_ADDR": "localhost"}, master=master_out(("127.0.0.1",), "local 127.0.0.1 dev lo src 127.0.0.1 uid 0\n"))
    assert f.status is Status.FAIL and "resolves to loopback 127.0.0.1" in f.summary


def test_master_unroutable_fails():
    _, f = run({"MASTER_ADDR": "203.0.113.5"}, master=master_out(("203.0.113.5",), "RTNETLINK answers: Network is unreachable\n"))
    assert f.status is Status.FAIL and "not reachable from node02" in f.summary


def test_master_via_other_nic_warns():
    route = "10.9.0.1 dev eth1 src 10.9.0.2 uid 0 \n    cache \n"
    _, f = run({"MASTER_ADDR": "10.9.0.1", "HCCL_SOCKET_IFNAME": "=eth0"}, ip=TWO_NICS, master=master_out(("10.9.0.1",), route))
    assert f.status is Status.WARN and "routed via eth1" in f.summary


def test_no_interface_source_fails_naming_both():
    outs = {"launch_env": env0(), C.IP_PROBE: CommandOutput(stdout="", stderr="sh: 1: cat: not found\n", rc=127)}
    (f,) = C.evaluate(C.parse(outs), C.DEFAULTS, NODE)
    assert f.status is Status.FAIL and "neither `ip` nor /sys/class/net + /proc/net" in f.summary
    assert "/sys/class/net" in f.remediation


# The real multi-NIC namespace read without `ip` (tests/net/test_procnet.py): the dump, and the
# route tables as the master probe prints them where `ip` is missing.
NOIP_DUMP = fixture_body("procnet_dump__multinic_netns__real-capture.txt").partition("@@oracle\n")[0]
_FILES = procnet.split(NOIP_DUMP).files
NOIP_ROUTES = procnet.MARK + "\n" + "".join(f"@@file {f}\n{_FILES[f]}\n" for f in ("/proc/net/route", "/proc/net/ipv6_route"))


def test_without_ip_interfaces_and_route_come_from_proc():
    """The real H200 node had no `ip`: env.comm judges the node from /sys/class/net and /proc/net
    and says so, where it used to fail it with "install iproute2"."""
    env = {"HCCL_IF_IP": "10.20.0.2", "GLOO_SOCKET_IFNAME": "eth0", "MASTER_ADDR": "203.0.113.5"}
    facts, f = run(env, ip=NOIP_DUMP, master=master_out(("203.0.113.5",), NOIP_ROUTES))
    assert f.status is Status.WARN and "routed via eth1 gateway 192.168.77.1" in f.summary  # `ip route get` agrees
    assert f.details["interfaces_source"] == "/sys/class/net + /proc/net"
    _, f = run({**env, "MASTER_ADDR": "10.20.0.9"}, ip=NOIP_DUMP, master=master_out(("10.20.0.9",), NOIP_ROUTES))
    assert f.status is Status.PASS and "interfaces read from /sys/class/net + /proc/net (no `ip` on the node)" in f.summary
    _, f = run({**env, "MASTER_ADDR": "198.51.100.7"}, ip=NOIP_DUMP, master=master_out(("198.51.100.7",), NOIP_ROUTES))
    assert f.status is Status.FAIL and "no route to 198.51.100.7 in /proc/net/route (unreachable)" in f.summary
    _, f = run({"HCCL_IF_IP": "172.16.9.9"}, ip=NOIP_DUMP)  # on dummy0, admin-down: not listed by /proc
    assert f.status is Status.FAIL and "not an address of node02" in f.summary


def test_unreadable_launch_env_is_parse_error():
    from preflight.checkapi import ParseError
    with pytest.raises(ParseError):
        C.parse({"launch_env": CommandOutput(rc=1, stderr="bash: no such file"), C.IP_PROBE: CommandOutput(stdout=IP_JSON)})


def test_vendor_env_sample_passes():
    # The observed environment after set_env.sh (vllm-ascend #4930): no HCCL variables, judged by default rules.
    body = fixture_body("env_after_set_env_sh__A3_container__vllm-ascend-4930.txt")
    env = dict(line.split("=", 1) for line in body.splitlines() if "=" in line)
    _, f = run(env)
    assert f.status is Status.PASS, f.summary
