"""hccl.ranktable on the real rank tables (tests/fixtures/ascend/ranktable__*.json) against facts built
from real npu-smi samples, without SSH; its probe in a real shell."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from preflight.checkapi import ClusterContext, CommandOutput, Status
from preflight.checks import hccl_ranktable as check
from preflight.checks import hccn_ip, npu_health
from preflight.node import Node
from tests.checks.ascend_helpers import A2, A3, parse, smi
from tests.support import fixture_body, fixture_path

JITTOR = "ranktable__1.0_1server_8dev__jittorinfer.json"
TYPICAL = "ranktable__1.0_2servers_typical__hccl-doc.json"
SUPERPOD = "ranktable__1.2_superpod_2pods_4servers__hccl-doc.json"
SPOD = "npu-smi_info_-t_spod-info_-i_0_-c_0__A3__hicann-shmem.txt"
PATH = "/etc/hccl/hccl.json"


def own(text: str, path: str = PATH) -> check.Facts:
    digest = hashlib.sha256(text.encode()).hexdigest()
    return check.parse({check.STAT_PROBE: CommandOutput(stdout=f"{check.PATH} {path}\n{digest}  -\n")})


def ctx_for(name: str, text: str | None = None, smi_name: str = A2, mutate=None, spod=None,
            unreachable=()) -> ClusterContext:
    """One inventory node per server of the table (named n0, n1... with server_id as address), facts
    that agree with the table unless `mutate(facts)` changes them."""
    text = text if text is not None else fixture_path(name).read_text()
    doc = json.loads(text)
    nodes, facts = {}, {}
    for i, s in enumerate(doc["server_list"]):
        if s["server_id"] in unreachable:
            continue
        n = f"n{i}"
        nodes[n] = Node(n, s["server_id"], devices=16 if smi_name == A3 else 8)
        ips = {int(d["device_id"]): hccn_ip.DeviceIp(d.get("device_ip"), "255.255.255.0") for d in s["device"]}
        facts[n] = {check.ID: own(text), "npu.health": parse(npu_health, {"npu_smi": smi(smi_name)}),
                    "hccn.ip": hccn_ip.Facts(None, None, ips)}
    if mutate:
        mutate(facts)
    holder = sorted(nodes)[0]
    planned = {holder: {f"{check.READ_PROBE}_{holder}": CommandOutput(stdout=text)}}
    for n, out in (spod or {}).items():
        planned.setdefault(n, {})[check.SPOD_PROBE] = out
    return ClusterContext(nodes=nodes, facts=facts, params=check.DEFAULTS, planned=planned,
                          unreachable=tuple(unreachable))


def by_node(findings):
    return {f.node: f for f in findings}


def test_real_table_agrees_with_its_cluster():
    [f] = check.evaluate(ctx_for(JITTOR))
    assert f.status is Status.PASS and "8 ranks on 1 servers agree" in f.summary


def test_device_readdressed_fails_on_that_node_and_device():
    def readdress(facts):
        facts["n1"]["hccn.ip"].devices[1] = hccn_ip.DeviceIp("192.168.2.99", "255.255.255.0")
    summary, bad = check.evaluate(ctx_for(TYPICAL, mutate=readdress))
    assert summary.status is Status.FAIL and "disagrees on n1" in summary.summary
    assert bad.node == "n1" and bad.details["failed_devices"] == [1]
    assert "device 1 rank 3: rank table device_ip 192.168.2.9, hccn_tool -ip -g reports 192.168.2.99" in bad.summary
    assert "Regenerate" in bad.remediation and "hccn_tool -i N -ip -s address" in bad.remediation


def test_server_replaced_is_named_with_the_fix():
    text = fixture_path(TYPICAL).read_text().replace('"node_1"', '"node_9"')
    ctx = ctx_for(TYPICAL)  # the cluster still has node_1; the table names node_9
    ctx = ClusterContext(ctx.nodes, {**ctx.facts, "n0": {**ctx.facts["n0"], check.ID: own(text)},
                                     "n1": {**ctx.facts["n1"], check.ID: own(text)}},
                         ctx.params, {"n0": {f"{check.READ_PROBE}_n0": CommandOutput(stdout=text)}})
    findings = check.evaluate(ctx)
    assert "server node_9 (ranks 2-3) is not a reachable node of this run (not in the inventory: replaced?" \
        in findings[0].summary
    assert findings[0].status is Status.FAIL and "Regenerate" in findings[0].remediation
    assert by_node(findings)["n1"].status is Status.WARN  # the new node is in no table


def test_unreachable_server():
    findings = check.evaluate(ctx_for(TYPICAL, unreachable=("node_1",)))
    assert "server node_1 (ranks 2-3) is unreachable" in findings[0].summary


def test_device_missing_or_unhealthy():
    text = fixture_path(TYPICAL).read_text().replace('"device_id": "1",\n                    "device_ip": "192.168.2.9"',
                                                      '"device_id": "9",\n                    "device_ip": "192.168.2.9"')
    findings = check.evaluate(ctx_for(TYPICAL, text=text))
    assert "device 9 rank 3: no device 9 on this node (devices 0-7)" in by_node(findings)["n1"].summary

    def alarm(facts):
        h = facts["n0"]["npu.health"]
        chips = tuple(c if c.logical_id != 0 else type(c)(**{**c.__dict__, "health": "Alarm"}) for c in h.table.chips)
        facts["n0"]["npu.health"] = npu_health.Facts(table=type(h.table)(**{**h.table.__dict__, "chips": chips}))
    bad = by_node(check.evaluate(ctx_for(TYPICAL, mutate=alarm)))["n0"]
    assert "device 0 rank 0: device not healthy (npu-smi Health Alarm" in bad.summary


def test_table_hccl_refuses_is_one_line_fail():
    text = fixture_path(TYPICAL).read_text().replace('"rank_id": "3"', '"rank_id": "5"')
    [f] = check.evaluate(ctx_for(TYPICAL, text=text))
    assert f.status is Status.FAIL and "HCCL would refuse it" in f.summary and "rank_id 3 missing" in f.summary
    assert "\n" not in f.summary


def test_copy_differs_on_one_node():
    other = fixture_path(TYPICAL).read_text().replace("192.168.2.9", "192.168.2.10")

    def stale(facts):
        facts["n1"][check.ID] = own(other)
    findings = check.evaluate(ctx_for(TYPICAL, mutate=stale))
    assert "its rank table /etc/hccl/hccl.json differs from the copy on 1 other node(s)" in by_node(findings)["n1"].summary


def test_no_table_anywhere_skips_and_missing_file_fails():
    none = check.parse({check.STAT_PROBE: CommandOutput(stdout="@@none\n")})
    ctx = ctx_for(JITTOR, mutate=lambda f: f["n0"].update({check.ID: none}))
    assert check.evaluate(ctx)[0].status is Status.SKIP
    absent = check.parse({check.STAT_PROBE: CommandOutput(stdout=f"@@absent {PATH}\n")})
    [summary, bad] = check.evaluate(ctx_for(TYPICAL, mutate=lambda f: f["n1"].update({check.ID: absent})))
    assert bad.node == "n1" and f"rank table {PATH} not found" in bad.summary


def _spod(sdids: dict[tuple[int, int], tuple[int, int]]) -> CommandOutput:
    """The SPOD_PROBE frame around the real A3 sample, its SDID and Super Pod ID replaced (in code)."""
    sample = fixture_body(SPOD)
    parts = [f"@@spod {npu} {chip}\n" + sample.replace("16777216", str(sdid)).replace("Super Pod ID : 0",
                                                                                      f"Super Pod ID : {pod}")
             + "@@rc 0\n" for (npu, chip), (sdid, pod) in sdids.items()]
    return CommandOutput(stdout="".join(parts))


def _superpod_spod(tweak=None):
    """What npu-smi would print on the four A3 servers of the HCCL guide's SuperPoD table."""
    doc = json.loads(fixture_path(SUPERPOD).read_text())
    pod = {s["server_id"]: p["super_pod_id"] for p in doc["super_pod_list"] for s in p["server_list"]}
    table = parse(npu_health, {"npu_smi": smi(A3)}).table
    chip_of = {c.logical_id: (c.npu, c.chip) for c in table.chips}
    out = {}
    for i, s in enumerate(doc["server_list"]):
        sd = {chip_of[int(d["device_id"])]: (int(d["super_device_id"]), int(pod[s["server_id"]])) for d in s["device"]}
        if tweak:
            tweak(f"n{i}", sd, chip_of)
        out[f"n{i}"] = _spod(sd)
    return out


def test_superpod_table_agrees():
    [f] = check.evaluate(ctx_for(SUPERPOD, smi_name=A3, spod=_superpod_spod()))
    assert f.status is Status.PASS and "SuperPoD ids" in f.summary
    assert "16 super_device_id(s) compared with npu-smi spod-info" in f.details["notes"]


def test_superpod_sdid_mismatch_and_pod_split():
    def swap(node, sd, chip_of):
        if node == "n2":
            sd[chip_of[3]] = (42, 1)
        if node == "n1":
            sd.update({k: (v[0], 5) for k, v in sd.items()})  # node_1 sits in physical SuperPoD 5
    findings = check.evaluate(ctx_for(SUPERPOD, smi_name=A3, spod=_superpod_spod(swap)))
    assert "device 3 rank 11: super_device_id 3, npu-smi spod-info SDID 42" in by_node(findings)["n2"].summary
    assert "SuperPoD 0 of the table spans physical SuperPoDs [0, 5]" in findings[0].summary


def test_superpod_unsupported_is_a_note_not_a_verdict():
    unsupported = fixture_body("npu-smi_info_-t_spod-info_-i_0_-c_0__unsupported__hiascend-docs.txt")
    spod = {n: CommandOutput(stdout=f"@@spod 0 0\n{unsupported}@@rc 255\n@@spod 0 1\n{unsupported}@@rc 255\n")
            for n in ("n0", "n1", "n2", "n3")}
    [f] = check.evaluate(ctx_for(SUPERPOD, smi_name=A3, spod=spod))
    assert f.status is Status.PASS and any("offers no spod-info" in n for n in f.details["notes"])


def test_plan_reads_each_copy_once_and_asks_spod_on_a3_only():
    ctx = ctx_for(SUPERPOD, smi_name=A3)
    plan = check.plan(ctx)
    assert [k for k in plan["n0"]] == [f"{check.READ_PROBE}_n0", check.SPOD_PROBE]
    assert set(plan["n1"]) == {check.SPOD_PROBE} and plan["n1"][check.SPOD_PROBE].job is False
    assert "npu-smi info -t spod-info -i 7 -c 1" in plan["n1"][check.SPOD_PROBE].cmd
    a2 = check.plan(ctx_for(TYPICAL))
    assert a2 == {"n0": {f"{check.READ_PROBE}_n0": a2["n0"][f"{check.READ_PROBE}_n0"]}}


@pytest.mark.parametrize("via_env", [True, False])
def test_probe_in_a_real_shell(tmp_path, via_env):
    table = tmp_path / "hccl table.json"
    table.write_text(fixture_path(JITTOR).read_text())
    node = Node("n0", "127.0.0.1", env={"RANK_TABLE_FILE": str(table)} if via_env else {})
    probe = check.probes(node, {"path": "" if via_env else str(table)})[check.STAT_PROBE]
    run = subprocess.run(["sh", "-c", probe.cmd], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "RANK_TABLE_FILE": ""})
    facts = check.parse({check.STAT_PROBE: CommandOutput(stdout=run.stdout, stderr=run.stderr, rc=run.returncode)})
    assert facts == check.Facts(str(table), hashlib.sha256(table.read_bytes()).hexdigest())
    gone = check.probes(node, {"path": str(tmp_path / "nope.json")})[check.STAT_PROBE]
    run = subprocess.run(["sh", "-c", gone.cmd], capture_output=True, text=True, timeout=30)
    assert check.parse({check.STAT_PROBE: CommandOutput(stdout=run.stdout, rc=run.returncode)}).error == "not found"


def test_same_content_at_two_paths_is_one_copy_and_a_cut_read_is_said():
    text = fixture_path(TYPICAL).read_text()
    ctx = ctx_for(TYPICAL, mutate=lambda f: f["n1"].update({check.ID: own(text, "/shared/hccl.json")}))
    assert check.evaluate(ctx)[0].status is Status.PASS
    cut = ClusterContext(ctx.nodes, ctx.facts, ctx.params,
                         {"n0": {f"{check.READ_PROBE}_n0": CommandOutput(stdout=text[:100], truncated=True)}})
    [f] = check.evaluate(cut)
    assert f.status is Status.FAIL and "could not be read on n0: cut at the output cap" in f.summary


def _without_device_ip(name: str, host_ip: bool) -> str:
    doc = json.loads(fixture_path(name).read_text())
    for s in doc["server_list"]:
        for d in s["device"]:
            d.pop("device_ip", None)
        if not host_ip:
            s.pop("host_ip", None)
    return json.dumps(doc, indent=2)


def test_device_ip_left_out_between_servers_fails_on_a2_only():
    text = _without_device_ip(TYPICAL, host_ip=False)
    bad = by_node(check.evaluate(ctx_for(TYPICAL, text=text)))
    assert bad["n0"].details["failed_devices"] == [0, 1] and "no device_ip in the table; HCCL needs it" in bad["n0"].summary
    [ok] = check.evaluate(ctx_for(TYPICAL, text=_without_device_ip(TYPICAL, host_ip=True)))  # host NIC deployment
    assert ok.status is Status.PASS
    [a3] = check.evaluate(ctx_for(TYPICAL, text=text, smi_name=A3))  # A3: HCCL links over the vNIC
    assert a3.status is Status.PASS


def test_a_path_hccl_would_not_load():
    text = fixture_path(TYPICAL).read_text()
    ctx = ctx_for(TYPICAL, mutate=lambda f: [f[n].update({check.ID: own(text, "/etc/hccl/hccl.conf")}) for n in f])
    bad = by_node(check.evaluate(ctx))
    assert "rank table /etc/hccl/hccl.conf: HCCL loads it only from a file named *.json" in bad["n0"].summary


def test_real_hccn_tool_output_against_a_real_table():
    """hccn.ip's facts parsed from a real `hccn_tool -i N -ip -g` capture (MindCluster, 10.10.0.10-17)
    against JittorInfer's real table (192.168.20.191-198): every device disagrees; the same table
    re-addressed in code to the capture's addresses agrees."""
    from tests.checks.ascend_helpers import loop
    body = fixture_body("hccn_tool_-ip_-g__8dev_loop__mindcluster-fixture.txt").splitlines(keepends=True)
    facts = parse(hccn_ip, {"npu_smi": smi(A2), "ip": loop({d: "".join(body[2 * d:2 * d + 2]) for d in range(8)}),
                           hccn_ip.CONF_PROBE: CommandOutput(stdout=f"{hccn_ip.ABSENT} /etc/hccn.conf\n")})
    live = lambda f: f["n0"].update({"hccn.ip": facts})  # noqa: E731
    summary, bad = check.evaluate(ctx_for(JITTOR, mutate=live))
    assert bad.details["failed_devices"] == list(range(8))
    assert "device 0 rank 0: rank table device_ip 192.168.20.191, hccn_tool -ip -g reports 10.10.0.10" in bad.summary
    text = fixture_path(JITTOR).read_text()
    for d in range(8):
        text = text.replace(f'"192.168.20.19{d + 1}",\n                    "device_id"', f'"10.10.0.1{d}",\n                    "device_id"')
    [ok] = check.evaluate(ctx_for(JITTOR, text=text, mutate=live))
    assert ok.status is Status.PASS


def test_a_probe_that_did_not_run_is_could_not_tell_not_a_fail():
    from preflight.checkapi import ParseError
    for out in (CommandOutput(rc=None, error="not in the recording"), CommandOutput(timed_out=True, rc=124),
                CommandOutput(stdout="bash: line 1: syntax error\n", rc=2)):
        with pytest.raises(ParseError):
            check.parse({check.STAT_PROBE: out})


def test_no_node_read_is_could_not_tell_not_skip():
    ctx = ctx_for(TYPICAL)
    for nodes in ({}, ctx.nodes):  # the runner leaves unread nodes out; facts without ours: the same
        [f] = check.evaluate(ClusterContext(nodes, {n: {} for n in nodes}, ctx.params))
        assert f.status is Status.ERROR and "could not locate the rank table on any node" in f.summary
