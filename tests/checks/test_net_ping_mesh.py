"""net.ping_mesh: plan shape, sampling, and blame on mesh outputs built from captured iputils texts."""
import subprocess

import pytest

from preflight.checks import env_comm, net_ping_mesh as M
from preflight.checkapi import ClusterContext, CommandOutput, Status
from preflight.net import ping
from preflight.node import Node
from tests.net.test_helpers import PING_OK, PING_UNREACH

# Captured on the test machine: `ping -q -n -c 2 -W 1 -i 0.2 192.0.2.77` to a dead address.
PING_DEAD = """\
PING 192.0.2.77 (192.0.2.77) 56(84) bytes of data.

--- 192.0.2.77 ping statistics ---
2 packets transmitted, 0 received, 100% packet loss, time 204ms

"""
PING_LOSSY = PING_OK.replace("2 received, 0% packet loss", "1 received, 50% packet loss")  # same grammar, 1 of 2 lost


def ctx_for(n, params=None, planned=None, no_ip=()):
    names = [f"node{i:02}" for i in range(1, n + 1)]
    nodes = {nm: Node(name=nm, host=f"10.0.0.{i}", backend="ascend") for i, nm in enumerate(names, 1)}
    facts = {nm: {"env.comm": env_comm.Facts(env={} if nm in no_ip else {"HCCL_IF_IP": f"10.0.0.{i}"})}
             for i, nm in enumerate(names, 1)}
    return ClusterContext(nodes=nodes, facts=facts, params={**M.DEFAULTS, **(params or {})}, planned=planned or {})


def mesh_output(ctx, bad=frozenset(), lossy=frozenset(), broken=()):
    """What each node's mesh probe prints, for the pairs plan() gave it."""
    planned = {}
    addr = M.addresses(ctx)
    for src in M.plan(ctx):
        text = ""
        for dst in [d for s, d in M.pairs(sorted(addr), int(ctx.params["max_pairs"])) if s == src]:
            ip = addr[dst]
            body = PING_DEAD if (src, dst) in bad else PING_LOSSY if (src, dst) in lossy else PING_OK
            text += f"{ping.MARK} {dst} {ip} rc={1 if (src, dst) in bad else 0}\n{body}"
        planned[src] = {M.PROBE: CommandOutput(stdout=text, rc=124 if src in broken else 0,
                                               timed_out=src in broken, error="timed out" if src in broken else None)}
    return planned


def evaluate(n, **kw):
    params = kw.pop("params", None)
    ctx = ctx_for(n, params, no_ip=kw.pop("no_ip", ()))
    ctx.planned.update(mesh_output(ctx, **kw))
    return M.evaluate(ctx)


def test_plan_all_pairs_one_probe_per_node():
    p = M.plan(ctx_for(4))
    assert sorted(p) == ["node01", "node02", "node03", "node04"]
    cmd = p["node01"][M.PROBE].cmd
    assert "node02=10.0.0.2 node03=10.0.0.3 node04=10.0.0.4" in cmd and "10.0.0.1 " not in cmd
    assert "ping -q -n -c 3 -i 0.2 -W 1 -w 2" in cmd  # the fallback loop
    assert cmd.startswith("python3 -c ")
    loop = M.plan(ctx_for(4, {"pinger": "ping"}))["node01"][M.PROBE].cmd
    assert loop.startswith("set -- ") and "python3" not in loop


@pytest.mark.parametrize("n,max_pairs,per_node", [(10, 0, 9), (10, 20, 2), (128, 1024, 8), (5, 1000, 4)])
def test_sampling_is_even_and_deterministic(n, max_pairs, per_node):
    names = [f"n{i}" for i in range(n)]
    prs = M.pairs(names, max_pairs)
    assert prs == M.pairs(names, max_pairs)
    for nm in names:
        assert sum(1 for s, _ in prs if s == nm) == per_node
        assert sum(1 for _, d in prs if d == nm) == per_node
    assert all(s != d for s, d in prs)


def test_all_reach_passes_with_metrics_and_matrix():
    (f,) = evaluate(4)
    assert f.status is Status.PASS and f.node is None and "12 pairs between 4 nodes" in f.summary
    assert f.details["matrix"]["node01"]["node02"] == 0.0
    names = {m["name"] for m in f.details["metrics"]}
    assert names == {"ping_loss", "ping_rtt"}


def test_one_bad_pair_names_both_ends_only():
    bad = {("node02", "node03"), ("node03", "node02")}
    summary, *nodes = evaluate(5, bad=bad)
    assert summary.status is Status.FAIL and "2 of 20 pairs unreachable" in summary.summary
    assert sorted(f.node for f in nodes) == ["node02", "node03"]
    assert all(f.status is Status.FAIL and "bad pair" in f.summary and f.remediation for f in nodes)


def test_one_way_drop_still_a_pair():
    summary, *nodes = evaluate(4, bad={("node01", "node04")})
    assert sorted(f.node for f in nodes) == ["node01", "node04"]


def test_isolated_node_blamed_alone():
    bad = {(s, d) for s in ("node01", "node02", "node03", "node04", "node05") for d in ("node03",) if s != d}
    bad |= {("node03", d) for d in ("node01", "node02", "node04", "node05")}
    summary, *nodes = evaluate(5, bad=bad)
    assert [f.node for f in nodes] == ["node03"]
    assert "reaches 0 of 4 peers, reached by 0 of 4" in nodes[0].summary


def test_lossy_pair_warns():
    summary, *nodes = evaluate(3, lossy={("node01", "node02")})
    assert summary.status is Status.WARN and sorted(f.node for f in nodes) == ["node01", "node02"]
    assert "50% loss" in nodes[0].summary


def test_slow_rtt_warns():
    summary, *_ = evaluate(3, params={"warn_rtt_ms": 0.05})  # captured avg rtt is 0.099 ms
    assert summary.status is Status.WARN


def test_unreadable_source_is_error_not_blame():
    summary, *nodes = evaluate(3, broken=("node02",))
    assert summary.status is Status.ERROR and not nodes and "node02" in summary.details["unreadable"][0]


def test_node_without_address_not_blamed_here():
    (f,) = evaluate(3, no_ip=("node03",), params={"warn_implicit_nic": False})
    assert f.status is Status.PASS and f.details["no_address"] == ["node03"]  # env.comm reports it


def test_single_node_skips():
    (f,) = M.evaluate(ctx_for(1))
    assert f.status is Status.SKIP


def test_unreach_errors_sample_counts_as_loss():
    ctx = ctx_for(2)
    ctx.planned.update({
        "node01": {M.PROBE: CommandOutput(stdout=f"{ping.MARK} node02 10.0.0.2 rc=1\n{PING_UNREACH}")},
        "node02": {M.PROBE: CommandOutput(stdout=f"{ping.MARK} node01 10.0.0.1 rc=2\nping: connect: Network is unreachable\n")},
    })
    summary, *nodes = M.evaluate(ctx)
    assert summary.status is Status.FAIL and sorted(f.node for f in nodes) == ["node01", "node02"]
    assert any("Network is unreachable" in f.summary for f in nodes)


@pytest.mark.parametrize("pinger", ["auto", "ping"])
def test_planned_script_runs_against_loopback(pinger):
    ctx = ctx_for(2)
    ctx.facts["node02"]["env.comm"] = env_comm.Facts(env={"HCCL_IF_IP": "127.0.0.1"})
    ctx.facts["node01"]["env.comm"] = env_comm.Facts(env={"HCCL_IF_IP": "127.0.0.2"})
    ctx.params.update(count=1, pinger=pinger)
    for src, probes in M.plan(ctx).items():
        r = subprocess.run(["sh", "-c", probes[M.PROBE].cmd], capture_output=True, text=True, timeout=30)
        ctx.planned[src] = {M.PROBE: CommandOutput(stdout=r.stdout, rc=r.returncode)}
    (f,) = M.evaluate(ctx)
    assert f.status is Status.PASS, f.summary


# Captured on the test machine: iputils ping (a copy without its cap_net_raw file capability) run as
# nobody in a namespace whose net.ipv4.ping_group_range is "1 0", rc 2.
PING_NO_SOCKET = """\
/tmp/ping-nocap: socktype: SOCK_RAW
/tmp/ping-nocap: socket: Operation not permitted
/tmp/ping-nocap: => missing cap_net_raw+p capability or setuid?
"""


def _no_ping_output(ctx, src, tmp_path):
    """What src's real mesh command prints on a node with neither python3 nor ping on PATH."""
    for tool in ("cat", "mktemp", "rm"):
        (tmp_path / tool).symlink_to(f"/bin/{tool}")
    cmd = M.plan(ctx)[src][M.PROBE].cmd
    out = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=30, env={"PATH": str(tmp_path)})
    assert "ping: not found" in out.stdout and out.returncode == 0, out
    return CommandOutput(stdout=out.stdout, stderr=out.stderr, rc=out.returncode)


def test_a_node_that_cannot_ping_leaves_its_pairs_untested_not_down(tmp_path):
    ctx = ctx_for(4)
    ctx.planned.update(mesh_output(ctx))
    ctx.planned["node02"] = {M.PROBE: _no_ping_output(ctx, "node02", tmp_path)}
    (f,) = M.evaluate(ctx)
    assert f.status is Status.PASS, f.summary
    assert f.summary.startswith("9 pairs between 4 nodes answer")  # node02's 3 pairs out, its 3 pairs in still tested
    assert "3 pairs from node02 not tested: neither python3's ICMP socket nor `ping` could run" in f.summary
    assert sorted(f.details["untested"]["node02"]["pairs"]) == ["node01", "node03", "node04"]


def test_socket_refused_is_untested_and_a_mesh_of_none_skips():
    ctx = ctx_for(2)
    ctx.planned.update({src: {M.PROBE: CommandOutput(stdout=f"{ping.MARK} {dst} 10.0.0.9 rc=2\n{PING_NO_SOCKET}")}
                        for src, dst in (("node01", "node02"), ("node02", "node01"))})
    (f,) = M.evaluate(ctx)
    assert f.status is Status.SKIP and "no pair could be tested" in f.summary and "cap_net_raw" in f.summary
