"""env.consistency: variables, master, addresses, device IPs, TLS/FEC (on the vendor samples), clocks."""
import pytest

from preflight.checks import env_comm, env_consistency as E
from preflight.checks.hccn_ip import DeviceIp, Facts as IpFacts
from preflight.ascend import probes as ascend
from preflight.checkapi import ClusterContext, CommandOutput, ParseError, Status
from preflight.net import iproute
from preflight.node import Node
from tests.support import fixture_body

TLS = fixture_body("hccn_tool_-tls_-g_grep_switch__mindcluster-doc.txt")  # tls switch[0]
FEC_RS = fixture_body("hccn_tool_-fec_-g__rs_FEC__mindcluster-doc.txt")
FEC_NO = fixture_body("hccn_tool_-fec_-g__no_FEC__mindcluster-fixture.txt")
NPU_SMI = fixture_body("npu-smi_info__910B3_8card_1proc__vllm-ascend-6512.txt")
# `tls switch[1]`: the same DRV format string as the sample with the enabled value (docs/FORMATS.md §3.8).
TLS_ON = TLS.replace("tls switch[0]", "tls switch[1]")


def iface(ip, name="eth0", plen=24):
    return iproute.Interface(name, ("BROADCAST", "MULTICAST", "UP", "LOWER_UP"), "UP",
                             (iproute.Address(ip, plen, "inet"),))


def node_facts(i, env=None, ip=None, master=False, devices=None, tls=None, fec=None, offset=0.0, names=("eth0",)):
    ip = ip or f"10.0.0.{i}"
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "HCCL_IF_IP": ip, **(env or {})}
    ifs = tuple(iface(ip if k == 0 else f"10.{k}.0.{i}", n) for k, n in enumerate(names))
    comm = env_comm.Facts(env=env, interfaces=ifs, master_addr=env["MASTER_ADDR"],
                          master_ips=(env["MASTER_ADDR"],) if env["MASTER_ADDR"] else ())
    devs = devices if devices is not None else {d: DeviceIp(f"192.168.{d}.{i}", "255.255.255.0") for d in range(2)}
    own = E.Facts(offset, tls if tls is not None else {0: 0, 1: 0}, fec if fec is not None else {0: "rs FEC mode", 1: "rs FEC mode"},
                  {0: (0, 0), 1: (1, 0)})
    return {"env.comm": comm, "hccn.ip": IpFacts(None, None, devs), E.ID: own}


def ctx(*facts, unreachable=()):
    names = [f"node{i:02}" for i in range(1, len(facts) + 1)]
    return ClusterContext(nodes={n: Node(name=n, host=n, backend="ascend") for n in names},
                          facts=dict(zip(names, facts)), params=dict(E.DEFAULTS), unreachable=unreachable)


def good(n=3, over=None):
    return [node_facts(i, **(over or {}).get(i, {})) for i in range(1, n + 1)]


def by_node(findings):
    return {f.node: f for f in findings}


def test_all_agree_passes():
    (f,) = E.evaluate(ctx(*good()))
    assert f.status is Status.PASS and f.node is None
    assert f.details["values"]["MASTER_PORT"] == "29500 on node01,node02,node03"
    assert [m["name"] for m in f.details["metrics"]] == ["clock_offset"] * 3


def test_outlier_variable_blamed_with_majority():
    fs = E.evaluate(ctx(*good(3, {1: {"env": {"HCCL_CONNECT_TIMEOUT": "600"}}, 2: {"env": {"HCCL_CONNECT_TIMEOUT": "600"}}})))
    summary, *nodes = fs
    assert summary.status is Status.FAIL and [f.node for f in nodes] == ["node03"]
    assert "HCCL_CONNECT_TIMEOUT is <unset> on node03, expected 600 (as on 2 of 3 nodes)" in nodes[0].summary


def test_two_nodes_two_values_blames_nobody():
    summary, *nodes = E.evaluate(ctx(*good(2, {1: {"env": {"MASTER_PORT": "29501"}}})))
    assert summary.status is Status.FAIL and not nodes
    assert "MASTER_PORT differs with no majority: 29500 on node02; 29501 on node01" in summary.summary


def test_ifname_compared_only_when_names_uniform():
    over = {1: {"env": {"GLOO_SOCKET_IFNAME": "eth0"}}, 2: {"env": {"GLOO_SOCKET_IFNAME": "eth0"}},
            3: {"env": {"GLOO_SOCKET_IFNAME": "ens1"}}}
    summary, *nodes = E.evaluate(ctx(*good(3, over)))
    assert [f.node for f in nodes] == ["node03"]
    over[3]["names"] = ("ens1",)  # node03's NIC really is called differently: nothing to compare
    (f,) = E.evaluate(ctx(*good(3, over)))
    assert f.status is Status.PASS


def test_master_owned_by_nobody_fails():
    (summary,) = E.evaluate(ctx(*good(3, {i: {"env": {"MASTER_ADDR": "10.0.0.99"}} for i in (1, 2, 3)})))
    assert summary.status is Status.FAIL and "MASTER_ADDR 10.0.0.99 is not an UP address of any reachable node" in summary.summary


def test_master_resolving_differently_blames_outlier():
    facts = good(3)
    c = facts[2]["env.comm"]
    facts[2]["env.comm"] = env_comm.Facts(env=c.env, interfaces=c.interfaces, master_addr="10.0.0.1", master_ips=("10.0.0.2",))
    summary, *nodes = E.evaluate(ctx(*facts))
    assert [f.node for f in nodes] == ["node03"] and "MASTER_ADDR resolves to is 10.0.0.2" in nodes[0].summary


def test_duplicate_comm_address_and_subnet_outlier():
    summary, *nodes = E.evaluate(ctx(*good(3, {3: {"ip": "10.0.0.2"}})))
    assert sorted(f.node for f in nodes) == ["node02", "node03"] and "10.0.0.2 is used by node02, node03" in nodes[0].summary
    summary, *nodes = E.evaluate(ctx(*good(3, {3: {"ip": "10.0.1.3", "env": {}}})))
    assert [f.node for f in nodes] == ["node03"] and "communication subnet is 10.0.1.0/24" in nodes[0].summary


def test_duplicate_device_ip_names_both_devices():
    dup = {0: DeviceIp("192.168.0.1", "255.255.255.0"), 1: DeviceIp("192.168.1.2", "255.255.255.0")}
    summary, *nodes = E.evaluate(ctx(*good(2, {2: {"devices": dup}})))
    f = by_node(nodes)
    assert f["node01"].details["failed_devices"] == [0] and f["node02"].details["failed_devices"] == [0]
    assert "device IP 192.168.0.1 is used by node01 device 0, node02 device 0" in f["node02"].summary
    assert f["node01"].details["devices"][0] == {"device": 0, "npu": 0, "chip": 0}


def test_rail_subnet_outlier():
    other = {0: DeviceIp("192.168.0.3", "255.255.255.0"), 1: DeviceIp("192.169.1.3", "255.255.255.0")}
    summary, *nodes = E.evaluate(ctx(*good(3, {3: {"devices": other}})))
    assert [f.node for f in nodes] == ["node03"] and nodes[0].details["failed_devices"] == [1]
    assert "device 1 subnet is 192.169.1.0/24" in nodes[0].summary


def test_missing_device_ip_left_to_hccn_ip():
    (f,) = E.evaluate(ctx(*good(3, {2: {"devices": {0: DeviceIp(None, None, error="no ip")}}})))
    assert f.status is Status.PASS


def test_tls_outlier_device():
    summary, *nodes = E.evaluate(ctx(*good(3, {2: {"tls": {0: 0, 1: 1}}})))
    assert [f.node for f in nodes] == ["node02"] and nodes[0].details["failed_devices"] == [1]
    assert "TLS switch on node02 devices 1 is 1, expected 0" in nodes[0].summary


def test_no_fec_warns_and_mismatch_fails():
    summary, *nodes = E.evaluate(ctx(*good(3, {3: {"fec": {0: "no FEC mode", 1: "rs FEC mode"}}})))
    (f,) = nodes
    assert f.node == "node03" and f.status is Status.FAIL and "FEC disabled" in f.summary
    every = {i: {"fec": {0: "no FEC mode", 1: "no FEC mode"}} for i in (1, 2)}
    summary, *nodes = E.evaluate(ctx(*good(2, every)))
    assert summary.status is Status.WARN and len(nodes) == 2 and nodes[0].details["failed_devices"] == [0, 1]


@pytest.mark.parametrize("offset,status", [(0.4, Status.PASS), (-2.5, Status.WARN), (45.0, Status.FAIL)])
def test_clock(offset, status):
    fs = E.evaluate(ctx(*good(3, {2: {"offset": offset}})))
    assert fs[0].status is status
    if status is not Status.PASS:
        assert fs[1].node == "node02" and ("behind" if offset < 0 else "ahead") in fs[1].summary


def loop(body_by_dev):
    return CommandOutput(stdout="".join(f"{ascend.DEV_MARK} {d}\n{b}{ascend.RC_MARK} 0\n" for d, b in body_by_dev.items()))


def test_parse_vendor_samples():
    outs = {E.CLOCK_PROBE: CommandOutput(stdout="1796107795.123812501\n", duration_s=0.01, node_started_at=1000.0,
                                         received_at=1000.5),
            ascend.NPU_SMI_PROBE: CommandOutput(stdout=NPU_SMI),
            "tls": loop({0: TLS, 1: TLS_ON}), "fec": loop({0: FEC_RS, 1: FEC_NO})}
    f = E.parse(outs)
    assert f.tls == {0: 0, 1: 1} and f.fec == {0: "rs FEC mode", 1: "no FEC mode"}
    assert f.clock_offset_s == pytest.approx(-0.49)
    assert f.chips[0] == (0, 0)


def test_parse_clock_fallback_and_error():
    f = E.parse({E.CLOCK_PROBE: CommandOutput(stdout="1000.0\n", received_at=990.0)})
    assert f.clock_offset_s == pytest.approx(10.0) and f.hccn_note == "not an Ascend node"
    with pytest.raises(ParseError):
        E.parse({E.CLOCK_PROBE: CommandOutput(stdout="date: invalid\n", received_at=1.0)})


def test_parse_hccn_missing_and_device_error():
    miss = CommandOutput(stdout=f"{ascend.MISSING_MARK} /usr/local/Ascend/driver/tools/hccn_tool\n", rc=127)
    f = E.parse({E.CLOCK_PROBE: CommandOutput(), ascend.NPU_SMI_PROBE: CommandOutput(stdout=NPU_SMI), "tls": miss, "fec": miss})
    assert "hccn_tool not found" in f.hccn_note
    busy = "hccn_tool is busy, please try again.\n"
    f = E.parse({E.CLOCK_PROBE: CommandOutput(), ascend.NPU_SMI_PROBE: CommandOutput(stdout=NPU_SMI),
                 "tls": loop({0: TLS, 1: busy}), "fec": loop({0: FEC_RS})})
    assert f.tls[1].startswith("error") and f.tls[0] == 0


def test_probes_per_backend():
    assert set(E.probes(Node(name="a", host="a", backend="nvidia"), {})) == {E.CLOCK_PROBE}
    assert ascend.NPU_SMI_PROBE in E.probes(Node(name="a", host="a"), {})
    fu = E.followup({ascend.NPU_SMI_PROBE: CommandOutput(stdout=NPU_SMI)}, Node(name="a", host="a"), {})
    assert set(fu) == {"tls", "fec"} and "-tls -g" in fu["tls"].cmd


def test_variables_are_compared_within_each_backend():
    """Two Ascend nodes on HCCL, two NVIDIA nodes on NCCL with their own MASTER_ADDR: separate
    launches, so no variable 'differs'; an outlier inside one backend is still blamed."""
    facts = [node_facts(1), node_facts(2), node_facts(3, env={"MASTER_ADDR": "10.0.0.3"}),
             node_facts(4, env={"MASTER_ADDR": "10.0.0.3"})]
    names = [f"node{i:02}" for i in range(1, 5)]
    nodes = {n: Node(name=n, host=n, backend="ascend" if i < 2 else "nvidia") for i, n in enumerate(names)}
    c = ClusterContext(nodes=nodes, facts=dict(zip(names, facts)), params=dict(E.DEFAULTS))
    assert [p for p in E.rule_variables(c)] == []
    mixed_ctx = ClusterContext(nodes={n: Node(name=n, host=n, backend="ascend") for n in names},
                               facts=dict(zip(names, facts)), params=dict(E.DEFAULTS))
    assert any(p.message.startswith("MASTER_ADDR differs") for p in E.rule_variables(mixed_ctx))


def test_subnet_is_what_ipaddress_reads():
    """env.consistency's rail subnets (iproute.subnet) give ipaddress.ip_interface(...).network, and
    refuses (ValueError) what it refuses, on real netmasks and on malformed or odd addresses."""
    import ipaddress
    import random

    from preflight.net.iproute import subnet

    rng = random.Random(3)
    octets = ["0", "1", "10", "255", "256", "01", "1a", "²", "", "192", "168", "-1", " 1"]
    masks = [None, "", "255.255.255.0", "255.255.0.0", "255.255.252.0", "0.0.0.0", "255.255.255.255",
             "255.0.255.0", "0.0.0.255", "24", "33", "ffff::", "255.255.255.0 ", "256.255.255.0", "0", "32", "8",
             "024", "08", "+8", " 8", "8 ", "\u0663", "-1", "00"]
    cases = [("10.0.0.7", "255.255.255.0"), ("::1", None), ("fe80::1", "64")]
    for _ in range(4000):
        ip = ".".join(rng.choice(octets) for _ in range(rng.choice([3, 4, 4, 4, 5])))
        cases.append((ip, rng.choice(masks)))
    for ip, mask in cases:
        try:
            want = str(ipaddress.ip_interface(f"{ip}/{mask or 32}").network)
        except ValueError:
            with pytest.raises(ValueError):
                subnet(ip, mask)
            continue
        assert subnet(ip, mask) == want, (ip, mask)
