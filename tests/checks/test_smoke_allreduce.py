"""smoke.allreduce, pure: node choice, quoting, and verdicts on recorded rank lines and failure texts.

The JSON lines are the worker's real output shape (recorded from a 2-process gloo run with CPU
torch 2.13); the error texts are verbatim from docs/FAILURES.md and from torch's own messages. The last
test runs the real worker script twice on this machine (skipped without torch).
"""
from __future__ import annotations

import importlib.util
import dataclasses
import json
import shlex
import subprocess
import sys

import pytest

from preflight.smoke import allreduce_worker as W
from preflight.checks import smoke_allreduce as S
from preflight.checkapi import ClusterContext, CommandOutput, Status
from preflight import launchenv
from preflight.node import Node

OK0 = {"pf_smoke": 1, "rank": 0, "node": "a", "world": 2, "backend": "gloo", "ok": True, "phase": "done",
       "sum_ok": True, "expected": 3.0, "got": [3.0, 3.0], "size_bytes": 67108864, "iters": 5,
       "time_ms": 76.196, "time_min_ms": 63.89, "algbw_gbps": 0.8807, "busbw_gbps": 0.8807,
       "latency_ms": 0.2747, "torch": "2.13.0+cpu", "pid": 23531, "elapsed_s": 3.2}
OK1 = {**OK0, "rank": 1, "node": "b", "algbw_gbps": 0.8731, "busbw_gbps": 0.8731, "latency_ms": 0.4867}


def err(rank, node, phase, lines, kind="error"):
    return {"pf_smoke": 1, "rank": rank, "node": node, "backend": "gloo", "ok": False, "phase": phase,
            "kind": kind, "error": lines[0], "error_lines": lines}


IFNAME = err(1, "b", "init", ["RuntimeError: [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] "
                              "ifa != nullptr. Unable to find address for: eth9"])
WAIT0 = err(0, "a", "init", ["DistStoreError: wait timeout after 6000ms, keys: /0//cpu//0/1"])
MESH = err(0, "a", "init", ["RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error"])
MESH1 = {**MESH, "rank": 1, "node": "b"}
STORE1 = err(1, "b", "store", ["DistNetworkError: The client socket has timed out after 6000ms while trying to connect to (198.18.0.2, 29477)."])
EI0006 = err(0, "a", "warmup", ["RuntimeError: InnerRunOpApi:... OPS function error: HcclAllreduce, error code is 6",
                                "EI0006: ... Getting socket times out. Reason: Remote Rank did not send the data in time."])
HUNG1 = err(1, "b", "warmup", ["no progress in phase warmup after 31s (rank 1 hung)"], kind="hang")
NO_TORCH = "Traceback (most recent call last):\n  File \"w.py\", line 80\nModuleNotFoundError: No module named 'torch'\n"


def out(record=None, stderr="", rc=None, timed_out=False) -> CommandOutput:
    stdout = "" if record is None else "[W socket.cpp] chatter\n" + json.dumps(record) + "\n"
    if rc is None:
        rc = 0 if record is not None and record.get("ok") else 2
    return CommandOutput(stdout=stdout, stderr=stderr, rc=rc, timed_out=timed_out,
                         error="timed out after 36s" if timed_out else None)


def node(name, host, **kw) -> Node:
    return Node(name=name, host=host, python=kw.pop("python", "/opt/py env/bin/python3"), **kw)


def ctx(params=None, planned=None, names=("a", "b", "c"), unreachable=()) -> ClusterContext:
    nodes = {n: node(n, f"198.18.0.{i + 2}") for i, n in enumerate(names)}
    return ClusterContext(nodes=nodes, facts={n: {} for n in nodes}, params={**S.DEFAULTS, **(params or {})},
                          planned=planned or {}, unreachable=tuple(unreachable))


def planned(r0: CommandOutput | None, r1: CommandOutput | None, a="a", b="b", round_no=1):
    p: dict = {a: {}, b: {}}
    if r0 is not None:
        p[a][S.probe_name(round_no, a, b, 0)] = r0
    if r1 is not None:
        p[b][S.probe_name(round_no, a, b, 1)] = r1
    return p


def launch_words(cmd: str) -> list[str]:
    """The `PF_LAUNCH_SCRIPT=SCRIPT bash -c 'eval ...'` words of a rank probe's launch line, as the
    node's sh will split them (launchenv: the script is a variable, not an argument)."""
    line = next(ln for ln in cmd.splitlines() if ln.startswith('PF_SMOKE_DIR="$d" '))
    return shlex.split(line.split('PF_SMOKE_DIR="$d" ', 1)[1].rsplit(" </dev/null", 1)[0])


def config_of(cmd: str) -> dict:
    inner = launch_words(cmd)[0].removeprefix(launchenv.SCRIPT_VAR + "=")
    return json.loads(shlex.split(inner.rsplit("allreduce_worker.py ", 1)[1])[0])


def verdict(r0, r1, params=None):
    findings = S.evaluate(ctx(params, planned(r0, r1)))
    return findings[0], {f.node: f for f in findings if f.node}


# ---------------------------------------------------------------- plan

def test_plan_picks_the_first_two_nodes_rank0_on_the_first():
    p = S.plan(ctx())
    assert sorted(p) == ["a", "b"]
    (n0,), (n1,) = p["a"], p["b"]
    assert n0.endswith("|0") and n1.endswith("|1")
    assert p["a"][n0].timeout == S.probe_timeout(S.DEFAULTS) == 60 + 120 + 30


def _comm_facts(ip, **env):
    """env.comm's facts on a node (what the runner gives a cluster check that USES env.comm): lo
    and eth0 UP with `ip`, eth1 without carrier."""
    from preflight.checks import env_comm
    from preflight.net.iproute import Address, Interface
    ifs = (Interface("lo", ("LOOPBACK", "UP", "LOWER_UP"), "UNKNOWN", (Address("127.0.0.1", 8, "inet", "host"),)),
           Interface("eth0", ("BROADCAST", "UP", "LOWER_UP"), "UP", (Address(ip, 24, "inet"),)),
           Interface("eth1", ("BROADCAST", "UP", "NO-CARRIER"), "DOWN", (Address("10.9.0.1", 24, "inet"),)))
    return env_comm.Facts(env=dict(env), interfaces=ifs, net_source="ip -j addr")


def _facts_ctx(**by_node):
    c = ctx()
    return dataclasses.replace(c, facts={n: {"env.comm": by_node[n]} if n in by_node else {} for n in c.nodes})


def test_plan_prefers_nodes_whose_env_comm_facts_look_fine():
    """The node choice reads env.comm's facts (USES), never env.comm's verdict."""
    fine = {n: _comm_facts(f"198.18.0.{i + 2}", GLOO_SOCKET_IFNAME="eth0") for i, n in enumerate("abc")}
    assert sorted(S.plan(_facts_ctx(**fine))) == ["a", "b"]
    for broken in (_comm_facts("198.18.0.2", GLOO_SOCKET_IFNAME="eth9"),  # no such interface
                   _comm_facts("198.18.0.2", GLOO_SOCKET_IFNAME="eth1"),  # no carrier
                   _comm_facts("198.18.0.2", GLOO_SOCKET_IFNAME="^lo"),  # NCCL syntax, Gloo cannot find it
                   _comm_facts("198.18.0.2", HCCL_IF_IP="198.18.0.99"),  # not this node's address
                   _comm_facts("198.18.0.2", HCCL_SOCKET_IFNAME="ib"),  # selects nothing
                   dataclasses.replace(_comm_facts("198.18.0.2"), ip_error="neither ip nor /sys/class/net")):
        assert sorted(S.plan(_facts_ctx(**{**fine, "a": broken}))) == ["b", "c"], broken.env
    assert sorted(S.plan(_facts_ctx(b=fine["b"], c=fine["c"]))) == ["b", "c"]  # a's facts absent: not preferred
    # fewer than two fine: filled up in order
    assert sorted(S.plan(_facts_ctx(c=fine["c"]))) == ["a", "c"]


def test_plan_named_nodes_and_their_problems():
    p = S.plan(ctx({"nodes": ["c", "a"]}))
    assert any(k.endswith("|0") for k in p["c"]) and any(k.endswith("|1") for k in p["a"])
    assert S.plan(ctx({"nodes": ["a", "zz"]})) == {}
    (f,) = S.evaluate(ctx({"nodes": ["a", "zz"]}))
    assert f.status is Status.ERROR and "zz" in f.summary
    (f,) = S.evaluate(ctx(names=("a",)))
    assert f.status is Status.SKIP and "two reachable" in f.summary


def test_rank_command_quotes_every_value_and_cleans_up():
    n = Node(name="a", host="198.18.0.2", python="/opt/my env/bin/python3; rm -rf /",
             env={"GLOO_SOCKET_IFNAME": "eth0 $(reboot)"}, env_files=("/etc/x y.sh",))
    cmd = S.rank_command(n, 0, 2, "198.18.0.2", 29400, S.DEFAULTS)
    words = launch_words(cmd)
    assert words[1:] == ["bash", "-c", f'eval "${launchenv.SCRIPT_VAR}"']
    inner = words[0].removeprefix(launchenv.SCRIPT_VAR + "=")
    assert "export GLOO_SOCKET_IFNAME='eth0 $(reboot)'" in inner  # quoted by launchenv
    assert shlex.quote("/opt/my env/bin/python3; rm -rf /") in inner
    assert "trap cleanup EXIT" in cmd and "trap 'cleanup; exit 143' TERM INT HUP" in cmd
    assert 'mktemp -d "${TMPDIR:-/tmp}/".pf-smoke.XXXXXX' in cmd
    cfg = config_of(cmd)
    assert cfg["addr"] == "198.18.0.2" and cfg["port"] == 29400 and cfg["rank"] == 0 and cfg["world"] == 2


def test_master_addr_is_rank0_comm_address_and_port_avoids_listeners():
    c = ctx()
    c.nodes["a"].env["HCCL_IF_IP"] = "10.1.1.1"  # Node.env is a plain dict
    assert S.comm_address(c, "a") == ("10.1.1.1", "HCCL_IF_IP")
    assert S.comm_address(c, "b") == ("198.18.0.3", "inventory host")

    class Ls:
        def __init__(self, port):
            self.port = port

    class Ports:
        listeners = (Ls(29400), Ls(29401))

    c.facts["a"]["net.ports"] = Ports()
    assert S.choose_port(c, "a", set()) == 29402
    assert S.choose_port(c, "a", {29402}) == 29403
    assert S.choose_port(ctx({"port": 31000}), "a", set()) == 31000


def test_pairs_mode_plans_every_node_with_distinct_ports():
    p = S.plan(ctx({"mode": "pairs"}, names=("a", "b", "c", "d")))
    assert sorted(p) == ["a", "b", "c", "d"]
    ports = {config_of(probe.cmd)["port"] for v in p.values() for probe in v.values()}
    assert len(ports) == 2


def test_second_round_repairs_failing_pair_with_known_good_nodes():
    names = ("a", "b", "c", "d")
    first = {**planned(out(IFNAME | {"rank": 0, "node": "a"}), out(WAIT0 | {"rank": 1, "node": "b"})),
             **planned(out(OK0), out(OK1), "c", "d")}
    c = ctx({"mode": "pairs"}, first, names)
    p = S.plan(c)
    assert {k.split("|")[1] for v in p.values() for k in v} == {"2"}
    assert ("c", "a") in S.repair_plan({k: S.pair_result(c, *k) for k in S._pairs_run(c)})


# ---------------------------------------------------------------- verdicts

def test_pass_reports_busbw_and_latency_metrics():
    f, blamed = verdict(out(OK0), out(OK1))
    assert f.status is Status.PASS and not blamed
    m = {x["name"]: x for x in f.details["metrics"]}
    assert m["busbw"]["value"] == 0.8731 and m["busbw"]["unit"] == "GB/s"  # the slower rank
    assert m["allreduce_latency"]["value"] == 0.4867 and m["allreduce_latency"]["unit"] == "ms"
    assert m["busbw"]["labels"]["rank0"] == "a"
    assert "sum correct" in f.summary


def test_busbw_formula():
    assert OK0["busbw_gbps"] == OK0["algbw_gbps"] * 2 * (2 - 1) / 2  # n = 2: busbw == algbw


@pytest.mark.parametrize("below,status", [("warn", Status.WARN), ("fail", Status.FAIL)])
def test_min_busbw(below, status):
    f, _ = verdict(out(OK0), out(OK1), {"min_busbw_gbps": 10, "below_min": below})
    assert f.status is status and "min_busbw_gbps" in f.summary and f.remediation
    f, _ = verdict(out(OK0), out(OK1), {"min_busbw_gbps": 0.5})
    assert f.status is Status.PASS


def test_missing_nic_blames_that_side():
    f, blamed = verdict(out(WAIT0), out(IFNAME))
    assert f.status is Status.FAIL and list(blamed) == ["b"]
    assert "rank 1 on b" in f.summary and "Unable to find address for: eth9" in f.summary
    assert "GLOO_SOCKET_IFNAME" in blamed["b"].remediation
    assert blamed["b"].details["error_lines"][0].startswith("RuntimeError: [enforce fail")


def test_store_unreachable_blames_rank0_side():
    f, blamed = verdict(out(WAIT0), out(STORE1))
    assert list(blamed) == ["a"] and "firewall" in f.remediation
    assert "rank 1 on b" in f.summary  # the side that saw it


def test_connect_full_mesh_on_both_sides_blames_both_ends():
    f, blamed = verdict(out(MESH), out(MESH1))
    assert sorted(blamed) == ["a", "b"] and "GLOO_SOCKET_IFNAME" in f.remediation
    assert "connectFullMesh" in f.summary


def test_hccl_ei0006():
    f, blamed = verdict(out(EI0006), out(HUNG1))
    assert f.status is Status.FAIL and "HCCL_CONNECT_TIMEOUT" in f.remediation and "EI0006" in f.remediation
    assert sorted(blamed) == ["a", "b"]


def test_hang_timeout_without_result_line():
    r = S.parse_rank("b", 1, out(None, stderr="", rc=124, timed_out=True))
    assert not r.ok and r.diagnosis is S.HANG and "did not finish" in r.error
    f, blamed = verdict(out(WAIT0), out(None, rc=124, timed_out=True))
    assert f.status is Status.FAIL and sorted(blamed) == ["a", "b"]
    f, blamed = verdict(out(OK0), out(HUNG1))
    assert list(blamed) == ["b"] and "hung" in f.summary and "net.ping_mesh" in f.remediation


def test_python_without_torch_and_missing_python():
    r = S.parse_rank("a", 0, out(None, stderr=NO_TORCH, rc=1))
    assert r.diagnosis.kind == "no_torch" and r.diagnosis.local
    f, blamed = verdict(out(None, stderr=NO_TORCH, rc=1), out(STORE1))
    assert list(blamed) == ["a"] and "python" in blamed["a"].remediation
    r = S.parse_rank("a", 0, out(None, stderr="bash: line 1: /opt/py/bin/python3: No such file or directory", rc=127))
    assert r.diagnosis is S.NO_PYTHON


def test_wrong_sum_and_port_in_use():
    bad = {**OK0, "ok": False, "sum_ok": False, "got": [3.0, 4.0], "kind": "wrong_sum",
           "error": "all_reduce result wrong: expected 3 everywhere, got 3..4"}
    f, blamed = verdict(out(bad), out(OK1))
    assert f.status is Status.FAIL and "wrong" in f.summary and blamed == {"a": blamed["a"]}
    inuse = err(0, "a", "store", ["DistNetworkError: The server socket has failed to listen on any local network "
                                  "address. port: 29400, useIpv6: 0, code: -98, name: EADDRINUSE, message: address in use"])
    f, blamed = verdict(out(inuse), out(STORE1))
    assert list(blamed) == ["a"] and "ss -ltnp" in f.remediation


def test_every_fail_has_a_remediation_and_probe_missing_is_fail():
    f, blamed = verdict(out(OK0), None)
    assert f.status is Status.FAIL and f.remediation and all(x.remediation for x in blamed.values())
    (f,) = S.evaluate(ctx())  # plan never reached the nodes
    assert f.status is Status.ERROR


def test_pairs_without_second_round_documents_the_limitation():
    names = ("a", "b", "c", "d")
    p = {**planned(out(WAIT0), out(IFNAME)), **planned(out(OK0), out(OK1), "c", "d")}
    findings = S.evaluate(ctx({"mode": "pairs"}, p, names))
    assert findings[0].status is Status.FAIL and "limitation" in findings[0].details
    assert [f.node for f in findings if f.node] == ["b"]


def test_pairs_second_round_names_the_bad_node():
    names = ("a", "b", "c", "d")
    p = {**planned(out(MESH), out(MESH1)), **planned(out(OK0), out(OK1), "c", "d")}
    # round 2: c hosts a (passes), d hosts b (fails again)
    for a, b, r1 in (("c", "a", out(OK1)), ("d", "b", out(MESH1))):
        for n, v in planned(out(OK0) if r1.rc == 0 else out(MESH), r1, a, b, 2).items():
            p.setdefault(n, {}).update(v)
    findings = S.evaluate(ctx({"mode": "pairs"}, p, names))
    assert [f.node for f in findings if f.node] == ["b"], [f.summary for f in findings]
    assert "known-good d" in findings[1].summary


# ---------------------------------------------------------------- the real worker, two local processes

@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed (pip install torch==2.13.0)")
def test_worker_runs_two_local_ranks():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    params = {**S.DEFAULTS, "size_mib": 1, "iters": 2, "warmup": 1, "rendezvous_timeout_s": 20}
    nodes = [Node(name=n, host="127.0.0.1", python=sys.executable, env={"GLOO_SOCKET_IFNAME": "lo"}) for n in "ab"]
    procs = [subprocess.Popen(["sh", "-c", S.rank_command(nd, r, 2, "127.0.0.1", port, params)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r, nd in enumerate(nodes)]
    outs = []
    for p in procs:
        o, e = p.communicate(timeout=60)
        outs.append(CommandOutput(stdout=o, stderr=e, rc=p.returncode))
    (f,) = S.evaluate(ctx(planned=planned(*outs), names=("a", "b")))
    assert f.status is Status.PASS, f.summary
    assert [r["got"] for r in f.details["ranks"]] == [[3.0, 3.0], [3.0, 3.0]]


# ---------------------------------------------------------------- one machine listed twice

def twin_ctx(params=None, planned=None):
    """a and b are one machine (the same host and port); c is another."""
    nodes = {"a": node("a", "198.18.0.2"), "b": node("b", "198.18.0.2"), "c": node("c", "198.18.0.4")}
    return ClusterContext(nodes=nodes, facts={n: {} for n in nodes}, params={**S.DEFAULTS, **(params or {})},
                          planned=planned or {}, unreachable=())


def test_nodes_at_one_address_are_never_paired():
    c = twin_ctx()
    assert S.same_machine(c, ["a", "b", "c"]) == {"b": "a"}
    assert S.select_nodes(c) == (["a", "c"], None)
    pairs = {k.split(S.SEP)[2:4][0] + "-" + k.split(S.SEP)[3] for per in S.plan(c).values() for k in per}
    assert pairs == {"a-c"}
    c = twin_ctx({"mode": "pairs"})
    assert S.pairing(S.select_nodes(c)[0]) == [("a", "c")]
    nodes, problem = S.select_nodes(twin_ctx({"nodes": ["a", "b"]}))
    assert nodes == [] and "a and b reach the same address (198.18.0.2)" in problem
    (f,) = S.evaluate(twin_ctx({"nodes": ["a", "b"]}))
    assert f.status is Status.ERROR and "same address" in f.summary


def test_a_shared_communication_address_is_one_machine_too():
    """Different SSH names, one HCCL_IF_IP: the ranks would meet on one machine."""
    nodes = {n: node(n, h, env={"HCCL_IF_IP": ip}) for n, h, ip in
             (("a", "198.18.0.2", "10.9.0.1"), ("b", "a-alias.example", "10.9.0.1"), ("c", "198.18.0.4", "10.9.0.3"))}
    c = ClusterContext(nodes=nodes, facts={n: {} for n in nodes}, params=dict(S.DEFAULTS), planned={}, unreachable=())
    assert S.same_machine(c, list(nodes)) == {"b": "a"} and S.select_nodes(c) == (["a", "c"], None)


def test_evaluate_names_the_left_out_twin():
    p = planned(out(OK0), out({**OK1, "node": "c"}), "a", "c")
    [f] = S.evaluate(twin_ctx(planned=p))
    assert f.status is Status.PASS and f.details["same_address"] == {"b": "a"}


def _mixed(params=None):
    """a, b: Ascend; g1, g2: NVIDIA (in an order that would pair a with g1)."""
    nodes = {"a": node("a", "198.18.0.2", backend="ascend"), "g1": node("g1", "198.18.0.3", backend="nvidia"),
             "b": node("b", "198.18.0.4", backend="ascend"), "g2": node("g2", "198.18.0.5", backend="nvidia")}
    return ClusterContext(nodes=nodes, facts={n: {} for n in nodes}, params={**S.DEFAULTS, **(params or {})})


def test_default_pair_is_two_nodes_of_one_backend():
    assert S.select_nodes(_mixed()) == (["a", "b"], None)


def test_pairs_mode_pairs_within_each_backend():
    plan = S.plan(_mixed({"mode": "pairs"}))
    pairs = {tuple(k.split(S.SEP)[2:4]) for probes in plan.values() for k in probes}
    assert pairs == {("a", "b"), ("g1", "g2")}, pairs


def test_naming_an_ascend_and_an_nvidia_node_is_refused():
    nodes, problem = S.select_nodes(_mixed({"nodes": ["a", "g1"]}))
    assert nodes == [] and "a is Ascend and g1 is NVIDIA" in problem
    [f] = S.evaluate(_mixed({"nodes": ["a", "g1"]}))
    assert f.status is not Status.PASS and "never mixes" in f.summary


# ---------------------------------------------------------------- mode all: the whole selection, then isolation

def _rank_line(cfg, wrong=False, bw=1.0, hang=False):
    """A worker's line in the worker's own shape (the fields of OK0, recorded from a gloo run)."""
    world, rank = cfg["world"], cfg["rank"]
    exp = float(W.rank_sum(world))
    if hang:
        return err(rank, cfg["node"], "timed", ["no progress in phase timed after 31s (rank %d hung)" % rank], kind="hang")
    rec = {**OK0, "rank": rank, "node": cfg["node"], "world": world, "expected": exp, "got": [exp, exp],
           "busbw_gbps": bw, "algbw_gbps": bw * world / (2 * (world - 1))}
    if wrong:
        rec.update(ok=False, sum_ok=False, got=[exp, exp + 1], kind="wrong_sum",
                   error=f"all_reduce result wrong on rank {rank} ({cfg['node']}): element 0 is {exp + 1:g}, expected {exp:g}")
    return rec


def drive(c, fleet, rounds=S.POLICY.plan_rounds):
    """What the runner does: plan() again while it returns probes; every probe's output from `fleet`
    (a function of the rank configs of one group)."""
    for _ in range(rounds):
        p = S.plan(c)
        if not p:
            break
        groups = {}
        for node, probes in p.items():
            for name, probe in probes.items():
                groups.setdefault(name.rsplit("|", 1)[0], []).append((node, name, config_of(probe.cmd)))
        for members in groups.values():
            nodes = [n for n, _, _ in members]
            for node, name, cfg in members:
                got = fleet(nodes, cfg)
                c.planned.setdefault(node, {})[name] = got if isinstance(got, CommandOutput) else out(got)
    return S.evaluate(c)


def all_ctx(n, **params):
    return ctx({"mode": "all", "size_mib": 1, **params}, names=[f"n{i}" for i in range(n)])


def test_all_mode_healthy_fleet_passes_with_whole_metrics_and_a_survey():
    c = all_ctx(8)
    findings = drive(c, lambda nodes, cfg: _rank_line(cfg))
    (f,) = findings
    assert f.status is Status.PASS and "all_reduce over 8 nodes (8 ranks" in f.summary, f.summary
    assert f.details["rounds"] == 2 and len(f.details["good"]) == 8
    m = {x["name"]: x for x in f.details["metrics"]}
    assert m["busbw"]["labels"]["nodes"] == "8"


def test_all_mode_names_the_wrong_sum_node_only():
    c = all_ctx(16)
    findings = drive(c, lambda nodes, cfg: _rank_line(cfg, wrong="n11" in nodes))
    head, rows = findings[0], {f.node: f for f in findings[1:]}
    assert head.status is Status.FAIL and list(rows) == ["n11"], head.summary
    assert "wrong all_reduce result" in rows["n11"].summary and "proven-good" in rows["n11"].summary
    assert rows["n11"].remediation == S.R_SUM
    assert head.details["rounds"] <= 4 + 2 and len(head.details["good"]) == 15
    assert "culprit(s) n11 (wrong all_reduce result)" in head.summary


def test_all_mode_slow_node_with_measured_and_expected_figures():
    c = all_ctx(8)
    findings = drive(c, lambda nodes, cfg: _rank_line(cfg, bw=0.1 if "n2" in nodes else 1.0))
    head, rows = findings[0], {f.node: f for f in findings[1:]}
    assert list(rows) == ["n2"], head.summary
    assert rows["n2"].details["measured_gbps"] == 0.1 and rows["n2"].details["expected_gbps"] >= 0.5
    assert "slow: busbw 0.1 GB/s" in rows["n2"].summary and rows["n2"].remediation == S.R_SLOW


def test_all_mode_node_without_torch_is_blamed_without_a_collective():
    c = all_ctx(6)

    def fleet(nodes, cfg):
        if cfg["node"] == "n4":
            return out(None, stderr=NO_TORCH, rc=1)
        return err(cfg["rank"], cfg["node"], "store", ["DistStoreError: wait timeout after 6000ms"]) if "n4" in nodes \
            else _rank_line(cfg)

    findings = drive(c, fleet)
    rows = {f.node: f for f in findings[1:]}
    assert list(rows) == ["n4"] and rows["n4"].details["why"] == "local"
    assert "could not start" in rows["n4"].summary and "python" in rows["n4"].remediation
    assert findings[0].details["rounds"] == 2


def test_all_mode_probe_names_are_unique_per_round_and_ports_move_on():
    c = all_ctx(4)
    p1 = S.plan(c)
    assert sorted(k for v in p1.values() for k in v) == [f"smoke-all|1|0|n{i}" for i in range(4)]
    cfgs = [config_of(pr.cmd) for v in p1.values() for pr in v.values()]
    assert {x["world"] for x in cfgs} == {4} and sorted(x["rank"] for x in cfgs) == [0, 1, 2, 3]
    for node, probes in p1.items():
        for name, probe in probes.items():
            c.planned.setdefault(node, {})[name] = out(_rank_line(config_of(probe.cmd)))
    p2 = S.plan(c)
    names2 = sorted(k for v in p2.values() for k in v)
    assert names2 == ["smoke-all|2|0|n0", "smoke-all|2|0|n1", "smoke-all|2|1|n2", "smoke-all|2|1|n3"]
    assert {config_of(pr.cmd)["port"] for v in p2.values() for pr in v.values()} == {29401}


def test_all_mode_ranks_per_node_devices_one_rank_per_device():
    c = all_ctx(2, ranks_per_node="devices")
    c = ClusterContext(nodes={k: dataclasses.replace(n, devices=4) for k, n in c.nodes.items()}, facts=c.facts,
                       params=c.params, planned={})
    text = S.plan(c)["n1"]["smoke-all|1|0|n1"].cmd
    lines = [ln for ln in text.splitlines() if ln.startswith('PF_SMOKE_DIR="$d" ')]
    cfgs = [config_of(ln) for ln in lines]
    assert [x["rank"] for x in cfgs] == [4, 5, 6, 7] and [x["visible_device"] for x in cfgs] == [0, 1, 2, 3]
    assert {x["world"] for x in cfgs} == {8} and {x["device"] for x in cfgs} == {0}


def test_all_mode_a_lost_connection_is_no_evidence_against_the_node():
    c = all_ctx(8)
    seen = []

    def fleet(nodes, cfg):
        seen.append(tuple(nodes))
        if len(seen) <= 8 and cfg["node"] == "n5":  # round 1: n5's connection drops, its result never comes
            return CommandOutput(rc=None, error="connection lost before the probe finished")
        return _rank_line(cfg, wrong="n2" in nodes)

    findings = drive(c, fleet)
    head, rows = findings[0], {f.node: f for f in findings[1:]}
    assert list(rows) == ["n2"], head.summary  # n5 not blamed for the lost connection
    assert head.details["lost"] == [{"round": 1, "nodes": ["n5"]}] and "was lost mid-round" in head.summary
    assert sum(1 for g in head.details["groups"] if len(g["members"]) == 8) == 2  # the whole ran again


def test_all_mode_nodes_nothing_points_at_are_not_judged_rather_than_blamed():
    """Seen on the loaded test machine: n4 has no torch, and every later round loses its
    connections. n4 is blamed; the others, whose round-1 failure n4 explains, are not judged (error),
    never failed."""
    c = all_ctx(6)

    def fleet(nodes, cfg):
        if len(nodes) < 6:
            return CommandOutput(rc=None, error="connection lost: SSH session not active")
        if cfg["node"] == "n4":
            return out(None, stderr=NO_TORCH, rc=1)
        return err(cfg["rank"], cfg["node"], "store", ["DistStoreError: wait timeout after 6000ms"])

    findings = drive(c, fleet)
    rows = {f.node: f for f in findings[1:]}
    assert rows["n4"].status is Status.FAIL and rows["n4"].details["why"] == "local"
    assert {n: f.status for n, f in rows.items() if n != "n4"} == {f"n{i}": Status.ERROR for i in (0, 1, 2, 3, 5)}
    assert "not judged" in rows["n0"].summary


# ---------------------------------------------------------------- mode all: the fp32 pattern stays exact

def _fp32_running_sum(values):
    """Add `values` one by one in fp32 (array 'f' rounds every stored sum to fp32): the worst order
    for rounding, as a ring or tree all-reduce would add them at some point."""
    from array import array
    acc = array("f", [0.0])
    for v in values:
        acc[0] += v
    return acc[0]


def test_pattern_sum_is_exact_in_fp32_up_to_the_limit_and_the_old_one_was_not():

    assert W.MAX_EXACT_WORLD > 100_000 and W.exact_in_fp32(W.MAX_EXACT_WORLD) and not W.exact_in_fp32(W.MAX_EXACT_WORLD + 1)
    world = W.MAX_EXACT_WORLD
    for factor in (3, 4):  # element i's factor 1 + i % 4
        assert _fp32_running_sum(W.contribution(r) * factor for r in range(world)) == W.rank_sum(world) * factor
    # (r+1) per rank, the pattern before: 256 nodes x 16 NPUs already read as a wrong sum
    assert _fp32_running_sum((r + 1) * 3 for r in range(4096)) != 3 * 4096 * 4097 // 2
    assert [W.contribution(r) for r in (0, 1, 15, 16)] == [1, 2, 16, 1] and W.rank_sum(2) == 3


def _devices_ctx(n, devices, **params):
    c = all_ctx(n, ranks_per_node="devices", **params)
    return ClusterContext(nodes={k: dataclasses.replace(x, devices=devices) for k, x in c.nodes.items()},
                          facts=c.facts, params=c.params, planned={})


def test_all_mode_refuses_a_world_past_the_exact_fp32_limit():

    big = _devices_ctx(2, W.MAX_EXACT_WORLD // 2 + 1)
    assert S.plan(big) == {}
    (f,) = S.evaluate(big)
    assert f.status is Status.ERROR and f"past the {W.MAX_EXACT_WORLD}" in f.summary and "ranks_per_node: node" in f.summary
    # 256 nodes x 16 devices (4,096 ranks, past the old pattern's limit) runs, every rank's config in it
    fleet = _devices_ctx(256, 16)
    p = S.plan(fleet)
    cfgs = [config_of(ln) for probes in p.values() for pr in probes.values()
            for ln in pr.cmd.splitlines() if ln.startswith('PF_SMOKE_DIR="$d" ')]
    assert len(cfgs) == 4096 and {c["world"] for c in cfgs} == {4096}


# ---------------------------------------------------------------- ranks_per_node devices: the job's own device list

def test_visible_devices_take_the_launch_environments_list():
    env = {"ASCEND_RT_VISIBLE_DEVICES": "8,9,10,11"}
    assert W.visible_devices(env, 1) == {"ASCEND_RT_VISIBLE_DEVICES": "9", "CUDA_VISIBLE_DEVICES": "1"}
    assert W.visible_devices({}, 3) == {"ASCEND_RT_VISIBLE_DEVICES": "3", "CUDA_VISIBLE_DEVICES": "3"}
    assert W.visible_devices({"CUDA_VISIBLE_DEVICES": " 4, 5 "}, 0)["CUDA_VISIBLE_DEVICES"] == "4"
    with pytest.raises(RuntimeError) as e:  # the inventory says 4 devices, the job exposes 2
        W.visible_devices({"ASCEND_RT_VISIBLE_DEVICES": "8,9"}, 3)
    diag = S.diagnose(f"RuntimeError: {e.value}")
    assert diag.kind == "visible_devices" and diag.kind in S.LOCAL_KINDS and "devices" in diag.remediation


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed (pip install torch==2.13.0)")
def test_worker_ranks_per_device_use_the_jobs_visible_devices():
    """Two ranks of one node in `ranks_per_node: devices`, through the node's real launch
    environment: each rank sees the i-th device of the list the job set, not bare i."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    params = {**S.DEFAULTS, "size_mib": 1, "iters": 1, "warmup": 1, "rendezvous_timeout_s": 20, "backend": "gloo"}
    nd = Node(name="a", host="127.0.0.1", python=sys.executable,
              env={"GLOO_SOCKET_IFNAME": "lo", "ASCEND_RT_VISIBLE_DEVICES": "8,9", "CUDA_VISIBLE_DEVICES": "4,5",
                   "RANK_TABLE_FILE": "/job/hccl.json"})
    cp = subprocess.run(["sh", "-c", S.rank_command(nd, 0, 2, "127.0.0.1", port, params, local=[(0, 0), (1, 1)])],
                        capture_output=True, text=True, timeout=60)
    o = CommandOutput(stdout=cp.stdout, stderr=cp.stderr, rc=cp.returncode)
    ranks = [S.parse_rank("a", r, o) for r in (0, 1)]
    assert all(r.ok for r in ranks), [r.error for r in ranks]
    assert [r.record["visible_devices"] for r in ranks] == [
        {"ASCEND_RT_VISIBLE_DEVICES": "8", "CUDA_VISIBLE_DEVICES": "4"},
        {"ASCEND_RT_VISIBLE_DEVICES": "9", "CUDA_VISIBLE_DEVICES": "5"}]
    # the job's rank table describes the job's ranks, not this check's: torch_npu must not see it
    assert [r.record["rank_table_unset"] for r in ranks] == ["/job/hccl.json"] * 2


# ---------------------------------------------------------------- mode all: hangs, bounds, a taken port

def test_all_mode_hung_node_is_named_hung_in_the_bound():
    """Every rank of a collective n3 is in stalls until its watchdog fires: only n3 is blamed, as hung."""
    c = all_ctx(8)
    findings = drive(c, lambda nodes, cfg: _rank_line(cfg, hang="n3" in nodes))
    head, rows = findings[0], {f.node: f for f in findings[1:]}
    assert list(rows) == ["n3"], head.summary
    assert head.details["rounds"] <= 3 + 2 and len(head.details["good"]) == 7
    assert "hung; isolation in" in head.summary and "culprit(s) n3 (hung)" in head.summary
    assert rows["n3"].status is Status.FAIL and rows["n3"].details["kind"] == "hang"
    assert "hung in every collective it joined" in rows["n3"].summary and "no progress in phase timed" in rows["n3"].summary
    assert rows["n3"].remediation == S.R_HANG


def _timed(rec, seconds):
    o = out(rec)
    return dataclasses.replace(o, duration_s=seconds)


def test_all_mode_budget_stops_new_rounds_and_says_so():
    """Rounds of 100 s, a round's timeout 210 s (60 + 120 + 30), budget 350 s: round 2 starts
    (100 + 210 <= 350), round 3 would not fit (200 + 210 > 350)."""
    c = all_ctx(16, budget_s=350)
    findings = drive(c, lambda nodes, cfg: _timed(_rank_line(cfg, wrong="n11" in nodes), 100.0))
    head = findings[0]
    assert head.details["rounds"] == 2 and S.plan(c) == {}
    assert "stopped: budget_s 350 reached (the rounds took 200 s" in head.summary, head.summary
    rows = {f.node: f for f in findings[1:]}
    assert "n11" in rows and all(f.status is Status.FAIL for f in rows.values())  # suspects, not convicted
    assert "the isolation stopped (budget_s 350" in rows["n11"].summary and "no round could split" not in rows["n11"].summary
    # with the default budget the same fleet is isolated: n11 alone
    c = all_ctx(16)
    rows = {f.node: f for f in drive(c, lambda nodes, cfg: _timed(_rank_line(cfg, wrong="n11" in nodes), 100.0))[1:]}
    assert list(rows) == ["n11"]


def test_all_mode_max_rounds_bounds_the_isolation():
    c = all_ctx(16, max_rounds=3)
    findings = drive(c, lambda nodes, cfg: _rank_line(cfg, wrong="n11" in nodes))
    head = findings[0]
    assert head.details["rounds"] == 3 and S.plan(c) == {}
    assert "stopped: max_rounds 3 reached" in head.summary and "n11" in head.summary
    assert {g["round"] for g in head.details["groups"]} == {1, 2, 3}


ADDR_IN_USE = ("DistNetworkError: The server socket has failed to listen on any local network address. "
               "port: 29400, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use")


def test_all_mode_taken_port_is_blamed_locally_without_a_collective():
    """n0 hosts round 1's store and its port is taken: n0 is blamed from its own rank's error, and no
    later group includes it; the nodes that could not reach its store are not blamed."""
    c = all_ctx(8)

    def fleet(nodes, cfg):
        if nodes[0] != "n0":
            return _rank_line(cfg)
        if cfg["node"] == "n0":
            return err(0, "n0", "store", [ADDR_IN_USE])
        return err(cfg["rank"], cfg["node"], "store", ["DistNetworkError: Connection refused"])

    findings = drive(c, fleet)
    head, rows = findings[0], {f.node: f for f in findings[1:]}
    assert list(rows) == ["n0"], head.summary
    assert rows["n0"].details["why"] == "local" and rows["n0"].details["kind"] == "port_in_use"
    assert "blamed without a collective" in rows["n0"].summary and "address already in use" in rows["n0"].summary
    assert rows["n0"].remediation == S.R_BIND
    assert all("n0" not in g["members"] for g in head.details["groups"] if g["round"] > 1)
    assert len(head.details["good"]) == 7


# ---------------------------------------------------------------- HCCL's buffer and connect timeout

def test_hccl_buffsize_rule():
    assert W.hccl_buffsize(64, {}) == (None, 200)  # fits HCCL's default 200 MB
    assert W.hccl_buffsize(512, {}) == ("513", 513)  # raised for the rank: ceil(size) + 1
    assert W.hccl_buffsize(199.5, {}) == ("201", 201) and W.hccl_buffsize(199, {}) == (None, 200)
    assert W.hccl_buffsize(512, {"HCCL_BUFFSIZE": "300"}) == (None, 300)  # the job's own value is kept
    assert W.hccl_buffsize(512, {"HCCL_BUFFSIZE": ""}) == ("513", 513)
    assert W.hccl_buffsize(64, {"HCCL_BUFFSIZE": "2e8"}) == (None, None)


def test_all_mode_notes_the_jobs_hccl_buffer_and_connect_timeout_on_the_cluster_row():
    c = all_ctx(4, size_mib=512)
    env = {"HCCL_BUFFSIZE": "300", "HCCL_CONNECT_TIMEOUT": "1800", "RANK_TABLE_FILE": "/job/hccl.json"}
    c = ClusterContext(nodes={k: dataclasses.replace(x, env=env) for k, x in c.nodes.items()}, facts=c.facts,
                       params=c.params, planned={})
    (f,) = drive(c, lambda nodes, cfg: _rank_line(cfg))
    assert f.status is Status.PASS
    assert ("note: the job's HCCL_BUFFSIZE 300 MB on n0, n1, n2, n3 is under the 512 MiB message" in f.summary
            and "HCCL_CONNECT_TIMEOUT 1800 s on n0, n1, n2, n3 is past this check's watchdog of 180 s" in f.summary), f.summary
    assert "RANK_TABLE_FILE is set on n0, n1, n2, n3: this check's ranks run without it" in f.summary, f.summary
    assert len(f.details["notes"]) == 3
    # a job that sets neither, or values that fit: nothing to note
    (f,) = drive(all_ctx(4), lambda nodes, cfg: _rank_line(cfg))
    assert "note" not in f.summary and "notes" not in f.details
    ok_env = {"HCCL_BUFFSIZE": "300", "HCCL_CONNECT_TIMEOUT": "120"}
    c = all_ctx(4)
    c = ClusterContext(nodes={k: dataclasses.replace(x, env=ok_env) for k, x in c.nodes.items()}, facts=c.facts,
                       params=c.params, planned={})
    (f,) = drive(c, lambda nodes, cfg: _rank_line(cfg))
    assert "notes" not in f.details, f.summary
    c = all_ctx(4, size_mib=512)  # HCCL's variables mean nothing to NVIDIA nodes
    c = ClusterContext(nodes={k: dataclasses.replace(x, env=env, backend="nvidia") for k, x in c.nodes.items()},
                       facts=c.facts, params=c.params, planned={})
    (f,) = drive(c, lambda nodes, cfg: _rank_line(cfg))
    assert "notes" not in f.details, f.summary


# ---------------------------------------------------------------- mode all: the words a user reads

def test_a_rank_without_a_result_line_is_quoted_by_its_exception_not_traceback(tmp_path):
    script = tmp_path / "w.py"
    script.write_text("import json\nimport preflight_no_such_torch\n")
    cp = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert cp.stderr.startswith("Traceback") and "    import preflight_no_such_torch" in cp.stderr  # a real one
    r = S.parse_rank("n4", 3, CommandOutput(stdout="", stderr=cp.stderr, rc=cp.returncode))
    assert r.error == "no result line (exit 1): ModuleNotFoundError: No module named 'preflight_no_such_torch'"


def test_all_mode_report_says_local_kinds_in_words():
    c = all_ctx(6)

    def fleet(nodes, cfg):
        if cfg["node"] == "n4":
            return out(None, stderr=NO_TORCH, rc=1)
        return err(cfg["rank"], cfg["node"], "store", ["DistStoreError: wait timeout after 6000ms"]) if "n4" in nodes \
            else _rank_line(cfg)

    findings = drive(c, fleet)
    head, row = findings[0], findings[1]
    assert "culprit(s) n4 (no torch in its python)" in head.summary and "no_torch" not in head.summary, head.summary
    assert row.summary == ("its rank could not start, so it was blamed without a collective: "
                           "no result line (exit 1): ModuleNotFoundError: No module named 'torch'")
    assert set(S.LOCAL_KINDS) <= set(S.WHY_TEXT) and S.why_text("some_new_kind") == "some new kind"


def test_all_mode_healthy_run_prints_one_busbw_figure_when_the_groups_agree():
    (f,) = drive(all_ctx(8), lambda nodes, cfg: _rank_line(cfg))
    assert f.summary.endswith("; 1 more round(s) of groups, no node slow or failing (busbw 1 GB/s)"), f.summary
    assert "1-1" not in f.summary
    bw = {"n0": 0.9, "n1": 0.9, "n2": 1.1, "n3": 1.1}
    (f,) = drive(all_ctx(8), lambda nodes, cfg: _rank_line(cfg, bw=min(bw.get(n, 1.0) for n in nodes)))
    assert "(busbw 0.9-1.1 GB/s)" in f.summary, f.summary


def test_default_budget_holds_a_hung_node_among_256_to_its_rounds():
    """A hung node among 256 takes 9 rounds, each as long as a round's probe timeout (210 s at the
    defaults: rendezvous 60 + run 120 + start-up 30) since every round holds its group: 1,890 s of
    rounds. The default budget_s must let the 9th round start (docs/PERFORMANCE.md §3)."""
    def fleet(nodes, cfg):
        return _timed(_rank_line(cfg, hang="n200" in nodes), 210.0 if "n200" in nodes else 15.0)

    head, *rows = drive(all_ctx(256), fleet)
    assert [f.node for f in rows] == ["n200"] and rows[0].details["kind"] == "hang", head.summary
    assert head.details["rounds"] == 9 and "stopped" not in head.details
    assert S.DEFAULTS["budget_s"] >= 9 * S.probe_timeout(S.DEFAULTS) + S.probe_timeout(S.DEFAULTS)  # room for the bound's 10th
    head, *_ = drive(all_ctx(256, budget_s=1800), fleet)  # the old default: cut after 8 rounds, n200 not named
    assert head.details["rounds"] == 8 and "stopped: budget_s 1800" in head.summary


# ---------------------------------------------------------------- pair / pairs: a lost rank is could-not-tell

LOST = CommandOutput(rc=None, error="connection lost")


def test_pair_mode_a_lost_rank_is_could_not_tell_never_a_fail():
    """A rank whose output never came back (no exit status, no hang) says nothing about either
    node: the pair is `error`, as in mode all (_lost), never a FAIL blaming a node."""
    findings = S.evaluate(ctx(None, planned(out(OK0), LOST)))
    assert findings[0].status is Status.ERROR and "could not tell" in findings[0].summary
    assert not [f for f in findings if f.status is Status.FAIL], [f.summary for f in findings]
    assert {f.node for f in findings if f.node} == {"b"}
    # a hang (the remote timeout answered) is still the node's fail
    f, _ = verdict(out(WAIT0), out(None, rc=124, timed_out=True))
    assert f.status is Status.FAIL


def test_pairs_mode_a_lost_rank_is_could_not_tell_and_the_real_fail_stays():
    names = ("a", "b", "c", "d", "e", "f")
    p = {**planned(out(OK0), LOST), **planned(out(MESH), out(IFNAME), "c", "d"), **planned(out(OK0), out(OK1), "e", "f")}
    findings = S.evaluate(ctx({"mode": "pairs"}, p, names))
    by_node = {f.node: f for f in findings if f.node}
    assert by_node["b"].status is Status.ERROR and "connection lost" in by_node["b"].summary
    assert by_node["d"].status is Status.FAIL and "a" not in by_node and "b" not in S.repair_plan(
        {(1, "a", "b"): S.pair_result(ctx({"mode": "pairs"}, p, names), 1, "a", "b")})
    only_lost = S.evaluate(ctx({"mode": "pairs"}, {**planned(out(OK0), LOST), **planned(out(OK0), out(OK1), "c", "d")},
                               ("a", "b", "c", "d")))
    assert only_lost[0].status is Status.ERROR and not [f for f in only_lost if f.status in (Status.FAIL, Status.PASS)]


def test_a_lost_rank_in_a_replay_exits_3(ascend128_recording):
    """Through the runner: the recording holds no rank output ("not in the recording", rc None,
    as a lost connection reads): exit 3, could not tell, not 1."""
    from preflight import inventory, runner
    from preflight.transport.replay import ReplayTransport
    from tests.core.test_cluster_unread import FIX

    inv = inventory.load(str(FIX / "inventory.yaml"), limit="node[001-002]")
    report = runner.run(inv, ReplayTransport(str(ascend128_recording)), runner.Options(checks=["smoke.allreduce"]))
    got = [r for r in report.results if r.check == "smoke.allreduce"]
    assert got and {r.status for r in got} == {Status.ERROR}, [(r.node, r.status, r.summary) for r in got]
    assert report.exit_code == 3
