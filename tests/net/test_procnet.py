"""Interfaces, addresses and routes without `ip` (preflight/net/procnet.py), on real captures.

The three `procnet_dump__*netns__real-capture.txt` files are iproute.PROCNET_DUMP run in network
namespaces of the test machine with only `cat` on PATH, each followed (after `@@oracle`) by what
iproute2 itself printed in the same namespace right after: `ip -j addr show` and `ip route get`
for several destinations. The oracle is iproute2, not this project: both readings must agree,
except where procnet's docstring says the kernel's files cannot tell. The multi-NIC namespace was
set up with (NS=pfcapnodes; n="ip -n $NS"):

    $n link set lo up; $n link add eth0 type veth peer name eth1
    $n addr add 10.20.0.2/24 dev eth0; $n addr add 10.20.0.3/24 dev eth0
    $n -6 addr add fd00:20::2/64 dev eth0 nodad; $n link set eth0 up; $n link set eth1 up
    $n addr add 192.168.77.5/16 dev eth1
    $n link add dummy0 type veth peer name dummy1; $n addr add 172.16.9.9/28 dev dummy0
    $n link add br9 type bridge; $n addr add 10.99.0.1/24 dev br9; $n link set br9 up
    $n route add default via 10.20.0.1; $n route add 203.0.113.0/24 via 192.168.77.1
    $n route add unreachable 198.51.100.0/24

The public samples (a VirtualBox VM's /proc/net, a Docker container's fib_trie) are read file by file.
"""
from __future__ import annotations

import subprocess

import pytest

from preflight.checkapi import CommandOutput, ParseError
from preflight.net import iproute, procnet, sockets
from tests.support import fixture_body

CAPTURES = ["procnet_dump__multinic_netns__real-capture.txt", "procnet_dump__container_netns__real-capture.txt",
            "procnet_dump__container_nocarrier_netns__real-capture.txt"]


def _capture(name: str) -> tuple[str, str, dict[str, str]]:
    """(the dump, `ip -j addr show`'s JSON, {destination: `ip route get` output})."""
    dump, _, oracle = fixture_body(name).partition("@@oracle\n")
    parts = oracle.split("$ ")[1:]
    outputs = {p.split("\n", 1)[0]: p.split("\n", 1)[1] for p in parts}
    routes = {cmd.rsplit(" ", 1)[1]: text for cmd, text in outputs.items() if cmd.startswith("ip route get ")}
    return dump, outputs["ip -j addr show"], routes


def _view(ifs):
    return {i.name: (i.up, i.loopback, i.state(), sorted((a.ip, a.prefixlen, a.family, a.scope) for a in i.addrs))
            for i in ifs}


@pytest.mark.parametrize("name", CAPTURES)
def test_interfaces_agree_with_iproute2(name):
    dump, ip_json, _ = _capture(name)
    ifs, source = iproute.read_addr(CommandOutput(stdout=dump))
    assert source == "/sys/class/net + /proc/net" == procnet.SOURCE
    oracle = iproute.parse_json(ip_json)
    assert [i.name for i in ifs] == [i.name for i in oracle]  # ifindex order
    mine, theirs = _view(ifs), _view(oracle)
    for if_name, (up, loop, state, addrs) in theirs.items():
        if if_name == "dummy0":  # admin-down: the kernel dropped its connected route (module docstring)
            assert mine[if_name][:3] == (up, loop, state) and mine[if_name][3] == []
            assert addrs == [("172.16.9.9", 28, "inet", "global")]
            continue
        assert mine[if_name] == (up, loop, state, addrs), if_name


def test_multinic_capture_reads_as_a_node():
    dump, _, _ = _capture(CAPTURES[0])
    ifs = iproute.parse_addr(CommandOutput(stdout=dump))
    eth0 = next(i for i in ifs if i.name == "eth0")
    assert [str(a) for a in eth0.addresses("inet")] == ["10.20.0.2/24", "10.20.0.3/24"]
    assert [a.ip for a in eth0.addresses("inet6")] == ["fd00:20::2"]  # the link-local one left out
    assert iproute.owner(ifs, "192.168.77.5").name == "eth1"
    nocarrier = iproute.parse_addr(CommandOutput(stdout=_capture(CAPTURES[2])[0]))
    assert next(i for i in nocarrier if i.name == "eth0").state() == "NO-CARRIER"


@pytest.mark.parametrize("name", CAPTURES)
def test_routes_agree_with_ip_route_get(name):
    dump, ip_json, routes = _capture(name)
    ifs = iproute.parse_addr(CommandOutput(stdout=dump))
    assert routes
    for dst, text in routes.items():
        got = procnet.route_to(dst, dump, ifs)
        if text.startswith("RTNETLINK answers"):  # No route to host / Network is unreachable
            assert got is not None and got.kind == "unreachable", dst
            continue
        want = iproute.parse_route_get(text)
        assert (got.kind, got.dev, got.via, got.src) == (want.kind, want.dev, want.via, want.src), dst


def test_no_route_at_all():
    dump, _, _ = _capture(CAPTURES[2])
    table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    assert procnet.route_to("10.1.2.3", procnet.MARK + "\n@@file /proc/net/route\n" + table, ()) is None


def _transcript(name: str, prompt: str) -> dict[str, str]:
    """`<prompt> cat X` lines -> {X: what cat printed}."""
    out = {}
    for part in fixture_body(name).split(prompt + " cat ")[1:]:
        head, _, text = part.partition("\n")
        out[head.strip()] = text
    return out


def test_public_vm_proc_net():
    files = _transcript("proc_net__ubuntu_virtualbox_vm__github-doc.txt", "root@weikang-VirtualBox:/proc/net#")
    assert procnet.fib_locals(files["fib_trie"]) == ["10.0.2.15", "127.0.0.1"]
    routes = procnet.parse_route(files["route"])
    assert [(r.iface, str(r.net), r.gateway, r.metric) for r in routes] == [
        ("enp0s3", "0.0.0.0/0", "10.0.2.2", 100), ("enp0s3", "10.0.2.0/24", None, 100),
        ("enp0s3", "169.254.0.0/16", None, 1000)]
    v6 = procnet.parse_if_inet6(files["if_inet6"])
    assert [(n, a.ip, a.prefixlen, a.scope) for n, a in v6] == [
        ("lo", "::1", 128, "host"), ("enp0s3", "fe80::2867:25bb:745c:e16b", 64, "link")]
    (listener,) = sockets.parse_proc(files["tcp"])
    assert (listener.address, listener.port) == ("127.0.1.1", 53)  # Ubuntu's dnsmasq stub on 127.0.1.1


def test_public_container_fib_trie():
    text = fixture_body("proc_net_fib_trie__docker_container_172.20.0.2__github-writeup.txt")
    assert procnet.fib_locals(text) == ["127.0.0.1", "172.20.0.2"]


def test_garbage_is_a_parse_error():
    with pytest.raises(ParseError):
        procnet.parse_dump(procnet.MARK + "\n")  # no interface
    with pytest.raises(ParseError):
        procnet.parse_route("Iface\tDestination\nfoo\tbar\n")
    with pytest.raises(ParseError):
        procnet.parse_if_inet6("zz 01 80 10 80 lo\n")


def test_addr_command_without_ip_runs_the_dump(tmp_path):
    """ADDR_CMD on this machine with `ip` hidden from PATH (only sh's builtins and cat): the
    dump, read as the machine's own interfaces."""
    (tmp_path / "cat").symlink_to("/bin/cat")
    out = subprocess.run(["/bin/sh", "-c", iproute.ADDR_CMD], capture_output=True, text=True, timeout=20,
                         env={"PATH": str(tmp_path)})
    assert out.stdout.startswith(procnet.MARK), out.stderr
    ifs, source = iproute.read_addr(CommandOutput(stdout=out.stdout))
    assert source == procnet.SOURCE and any(i.loopback and i.up for i in ifs)
    with_ip = subprocess.run(["/bin/sh", "-c", iproute.ADDR_CMD], capture_output=True, text=True, timeout=20)
    assert iproute.read_addr(CommandOutput(stdout=with_ip.stdout))[1] == "ip -j addr"
