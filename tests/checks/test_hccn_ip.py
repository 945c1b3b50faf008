from __future__ import annotations

from preflight.checks import hccn_ip as check
from preflight.checkapi import CommandOutput, Status
from tests.checks.ascend_helpers import A3, MISSING, P310, followup, loop, node, parse, smi
from tests.support import fixture_body

ABSENT = CommandOutput(stdout="@@absent /etc/hccn.conf\n")
LOOP_LINES = fixture_body("hccn_tool_-ip_-g__8dev_loop__mindcluster-fixture.txt").splitlines()
EIGHT = {d: "\n".join(LOOP_LINES[2 * d:2 * d + 2]) + "\n" for d in range(8)}
CONF = "".join(f"address_{d}=10.10.0.{10 + d}\nnetmask_{d}=255.255.255.0\n" for d in range(8))


def facts(per_dev, conf=ABSENT, npu=None):
    return parse(check, {"npu_smi": npu or smi(), "hccn_conf": conf, "ip": loop(per_dev)})


def run(per_dev, conf=ABSENT, n=None, npu=None):
    return check.evaluate(facts(per_dev, conf, npu), {}, n or node())


def test_eight_device_sample_passes_and_exposes_devices():
    f = facts(EIGHT)
    assert f.devices[3] == check.DeviceIp("10.10.0.13", "255.255.255.0")
    [r] = check.evaluate(f, {}, node())
    assert r.status is Status.PASS


def test_matching_hccn_conf_passes_and_stale_entry_fails():
    assert run(EIGHT, CommandOutput(stdout=CONF))[0].status is Status.PASS
    stale = CONF.replace("address_4=10.10.0.14", "address_4=10.10.0.99")
    [r] = run(EIGHT, CommandOutput(stdout=stale))
    assert r.status is Status.FAIL and r.details["failed_devices"] == [4]
    assert "10.10.0.99" in r.summary and "10.10.0.14" in r.summary


def test_910a_samples_and_empty_output_fail():
    dev0, dev1 = fixture_body("hccn_tool_-ip_-g__910A_dev0_dev1__mindcluster-fixture.txt").split("\n\n")
    empty = fixture_body("hccn_tool_-ip_-g__empty__mindcluster-fixture.txt")
    [r] = run({0: dev0 + "\n", 1: dev1, 2: empty, **{d: EIGHT[d] for d in range(3, 8)}})
    assert r.status is Status.FAIL and r.details["failed_devices"] == [2] and "empty output" in r.summary


def test_no_ip_preset_error_fails():
    [r] = run({**EIGHT, 6: ("Get ipconf failed, because no ip was preset there!\n", 1)})
    assert r.status is Status.FAIL and r.details["failed_devices"] == [6] and "no ip was preset" in r.summary


def test_masked_doc_sample_reads():
    assert facts({0: fixture_body("hccn_tool_-ip_-g__masked__mindcluster-doc.txt")}).devices[0].ip == "10.xx.xx.10"


def test_missing_tool_and_inference_skip():
    r = check.evaluate(parse(check, {"npu_smi": smi(), "hccn_conf": ABSENT, "ip": MISSING}), {}, node())
    assert r[0].status is Status.FAIL and "hccn_tool" in r[0].summary
    assert run({}, npu=smi(P310), n=node(1))[0].status is Status.SKIP


def test_probes_share_npu_smi_and_read_conf():
    p = check.probes(node(), {})
    assert p["npu_smi"].cmd == "LC_ALL=C npu-smi info" and "/etc/hccn.conf" in p["hccn_conf"].cmd
    assert "for i in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15;" in followup(check, {"npu_smi": smi(A3)}, node(16), {})["ip"].cmd


def test_unreadable_hccn_conf_fails_naming_the_file():
    """An /etc/hccn.conf that exists but cannot be read is a fault of the node (a fail naming the
    file), not output preflight could not parse (docs/writing-a-check.md §4)."""
    unreadable = CommandOutput(stderr="cat: /etc/hccn.conf: Permission denied\n", rc=1)
    [f] = run(EIGHT, unreadable)
    assert f.status is Status.FAIL and "/etc/hccn.conf exists but cannot be read: cat: /etc/hccn.conf: Permission denied" in f.summary
    assert f.details["path"] == "/etc/hccn.conf" and "chmod 644" in f.remediation
