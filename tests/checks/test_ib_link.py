from __future__ import annotations

from preflight.checkapi import Status
from preflight.checks import ib_link as check
from preflight.nvidia import probes as nv
from tests.checks.nvidia_helpers import node, out
from tests.support import fixture_body

IBSTAT = fixture_body("ibstat__H100_CX7_some_down__gpud-fixture.txt")
IBSTATUS = fixture_body("ibstatus__A100_all_active__gpud-fixture.txt")


def run(text, source="ibstat", **params):
    facts = check.parse({nv.IB_PROBE: out(f"@@source {source}\n{text}")})
    return check.evaluate(facts, {**check.DEFAULTS, **params}, node())


def test_h100_ib_ports_active_pass_and_down_ethernet_ports_are_not_judged():
    [f] = run(IBSTAT)
    assert f.status is Status.PASS and "8 IB ports Active/LinkUp at 400 Gb/s (ibstat)" in f.summary


def test_a_down_or_polling_ib_port_fails_naming_it():
    down = IBSTAT.replace("CA 'mlx5_3'", "CA 'mlx5_3'", 1)
    i = down.index("CA 'mlx5_3'")
    down = down[:i] + down[i:].replace("State: Active", "State: Down", 1).replace("Physical state: LinkUp", "Physical state: Polling", 1)
    [f] = run(down)
    assert f.status is Status.FAIL and f.details["failed_ports"] == ["mlx5_3:1"]
    assert "mlx5_3:1 State Down, Physical state Polling" in f.summary


def test_a_named_roce_port_is_judged():
    [f] = run(IBSTAT, ports=["mlx5_2"])
    assert f.status is Status.FAIL and "mlx5_2:1 State Down, Physical state Disabled" in f.summary


def test_rate_below_expected_fails():
    [f] = run(IBSTATUS, source="ibstatus", rate=400)
    assert f.status is Status.FAIL and "rate 200 Gb/s, expected 400" in f.summary
    [f] = run(IBSTATUS, source="ibstatus")
    assert f.status is Status.PASS


def test_sysfs_fallback_reads_the_same_port():
    # the values of gpud's sys-class-infiniband-h100.0 testdata (mlx5_0 port 1 files)
    text = "@@port mlx5_0 1\nstate: 4: ACTIVE\nphys_state: 5: LinkUp\nrate: 400 Gb/sec (4X NDR)\nlink_layer: InfiniBand\n"
    [f] = run(text, source="sysfs")
    assert f.status is Status.PASS and "1 IB ports" in f.summary


def test_no_hca_skips():
    facts = check.parse({nv.IB_PROBE: out("@@none\n")})
    [f] = check.evaluate(facts, check.DEFAULTS, node())
    assert f.status is Status.SKIP
