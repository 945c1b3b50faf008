"""The simulator's faults for collectives, made real: tc and iptables inside a node's namespace, and
the test-only interpreter hook its set_env.sh loads (preflight/sim/templates/sitecustomize.py).

This kernel has tbf, htb, ingress/clsact, u32, mirred and ifb built in and no netem, so a rate limit
(and a rate limit on what a node receives, through an ifb device) is real here; random loss comes
from iptables' statistic match. A link that drops mid-collective is a watcher in the node's
namespace that drops every packet but SSH's once a rank holds a peer connection, for a bounded
time. Each test reads the node's own state back (tc, iptables, python, ping).
"""
from __future__ import annotations

import importlib.util
import shlex
import sys

import pytest

from tests.sim.sshutil import Shell
from tests.simfixtures import requires_netns

pytestmark = requires_netns

SIM_SPEC = {"nodes": 2}
SIM_MODE = "netns"
SET_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"


def in_node(cluster, node: str, cmd: str) -> str:
    cp = cluster.exec(node, cmd)
    return cp.stdout + cp.stderr


def test_throttle_puts_tbf_on_egress_and_ifb_on_ingress_and_reset_removes_them(sim_cluster):
    n = sim_cluster.nodes[1].name
    sim_cluster.inject(n, "link_throttle", rate="20mbit", ingress=True)
    try:
        qd = in_node(sim_cluster, n, "tc qdisc show dev eth0; tc qdisc show dev pfifb0; tc filter show dev eth0 parent ffff:")
        assert "qdisc tbf" in qd and "rate 20Mbit" in qd, qd
        assert "qdisc ingress ffff:" in qd and "mirred" in qd and "pfifb0" in qd, qd
    finally:
        sim_cluster.reset(n)
    qd = in_node(sim_cluster, n, "tc qdisc show dev eth0; ip -o link show pfifb0 2>&1")
    assert "tbf" not in qd and "ingress" not in qd and "does not exist" in qd, qd


def test_loss_is_an_iptables_statistic_rule_sparing_ssh(sim_cluster):
    n = sim_cluster.nodes[0].name
    sim_cluster.inject(n, "link_loss", percent=20)
    try:
        rules = in_node(sim_cluster, n, "iptables -S INPUT")
        assert "-m statistic --mode random --probability 0.20000000" in rules and "! --dport 22" in rules, rules
    finally:
        sim_cluster.reset(n)
    assert "statistic" not in in_node(sim_cluster, n, "iptables -S INPUT")


def test_bad_rates_are_refused(sim_cluster):
    from preflight.sim import SimError
    with pytest.raises(SimError, match="rate"):
        sim_cluster.inject(sim_cluster.nodes[0].name, "link_throttle", rate="fast; reboot")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_interpreter_hooks_through_set_env(sim_cluster):
    """no_torch: the node's python finds no torch; wrong_sum: a one-rank gloo all_reduce adds 1.
    The hook is on that node only, and reset takes it away."""
    a, b = (n.name for n in sim_cluster.nodes)
    py = shlex.quote(sys.executable)
    probe = (f". {SET_ENV} && {py} -c 'import torch' 2>&1 | tail -1")
    reduce = (f". {SET_ENV} && {py} -c \"import torch, torch.distributed as d; "
              "d.init_process_group('gloo', init_method='tcp://127.0.0.1:29555', rank=0, world_size=1); "
              "t = torch.ones(4); d.all_reduce(t); print(t.tolist())\" 2>/dev/null | tail -1")
    sim_cluster.inject(a, "no_torch")
    sim_cluster.inject(b, "collective_wrong_sum")
    try:
        assert "No module named 'torch'" in in_node(sim_cluster, a, probe)
        assert in_node(sim_cluster, b, reduce).strip() == "[2.0, 2.0, 2.0, 2.0]"
    finally:
        sim_cluster.reset()
    assert in_node(sim_cluster, a, probe).strip() == ""
    assert in_node(sim_cluster, b, reduce).strip() == "[1.0, 1.0, 1.0, 1.0]"


def test_link_drop_drops_all_but_ssh_once_a_rank_talks_to_its_peers_and_comes_back(sim_cluster):
    """link_drop: `after` s after a process naming the rank script in the node's namespace holds a
    peer connection (both TCP ports ephemeral, as Gloo's pairs), eth0 drops every packet but SSH's
    for `duration` s; then the link is whole again, and reset stops the watcher and its chain."""
    import time
    a, b = (n.name for n in sim_cluster.nodes)
    a_ip = sim_cluster.node(a).host
    ping = f"ping -c 1 -W 1 {a_ip} >/dev/null 2>&1 && echo reachable || echo dropped"
    sim_cluster.inject(a, "link_drop", after=1, duration=4)
    py = shlex.quote(sys.executable)
    try:
        time.sleep(1.0)  # the watcher is up (it makes its chain at start)
        idle = f"{py} -c 'import time; time.sleep(6)' allreduce_worker.py"  # a rank still importing torch
        sim_cluster.exec(a, f"{idle} >/dev/null 2>&1 &")
        time.sleep(2.0)
        assert in_node(sim_cluster, b, ping).strip() == "reachable"  # no peer connection yet: the link is whole
        pair = (f"{py} -c 'import socket, time; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen(1); "
                f"c = socket.create_connection(s.getsockname()); p = s.accept(); time.sleep(8)' allreduce_worker.py")
        sim_cluster.exec(a, f"{pair} >/dev/null 2>&1 &")  # a rank in its collective: a pair connection
        time.sleep(2.5)
        rules = in_node(sim_cluster, a, "iptables -S INPUT; iptables -S OUTPUT; iptables -S PFLINKDROP")
        assert "-A INPUT -i eth0 -j PFLINKDROP" in rules and "-A OUTPUT -o eth0 -j PFLINKDROP" in rules, rules
        assert "--dport 22 -j RETURN" in rules and "--sport 22 -j RETURN" in rules, rules
        assert in_node(sim_cluster, b, ping).strip() == "dropped"
        sh = Shell(sim_cluster)  # SSH over that same link still gets through
        try:
            assert sh.run(a, "echo ok")[1].strip() == "ok"
        finally:
            sh.close()
        time.sleep(4.0)  # the window is over
        assert in_node(sim_cluster, b, ping).strip() == "reachable"
        assert "-j PFLINKDROP" not in in_node(sim_cluster, a, "iptables -S INPUT")
    finally:
        sim_cluster.reset(a)
    assert "PFLINKDROP" not in in_node(sim_cluster, a, "iptables -S")
    assert not [pid for pid, args in sim_cluster.node_processes(a) if "PFLINKDROP" in args]
