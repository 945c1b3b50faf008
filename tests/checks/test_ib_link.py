from __future__ import annotations

from preflight.checkapi import Status
from preflight.checks import ib_link as check
from preflight.nvidia import probes as nv, roce
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


# ---- RoCE ports through their netdev -------------------------------------------------------------

STEPMESH = fixture_body("ibdev2netdev__H20_RoCE_IB_bond__stepmesh-issue15.txt")
SRIOV = fixture_body("ibdev2netdev__CX6_IB_VFs_eth_up__sriov-operator-issue635.txt")


def _active_roce(text: str, ca: str) -> str:
    """The real H100 ibstat with one of its Ethernet ports (Down/Disabled in the capture) Active/LinkUp:
    the state the RDMA side reports while its netdev may be down."""
    i = text.index(f"CA '{ca}'")
    return text[:i] + text[i:].replace("State: Down", "State: Active", 1).replace("Physical state: Disabled", "Physical state: LinkUp", 1)


def netdevs(**state) -> str:
    """The ROCE_NETDEVS probe's `@@net` sections: name -> (operstate, carrier, speed) as the sysfs files read
    ('' = unreadable, as carrier and speed are while the interface is administratively down)."""
    out = ""
    for name, (oper, carrier, speed) in state.items():
        out += f"@@net {name}\noperstate: {oper}\ncarrier: {carrier}\nspeed: {speed}\n"
    return out


def run_roce(roce_out: str, ibstat_text=None, **params):
    text = ibstat_text if ibstat_text is not None else _active_roce(IBSTAT, "mlx5_7")
    facts = check.parse({nv.IB_PROBE: out(f"@@source ibstat\n{text}"), nv.ROCE_PROBE: out(roce_out)})
    return check.evaluate(facts, {**check.DEFAULTS, **params}, node())


def test_ibdev2netdev_real_samples_parse():
    m = roce.parse_ibdev2netdev(STEPMESH)
    assert m[("mlx5_1", 1)] == "ens12f0np0" and m[("mlx5_bond_0", 1)] == "bond0" and len(m) == 7
    m = roce.parse_ibdev2netdev(SRIOV)
    assert m[("mlx5_4", 1)] == "enp97s0f0" and m[("mlx5_19", 1)] == "ibp75s0v7" and len(m) == 16


def test_probe_sections_sysfs_wins_over_ibdev2netdev_and_a_missing_netdev_is_said():
    text = ("@@map sysfs\nmlx5_7 1 ens3f0\nmlx5_8 1 -\n@@map ibdev2netdev\nmlx5_7 port 1 ==> other0 (Up)\n"
            "mlx5_8 port 1 ==> ens3f1 (Down)\n" + netdevs(ens3f0=("up", "1", "100000")) + "@@net ens3f1 missing\n")
    m = roce.read_probe(text)
    nd, source = m.netdev_of("mlx5_7", 1)
    assert (nd.name, nd.up, nd.speed_gbps, source) == ("ens3f0", True, 100.0, "sysfs")
    nd, source = m.netdev_of("mlx5_8", 1)
    assert (nd.name, nd.present, nd.up, source) == ("ens3f1", False, False, "ibdev2netdev")
    assert m.netdev_of("mlx5_0", 1) == (None, None)


def test_a_roce_port_whose_netdev_is_down_fails_while_ibstat_says_active():
    rmap = "@@map ibdev2netdev\nmlx5_7 port 1 ==> ens3f0 (Down)\n" + netdevs(ens3f0=("down", "", ""))
    [f] = run_roce(rmap, ports=["mlx5_7"])
    assert f.status is Status.FAIL and f.details["failed_ports"] == ["mlx5_7:1"]
    assert "mlx5_7 port 1 (RoCE, netdev ens3f0): netdev down (ibstat State Active" in f.summary
    assert f.details["ports"][0]["netdev"] == "ens3f0"
    # no carrier (cable pulled, switch port down): operstate lowerlayerdown / carrier 0
    [f] = run_roce("@@map sysfs\nmlx5_7 1 ens3f0\n" + netdevs(ens3f0=("lowerlayerdown", "0", "-1")), ports=["mlx5_7"])
    assert f.status is Status.FAIL and "netdev lowerlayerdown (no carrier)" in f.summary


def test_a_roce_port_with_its_netdev_up_passes_naming_it_and_is_judged_at_the_netdev_speed():
    [f] = run_roce("@@map sysfs\nmlx5_7 1 ens3f0\n" + netdevs(ens3f0=("up", "1", "100000")), ports=["mlx5_7"])
    assert f.status is Status.PASS and "1 RoCE port(s) up at 100 Gb/s (mlx5_7:1 ens3f0)" in f.summary
    [f] = run_roce("@@map sysfs\nmlx5_7 1 ens3f0\n" + netdevs(ens3f0=("up", "1", "25000")), ports=["mlx5_7"], roce_rate=100)
    assert f.status is Status.FAIL and "mlx5_7 port 1 (RoCE, netdev ens3f0) rate 25 Gb/s, expected 100" in f.summary


def test_unnamed_roce_ports_stay_unjudged_and_without_a_netdev_fall_back_to_ibstat():
    rmap = "@@map ibdev2netdev\nmlx5_7 port 1 ==> ens3f0 (Down)\n" + netdevs(ens3f0=("down", "", ""))
    [f] = run_roce(rmap)
    assert f.status is Status.PASS
    [f] = run_roce("", ibstat_text=IBSTAT, ports=["mlx5_8"])
    assert f.status is Status.FAIL and "mlx5_8:1 State Down, Physical state Disabled, expected Active/LinkUp (RoCE: no netdev found)" in f.summary
