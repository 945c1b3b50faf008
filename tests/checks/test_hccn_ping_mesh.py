"""hccn.ping_mesh: pair plan, the per-device serial script (against a fake hccn_tool), and blame.

The -ping body has no verbatim sample (docs/FORMATS.md §3.5, §5): the bodies below follow the
inferred grammar given there: `device N PING <ip>` then `N packets transmitted, N received, X% packet
loss`, or one of the failure substrings the driver checks for.
"""
import os
import stat
import subprocess

import pytest

from preflight.checks import hccn_ping_mesh as H
from preflight.checks.hccn_ip import DeviceIp, Facts as IpFacts
from preflight.checkapi import ClusterContext, CommandOutput, Status
from preflight.node import Node

OK = "device {d} PING {ip}\n3 packets transmitted, 3 received, 0.00% packet loss\n"
LOST = "device {d} PING {ip}\n3 packets transmitted, 0 received, 100.00% packet loss\n"
UNREACH = "device {d} PING {ip}\nFrom {ip} icmp_seq=1 Destination Host Unreachable\n"
LOSSY = "device {d} PING {ip}\n3 packets transmitted, 2 received, 33.33% packet loss\n"


def ctx_for(n=3, devs=2, params=None, ips=None, tool="/usr/local/Ascend/driver/tools/hccn_tool"):
    names = [f"node{i:02}" for i in range(1, n + 1)]
    nodes = {nm: Node(name=nm, host=nm, ascend_home=tool.rsplit("/driver/", 1)[0]) for nm in names}
    facts = {}
    for i, nm in enumerate(names, 1):
        d = {dev: DeviceIp((ips or {}).get((nm, dev), f"192.168.{dev}.{i}"), "255.255.255.0") for dev in range(devs)}
        facts[nm] = {"hccn.ip": IpFacts(None, None, d, chips={dev: (dev, 0) for dev in range(devs)})}
    return ClusterContext(nodes=nodes, facts=facts, params={**H.DEFAULTS, **(params or {})})


def fake_planned(ctx, body_for):
    """Outputs in the script's framing, one body per planned call (body_for(src, dst) -> template)."""
    ips = H.device_ips(ctx)
    planned = {}
    for src, dst in H.ping_pairs(ips, bool(ctx.params["cross_rail"]), int(ctx.params["max_pairs"])):
        text = planned.get(src[0], "")
        body = body_for(src, dst).format(d=src[1], ip=ips[dst])
        text += f"{H.MARK} {src[1]} {dst[0]} {dst[1]} {ips[dst]} rc=0\n{body}"
        planned[src[0]] = text
    return {n: {H.PROBE: CommandOutput(stdout=t)} for n, t in planned.items()}


def run(ctx, body_for=lambda s, d: OK):
    ctx.planned.update(fake_planned(ctx, body_for))
    return H.evaluate(ctx)


def test_same_rail_plan():
    prs = H.ping_pairs(H.device_ips(ctx_for(3, 2)), False, 0)
    assert len(prs) == 2 * 3 * 2 and all(a[1] == b[1] and a[0] != b[0] for a, b in prs)


def test_cross_rail_plan_and_sampling():
    ips = H.device_ips(ctx_for(3, 2))
    assert len(H.ping_pairs(ips, True, 0)) == 6 * 4
    assert len(H.ping_pairs(ips, True, 10)) == 10
    sampled = H.ping_pairs(H.device_ips(ctx_for(16, 8)), False, 8 * 16 * 2)
    assert len(sampled) == 8 * 16 * 2  # every device pings 2 peers of its rail


def test_all_pass_with_metrics():
    (f,) = run(ctx_for())
    assert f.status is Status.PASS and f.details["pairs"] == 12 and f.details["metrics"][0]["name"] == "ping_loss"


def test_bad_device_pair_blames_both_devices_only():
    bad = {(("node01", 1), ("node03", 1)), (("node03", 1), ("node01", 1))}
    summary, *nodes = run(ctx_for(4), lambda s, d: LOST if (s, d) in bad else OK)
    assert summary.status is Status.FAIL
    assert {f.node: f.details["failed_devices"] for f in nodes} == {"node01": [1], "node03": [1]}
    assert nodes[0].details["devices"] == [{"device": 1, "npu": 1, "chip": 0}]


def test_dead_device_blamed_alone():
    dead = ("node02", 0)
    summary, *nodes = run(ctx_for(4), lambda s, d: UNREACH if dead in (s, d) else OK)
    assert [(f.node, f.details["failed_devices"]) for f in nodes] == [("node02", [0])]
    assert "Destination Host Unreachable" in nodes[0].summary and "fail with most peers" in nodes[0].summary


def test_lossy_pair_warns():
    summary, *nodes = run(ctx_for(3), lambda s, d: LOSSY if (s, d) == (("node01", 0), ("node02", 0)) else OK)
    assert summary.status is Status.WARN and sorted(f.node for f in nodes) == ["node01", "node02"]


def test_missing_device_ip_not_pinged():
    c = ctx_for(3)
    c.facts["node02"]["hccn.ip"].devices[1] = DeviceIp(None, None, error="no ip")
    (f,) = run(c)
    assert f.status is Status.PASS and f.details["pairs"] == 6 + 2


def test_duplicated_device_ip_shows_as_failure_elsewhere():
    # a duplicated IP (node03 dev 0 = node01 dev 0): node02's pings to it answer from one of them;
    # env.consistency names the duplicate. Here only the plan shape is checked: both are targets.
    c = ctx_for(3, ips={("node03", 0): "192.168.0.1"})
    targets = [d for s, d in H.ping_pairs(H.device_ips(c), False, 0) if s == ("node02", 0)]
    assert sorted(targets) == [("node01", 0), ("node03", 0)]


@pytest.mark.parametrize("body,loss,note", [
    (OK.format(d=0, ip="1.1.1.1"), 0.0, ""),
    (LOST.format(d=0, ip="1.1.1.1"), 100.0, ""),
    ("device 0 PING 1.1.1.1\nrecv time out seq 1\n", 100.0, "recv time out seq"),
    ("device 0 PING 1.1.1.1\nping: sendmsg: Message too long\n", 100.0, "Message too long"),
    ("hccn_tool is busy, please try again.\n", None, "hccn_tool: hccn_tool is busy, please try again."),
    ("The device is not exist!\n", None, "hccn_tool: The device is not exist!"),
    ("", None, "no packet statistics (rc 1): empty output"),
])
def test_parse_call(body, loss, note):
    assert H.parse_call(body, 1) == (loss, note)


def test_unreadable_node_is_error():
    c = ctx_for(3)
    c.planned.update(fake_planned(c, lambda s, d: OK))
    c.planned["node02"] = {H.PROBE: CommandOutput(stdout="@@missing /x/hccn_tool\n", rc=127)}
    summary, *nodes = H.evaluate(c)
    assert summary.status is Status.ERROR and not nodes and "hccn_tool not found at /x/hccn_tool" in summary.summary


FAKE_TOOL = r"""#!/bin/sh
# fake hccn_tool: `-i D -ping -g address IP pkt N`; answers busy when device D is already in a call
dev=$2; ip=$6; lock="$FAKE_DIR/lock.$dev"
if ! mkdir "$lock" 2>/dev/null; then echo "hccn_tool is busy, please try again." >&2; exit 1; fi
echo "$dev $ip" >>"$FAKE_DIR/calls"
sleep 0.05
echo "device $dev PING $ip"
case " $FAKE_DEAD " in *" $ip "*) echo "3 packets transmitted, 0 received, 100.00% packet loss";;
  *) echo "3 packets transmitted, 3 received, 0.00% packet loss";; esac
rmdir "$lock"
"""


def test_script_serial_per_device_parallel_across(tmp_path):
    tool = tmp_path / "Ascend/driver/tools/hccn_tool"
    tool.parent.mkdir(parents=True)
    tool.write_text(FAKE_TOOL)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    c = ctx_for(4, 2, tool=str(tool))
    env = {**os.environ, "FAKE_DIR": str(tmp_path), "FAKE_DEAD": "192.168.1.4"}
    for node, probes in H.plan(c).items():
        r = subprocess.run(["sh", "-c", probes[H.PROBE].cmd], capture_output=True, text=True, env=env, timeout=60)
        c.planned[node] = {H.PROBE: CommandOutput(stdout=r.stdout, rc=r.returncode)}
    assert "busy" not in "".join(o[H.PROBE].stdout for o in c.planned.values())
    assert len((tmp_path / "calls").read_text().splitlines()) == 4 * 2 * 3
    summary, *nodes = H.evaluate(c)
    assert [(f.node, f.details["failed_devices"]) for f in nodes] == [("node04", [1])]


def test_script_missing_tool(tmp_path):
    c = ctx_for(2, 1, tool=str(tmp_path / "nope/driver/tools/hccn_tool"))
    cmd = H.plan(c)["node01"][H.PROBE].cmd
    r = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True)
    assert r.returncode == 127 and "@@missing" in r.stdout


def test_devices_hccn_link_saw_down_are_left_out_not_blamed_twice():
    from preflight.checks.hccn_link import DeviceLink, Facts as LinkFacts

    ctx = ctx_for(3, 2)
    ctx.facts["node02"]["hccn.link"] = LinkFacts(None, None, {0: DeviceLink("UP"), 1: DeviceLink("DOWN")})
    assert ("node02", 1) not in H.device_ips(ctx)
    [f] = run(ctx)
    assert f.status is Status.PASS and "1 device(s) with link DOWN left out" in f.summary
    assert f.details["left_out_link_down"] == ["node02 device 1"]
