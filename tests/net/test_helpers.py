"""iproute2, ss, /proc/net/tcp, ping and interface-selection helpers.

The `ip`, `ss`, /proc and ping texts below were captured verbatim on the project's test machine
(iproute2-6.1.0, iputils ping; Debian) with `cat -A` to keep the spacing; they are not vendor samples.
"""
import subprocess

import pytest

from preflight.checkapi import CommandOutput, ParseError
from preflight.net import ifname, iproute, ping, sockets

IP_JSON = (
    '[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,"qdisc":"noqueue","operstate":"UNKNOWN","group":"default","txqlen":1000,"link_type":"loopback","address":"00:00:00:00:00:00","broadcast":"00:00:00:00:00:00","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8,"scope":"host","label":"lo","valid_life_time":4294967295,"preferred_life_time":4294967295},{"family":"inet6","local":"::1","prefixlen":128,"scope":"host","valid_life_time":4294967295,"preferred_life_time":4294967295}]},'
    '{"ifindex":2,"ifname":"ifb0","flags":["BROADCAST","NOARP"],"mtu":1500,"qdisc":"noop","operstate":"DOWN","group":"default","txqlen":32,"link_type":"ether","address":"b6:a5:03:73:78:fa","broadcast":"ff:ff:ff:ff:ff:ff","addr_info":[]},'
    '{"ifindex":4,"ifname":"eth0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1400,"qdisc":"pfifo_fast","operstate":"UP","group":"default","txqlen":1000,"link_type":"ether","address":"02:fc:00:00:00:01","broadcast":"ff:ff:ff:ff:ff:ff","addr_info":[{"family":"inet","local":"192.0.2.2","prefixlen":24,"broadcast":"192.0.2.255","scope":"global","label":"eth0","valid_life_time":4294967295,"preferred_life_time":4294967295},{"family":"inet6","local":"fd00::2","prefixlen":64,"scope":"global","nodad":true,"valid_life_time":4294967295,"preferred_life_time":4294967295},{"family":"inet6","local":"fe80::fc:ff:fe00:1","prefixlen":64,"scope":"link","valid_life_time":4294967295,"preferred_life_time":4294967295}]}]'
)
IP_TEXT = """\
1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN group default qlen 1000
    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00
    inet 127.0.0.1/8 scope host lo
       valid_lft forever preferred_lft forever
    inet6 ::1/128 scope host 
       valid_lft forever preferred_lft forever
2: ifb0: <BROADCAST,NOARP> mtu 1500 qdisc noop state DOWN group default qlen 32
    link/ether b6:a5:03:73:78:fa brd ff:ff:ff:ff:ff:ff
4: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1400 qdisc pfifo_fast state UP group default qlen 1000
    link/ether 02:fc:00:00:00:01 brd ff:ff:ff:ff:ff:ff
    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0
       valid_lft forever preferred_lft forever
    inet6 fd00::2/64 scope global nodad 
       valid_lft forever preferred_lft forever
    inet6 fe80::fc:ff:fe00:1/64 scope link 
       valid_lft forever preferred_lft forever
"""


@pytest.mark.parametrize("text", [IP_JSON, IP_TEXT], ids=["json", "text"])
def test_ip_addr_both_forms_agree(text):
    ifs = iproute.parse_addr(CommandOutput(stdout=text))
    assert [i.name for i in ifs] == ["lo", "ifb0", "eth0"]
    lo, ifb, eth = ifs
    assert lo.up and lo.loopback and eth.up and not ifb.up
    assert [str(a) for a in eth.addresses("inet")] == ["192.0.2.2/24"]
    assert [a.ip for a in eth.addresses("inet6")] == ["fd00::2"]  # link-local left out
    assert str(eth.addrs[0].network) == "192.0.2.0/24"
    assert iproute.owner(ifs, "192.0.2.2") is eth and iproute.owner(ifs, "10.9.9.9") is None


def test_ip_addr_text_veth_suffix_and_no_carrier():
    # `ip addr` of a veth in a namespace prints `eth0@if7`; a cable-less port `NO-CARRIER ... state DOWN`.
    text = ("7: eth0@if8: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 1500 qdisc noqueue state DOWN group default qlen 1000\n"
            "    link/ether 02:fc:00:00:00:01 brd ff:ff:ff:ff:ff:ff link-netnsid 0\n"
            "    inet 10.0.0.2/24 scope global eth0\n")
    (eth,) = iproute.parse_text(text)
    assert eth.name == "eth0" and not eth.up and eth.state() == "NO-CARRIER"


def test_ip_addr_garbage_is_parse_error():
    with pytest.raises(ParseError):
        iproute.parse_addr(CommandOutput(stdout="Object \"addr\" is unknown, try \"ip help\".\n"))
    with pytest.raises(ParseError):
        iproute.parse_addr(CommandOutput(stdout="[{broken"))


@pytest.mark.parametrize("text,dev,src,via,kind", [
    ("192.0.2.9 dev eth0 src 192.0.2.2 uid 0 \n    cache \n", "eth0", "192.0.2.2", None, "unicast"),
    ("local 192.0.2.2 dev lo src 192.0.2.2 uid 0 \n    cache <local> \n", "lo", "192.0.2.2", None, "local"),
    ("203.0.113.5 via 192.0.2.1 dev eth0 src 192.0.2.2 uid 0 \n    cache \n", "eth0", "192.0.2.2", "192.0.2.1", "unicast"),
])
def test_route_get(text, dev, src, via, kind):
    r = iproute.parse_route_get(text)
    assert (r.dev, r.src, r.via, r.kind) == (dev, src, via, kind)


SS = """\
State  Recv-Q Send-Q Local Address:Port  Peer Address:PortProcess                           
LISTEN 0      128          0.0.0.0:2024       0.0.0.0:*                                     
LISTEN 0      128          0.0.0.0:60003      0.0.0.0:*    users:(("python3",pid=6151,fd=3))
LISTEN 0      128                *:29500            *:*    users:(("python3",pid=6151,fd=4))
"""
PROC = f"""\
{sockets.PROC_MARK}
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode                                                     
   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1575 1 00000000d9c100ce 100 0 0 10 0                      
   1: 00000000:EA63 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 7782 1 00000000e79e736b 100 0 0 10 0                      
   2: 0100007F:993E 0100007F:08FB 06 00000000:00000000 03:00000820 00000000     0        0 0 3 00000000816c472b                                      
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:733C 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 7783 1 0000000000dfec2f 100 0 0 10 0
"""


def test_ss_listeners_with_owner():
    ls, source = sockets.parse_listeners(CommandOutput(stdout=SS))
    assert source == "ss"
    assert [(x.address, x.port) for x in ls] == [("0.0.0.0", 2024), ("0.0.0.0", 60003), ("*", 29500)]
    assert ls[1].processes == (("python3", 6151),) and ls[1].owner() == "python3 (pid 6151)"
    assert ls[0].owner() == "process not visible to this user"


def test_proc_net_tcp_fallback():
    ls, source = sockets.parse_listeners(CommandOutput(stdout=PROC))
    assert source == "/proc/net/tcp"
    assert [(x.address, x.port) for x in ls] == [("0.0.0.0", 2024), ("0.0.0.0", 60003), ("::", 29500)]


def test_proc_addr_byte_order():
    assert sockets.proc_addr("0100007F") == "127.0.0.1"


def test_ss_bracketed_and_scoped():
    text = "LISTEN 0 4096 [::ffff:10.0.0.1]:80 [::]:*\nLISTEN 0 4096 127.0.0.53%lo:53 0.0.0.0:*\n"
    assert [(x.address, x.port) for x in sockets.parse_ss(text)] == [("::ffff:10.0.0.1", 80), ("127.0.0.53", 53)]


def test_sysctl_and_port_lists():
    s = sockets.parse_sysctl("ip_local_port_range=32768 60999 \nip_local_reserved_ports= \n")
    assert s.ephemeral == (32768, 60999) and s.reserved == ()
    assert s.is_ephemeral(60000) and not s.is_reserved(60000)
    s = sockets.parse_sysctl("ip_local_port_range=32768 60999 \nip_local_reserved_ports=60000-60015,61000 \n")
    assert s.is_reserved(60015) and s.is_reserved(61000) and not s.is_reserved(60016)
    with pytest.raises(ParseError):
        sockets.parse_sysctl("cat: /proc/sys/net/ipv4/ip_local_port_range: No such file\n")
    with pytest.raises(ValueError):
        sockets.parse_port_list("60000-50000")


def test_sysctl_cmd_runs_here():
    out = subprocess.run(["sh", "-c", sockets.SYSCTL_CMD], capture_output=True, text=True).stdout
    assert sockets.parse_sysctl(out).ephemeral[0] > 0


PING_OK = """\
PING 127.0.0.1 (127.0.0.1) 56(84) bytes of data.
64 bytes from 127.0.0.1: icmp_seq=1 ttl=64 time=0.150 ms
64 bytes from 127.0.0.1: icmp_seq=2 ttl=64 time=0.048 ms

--- 127.0.0.1 ping statistics ---
2 packets transmitted, 2 received, 0% packet loss, time 201ms
rtt min/avg/max/mdev = 0.048/0.099/0.150/0.051 ms
"""
PING_UNREACH = """\
PING 198.51.100.1 (198.51.100.1) 56(84) bytes of data.
From 21.4.5.149 icmp_seq=1 Destination Net Unreachable

--- 198.51.100.1 ping statistics ---
1 packets transmitted, 0 received, +1 errors, 100% packet loss, time 0ms

"""


def test_ping_stats():
    s = ping.parse_stats(PING_OK)
    assert (s.transmitted, s.received, s.loss_pct, s.rtt_avg_ms, s.rtt_max_ms) == (2, 2, 0.0, 0.099, 0.150)
    s = ping.parse_stats(PING_UNREACH)
    assert (s.received, s.loss_pct, s.errors, s.rtt_avg_ms) == (0, 100.0, 1, None)
    assert ping.parse_stats("ping: no.such.host: Name or service not known\n") is None
    # busybox form, from its printf format "%lu packets transmitted, %lu packets received, %u%% packet loss"
    s = ping.parse_stats("2 packets transmitted, 2 packets received, 0% packet loss\nround-trip min/avg/max = 0.1/0.2/0.3 ms\n")
    assert (s.received, s.rtt_avg_ms) == (2, 0.2)


def test_mesh_script_runs_locally():
    script = ping.mesh_script([("a", "127.0.0.1"), ("b", "127.0.0.2"), ("c", "127.0.0.3")], count=1, parallel=2)
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=20).stdout
    res = ping.split_mesh(out)
    assert set(res) == {"a", "b", "c"}
    ip, rc, body = res["b"]
    assert ip == "127.0.0.2" and rc == 0 and ping.parse_stats(body).received == 1


IFS = iproute.parse_json(IP_JSON)


@pytest.mark.parametrize("value,expected", [
    ("eth", ["eth0"]), ("=eth0", ["eth0"]), ("=eth", []), ("^eth", ["ifb0"]), ("^=eth0", ["ifb0"]),
    ("lo", ["lo"]), ("^ifb", ["eth0"]), ("en,eth", ["eth0"]),
])
def test_prefix_list_selection(value, expected):
    assert [i.name for i in ifname.select(ifname.parse_prefix_list(value), IFS)] == expected


def test_gloo_names_reject_nccl_syntax():
    assert ifname.gloo_names("eth0,eth1") == (["eth0", "eth1"], [])
    assert ifname.gloo_names("^lo,docker") == (["^lo", "docker"], ["^lo"])


def test_hccl_default_order():
    extra = iproute.parse_text(
        "5: docker0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 state UP\n    inet 172.17.0.1/16 scope global docker0\n"
        "6: enp1: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 state UP\n    inet 10.1.0.2/16 scope global enp1\n")
    assert [i.name for i in ifname.hccl_default(IFS + extra)] == ["enp1", "eth0", "docker0", "lo"]


def test_pinger_and_fallback_agree_locally():
    from preflight.net import pinger
    targets = [("a", "127.0.0.1"), ("b", "::1"), ("dead", "192.0.2.77")]
    for python in ("python3", "no-such-python3"):  # the second runs the `ping` loop
        out = subprocess.run(["sh", "-c", pinger.mesh_command(targets, 2, 4, python=python)],
                             capture_output=True, text=True, timeout=30).stdout
        res = {k: ping.parse_stats(v[2]) for k, v in ping.split_mesh(out).items()}
        assert res["a"].received == 2 and res["b"].received == 2, out
        assert res["dead"].received == 0 and res["dead"].loss_pct == 100.0


def test_owner_finds_the_interface_whatever_the_spelling():
    """iproute.owner: the first interface with an address equal to `ip` as an address, compared as
    parsed addresses (its reference below); the text comparison it takes for IPv4 gives the same
    interface on mixes of IPv4, IPv6 spellings, mapped and malformed addresses."""
    import ipaddress
    import random

    def reference(interfaces, ip):
        try:
            want = ipaddress.ip_address(ip)
        except ValueError:
            return None
        for iface in interfaces:
            for a in iface.addrs:
                try:
                    if a.ip == ip or ipaddress.ip_address(a.ip) == want:
                        return iface
                except ValueError:
                    continue
        return None

    spellings = ["10.0.0.1", "10.0.0.2", "010.0.0.1", "fe80::1", "fe80:0::1", "FE80::1", "::ffff:10.0.0.1",
                 "::ffff:a00:1", "10.0.0.1 ", "x", "127.0.0.1"]
    rng = random.Random(5)
    for _ in range(2000):
        ifaces = tuple(iproute.Interface(f"eth{i}", ("UP",), "UP", tuple(
            iproute.Address(rng.choice(spellings), 24, "inet", "global") for _ in range(rng.randint(0, 3))))
            for i in range(rng.randint(0, 4)))
        ip = rng.choice(spellings)
        assert iproute.owner(ifaces, ip) is reference(ifaces, ip), (ip, ifaces)
