"""hccn_tool parsers on every real sample (tests/fixtures/ascend), plus error strings."""
from __future__ import annotations

import re
from datetime import datetime

import pytest

from preflight.ascend import probes as ascend
from preflight.checkapi import CommandOutput, ParseError
from preflight.checkhelpers import line_with
from preflight.node import Node
from preflight.registry import discover
from preflight.ascend import hccn
from tests.support import fixture_body, fixture_names

ELIDED = "..."  # doc writers' elision lines, not tool output


def body(name: str) -> str:
    return "\n".join(ln for ln in fixture_body(name).splitlines() if ln.strip() != ELIDED) + "\n"


def test_link_up_and_down():
    assert hccn.parse_link(body("hccn_tool_-link_-g__UP__mindcluster-doc.txt")) == "UP"
    assert hccn.parse_link("link status: DOWN\n") == "DOWN"  # DRV tool_ops.c prints UP or DOWN
    with pytest.raises(ParseError):
        hccn.parse_link("link status: flapping\n")


@pytest.mark.parametrize("name", fixture_names("hccn_tool_-link_stat_-g__"))
def test_link_stat_both_prefixes(name):
    stat = hccn.parse_link_stat(body(name))
    assert stat.up_count == 2 and stat.records and stat.down_count is None
    assert {what for _, what, _ in stat.records} == {"UP", "DOWN"}


def test_link_stat_values():
    stat = hccn.parse_link_stat(body("hccn_tool_-link_stat_-g__after_flap__mindcluster-fixture.txt"))
    assert stat.current_time == datetime(2022, 8, 2, 3, 36, 43)
    assert stat.records[0] == (datetime(2022, 8, 1, 14, 44, 40), "DOWN", "Tue Aug  1 14:44:40 2022")
    with pytest.raises(ParseError):
        hccn.parse_link_stat("current time : now\n")


@pytest.mark.parametrize("name,status", [
    ("hccn_tool_-net_health_-g__Init__mindcluster-doc.txt", "Init"),
    ("hccn_tool_-net_health_-g__Socket_failed__mindcluster-fixture.txt", "Socket failed"),
])
def test_net_health(name, status):
    assert hccn.parse_net_health(body(name)) == status


def test_ip_samples():
    assert hccn.parse_ip(body("hccn_tool_-ip_-g__masked__mindcluster-doc.txt")) == hccn.IpConf("10.xx.xx.10", "255.255.255.0")
    assert hccn.parse_ip(fixture_body("hccn_tool_-ip_-g__empty__mindcluster-fixture.txt")) == hccn.IpConf(None, None)
    dev0, dev1 = fixture_body("hccn_tool_-ip_-g__910A_dev0_dev1__mindcluster-fixture.txt").split("\n\n")
    assert hccn.parse_ip(dev1).ip == "192.161.201.10" and hccn.parse_ip(dev0).ip == "192.161.200.10"
    lines = fixture_body("hccn_tool_-ip_-g__8dev_loop__mindcluster-fixture.txt").splitlines()
    per_dev = ["\n".join(lines[i:i + 2]) for i in range(0, len(lines), 2)]
    assert [hccn.parse_ip(t).ip for t in per_dev] == [f"10.10.0.{10 + i}" for i in range(8)]
    with pytest.raises(ParseError):
        hccn.parse_ip("ip: 1.2.3.4\n")


def test_optical_full_and_elided():
    opt = hccn.parse_optical(body("hccn_tool_-optical_-g__910A_QSFP_4lane__mindcluster-fixture.txt"))
    assert opt.present == "not present" and opt.temperature == 47.0
    assert opt.rx_power == {0: 1.0189, 1: 0.0054, 2: 0.9907, 3: 1.0213} and opt.tx_power[0] == 4.4035
    assert opt.thresholds["RxPower Low Thres"] == 0.1445
    assert opt.flags["Rx Los Flag"] == "0xff" and opt.fields["high power enable reg"] == "enabled"
    assert hccn.optical_value("not supported") is None and hccn.optical_value("NA") is None
    elided = hccn.parse_optical(body("hccn_tool_-optical_-g__elided__mindcluster-doc.txt"))
    assert elided.tx_power == {0: 4.4035} and elided.rx_power == {0: 1.0189}


def test_optical_read_alike_whatever_the_line_breaks():
    """The one-scan reader (`\\n` lines) and the line reader (CRLF, other breaks) give the same
    fields; a line without a colon is refused by both, naming that line."""
    for name in ("hccn_tool_-optical_-g__910A_QSFP_4lane__mindcluster-fixture.txt",
                 "hccn_tool_-optical_-g__elided__mindcluster-doc.txt"):
        text = body(name)
        variants = [text, "\n\n" + text.replace(" : ", ":") + "\n  \n", text.replace("\n", "\r\n")]
        want = hccn.parse_optical(variants[0])
        for v in variants[1:]:
            got = hccn.parse_optical(v)
            assert got == want and got.fields == want.fields
        for v in (text + "garbage line\n", (text + "garbage line\n").replace("\n", "\r\n")):
            with pytest.raises(ParseError) as exc:
                hccn.parse_optical(v)
            assert "garbage line" in exc.value.text


def test_stat_fec_tls():
    assert hccn.parse_stat(body("hccn_tool_-stat_-g__elided__mindcluster-doc.txt"))["nic_tx_all_pkg_num"] == 122404
    assert hccn.parse_stat(body("hccn_tool_-stat_-g__short__mindcluster-fixture.txt")) == {
        "roce_rx_err_pkt_num": 0, "roce_tx_err_pkt_num": 0}
    assert hccn.parse_fec(body("hccn_tool_-fec_-g__no_FEC__mindcluster-fixture.txt")) == "no FEC mode"
    assert hccn.parse_fec(body("hccn_tool_-fec_-g__rs_FEC__mindcluster-doc.txt")) == "rs FEC mode"
    assert hccn.parse_tls_switch(body("hccn_tool_-tls_-g_grep_switch__mindcluster-doc.txt")) == 0


@pytest.mark.parametrize("line", [
    "Get invalid device id.", "The device is not exist!", "The command is not supported on this product.",
    "permission denied: pls check this cmd run permission.",
    "Get ipconf failed, because no ip was preset there!",
])
def test_error_lines(line):
    assert hccn.error_line(f"{line}\n")[0] == line
    assert hccn.error_line("link status: UP\n") is None


def test_hccn_conf():
    conf = hccn.parse_hccn_conf("address_0=10.10.0.10\nnetmask_0=255.255.255.0\nnetdetect_0=10.10.0.1\n# x\n")
    assert conf == {0: {"address": "10.10.0.10", "netmask": "255.255.255.0", "netdetect": "10.10.0.1"}}


def test_loop_framing_round_trip():
    node = Node("n", "h")
    cmd = ascend.hccn_loop(node, [0, 1], "-link -g")
    assert cmd.count("'/usr/local/Ascend/driver/tools/hccn_tool'") == 0  # a plain path needs no quotes
    assert "for i in 0 1;" in cmd and "2>&1" in cmd
    out = CommandOutput(stdout="@@dev 0\nlink status: UP\n@@rc 0\n@@dev 1\nGet invalid device id.\n@@rc 255\n")
    per = ascend.split_loop(out)
    assert per[0].stdout == "link status: UP\n" and per[1].rc == 255
    with pytest.raises(ParseError):
        ascend.split_loop(CommandOutput(stdout="@@dev 0\nlink status: UP\n"))
    assert ascend.hccn_missing(CommandOutput(stdout="@@missing /opt/x/hccn_tool\n", rc=127)) == "/opt/x/hccn_tool"


def test_loop_split_by_slicing_reads_what_the_line_reader_reads():
    """split_loop slices each device's text out of the stream; every shape of loop output (noise
    before the first device, a marker-like line in a body, an rc line with no device, empty
    bodies, a missing final newline, CRLF) gives what the line-by-line reader gives."""
    import random

    rng = random.Random(7)
    pieces = ["link status: UP", "@@missing x", "@@rcx 1", "", "  @@dev 9", "Get invalid device id.",
              "@@rc 0", "@@dev 2", "optical info:", "present : present"]
    for _ in range(3000):
        lines = []
        for dev in range(rng.randint(0, 4)):
            lines += [rng.choice(pieces) for _ in range(rng.randint(0, 2))]
            lines.append(f"@@dev {dev}")
            lines += [rng.choice(pieces) for _ in range(rng.randint(0, 3))]
            if rng.random() < 0.9:
                lines.append(f"@@rc {rng.choice([0, 1, 255])}")
        text = "\n".join(lines) + ("\n" if rng.random() < 0.8 else "")
        if rng.random() < 0.1:
            text = text.replace("\n", "\r\n")
        try:
            want = {d: (o.stdout, o.rc) for d, o in ascend._split_lines(text).items()}
        except ParseError:
            with pytest.raises(ParseError):
                ascend.split_loop(CommandOutput(stdout=text))
            continue
        got = {d: (o.stdout, o.rc) for d, o in ascend.split_loop(CommandOutput(stdout=text)).items()}
        assert got == want, text


def test_alike_loops_are_split_once_and_handed_out_as_copies():
    """A loop whose answer every healthy node prints alike is split once for all nodes
    (split_alike): the same devices, texts and exit codes as split_loop, a dict of its own each
    time (a caller changing it changes nothing for the next node), and a loop cut short still
    refused every time."""
    from preflight.ascend import hccn_common, probes

    text = "@@dev 0\nlink status: UP\n@@rc 0\n@@dev 1\nlink status: DOWN\n@@rc 0\n"
    first = probes.split_alike(CommandOutput(stdout=text))
    assert {d: (o.stdout, o.rc) for d, o in first.items()} == \
        {d: (o.stdout, o.rc) for d, o in probes.split_loop(CommandOutput(stdout=text)).items()}
    first.pop(0)
    again = probes.split_alike(CommandOutput(stdout=text[:1] + text[1:]))  # another node's equal text
    assert sorted(again) == [0, 1]
    for _ in range(2):
        with pytest.raises(ParseError):
            probes.split_alike(CommandOutput(stdout="@@dev 0\nlink status: UP\n"))
    # read_hccn hands each query its own devices' outputs, an alike one as any other
    outputs = {"link": CommandOutput(stdout=text), "ip": CommandOutput(stdout=text)}
    for _ in range(2):
        run = hccn_common.read_hccn(dict(outputs), {"link": "-link -g", "ip": "-ip -g"})
        assert {n: {d: o.stdout for d, o in per.items()} for n, per in run.outputs.items()} == \
            {n: {0: "link status: UP\n", 1: "link status: DOWN\n"} for n in ("link", "ip")}
    # every query the table names is one a check asks, and none of them prints a node's own values
    asked = {a for m in discover().values() for a in getattr(m.module, "QUERIES", {}).values()}
    assert hccn_common.ALIKE_ON_HEALTHY_NODES <= asked
    assert not hccn_common.ALIKE_ON_HEALTHY_NODES & {"-ip -g", "-optical -g", "-link_stat -g", "-stat -g"}


def test_loop_quotes_inventory_paths():
    node = Node("n", "h", ascend_home="/opt/my ascend")
    assert "'/opt/my ascend/driver/tools/hccn_tool'" in ascend.hccn_loop(node, [0], "-ip -g")
    assert ascend.hccn(node, 3, "-ip -g") == "'/opt/my ascend/driver/tools/hccn_tool' -i 3 -ip -g"


def test_error_line_is_the_plain_reading():
    """error_line (eight anchors looked for first) answers what its plain reference, line_with(text,
    ERRORS), answers: on every real hccn_tool and npu-smi error sample (none holds one of these
    strings, which are the driver source's: no false alarm), and on soups of the needles, their
    prefixes, the anchors and other text."""
    import random

    needles = [n for n, _ in hccn.ERRORS]
    real = [fixture_body(name) for name in fixture_names("hccn_tool") + fixture_names("npu-smi_error")]
    for text in real:
        assert hccn.error_line(text) == line_with(text, hccn.ERRORS), text[:200]
        assert (hccn.error_line(text) is not None) == any(n in text for n in needles), text[:200]
    parts = [n for n in needles] + [n[:k] for n in needles for k in (1, 3, len(n) - 1)] + ["\n", " ", "x"] \
        + list(hccn.ERROR_ANCHORS)
    rng = random.Random(9)
    for _ in range(5000):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 5)))
        assert hccn.error_line(text) == line_with(text, hccn.ERRORS), repr(text)
        assert (hccn.error_line(text) is not None) == any(n in text for n in needles), repr(text)


def test_every_error_needle_holds_an_anchor():
    """error_line looks for ERROR_ANCHORS first and reads a text without any as error-free: a
    needle added to ERRORS without one would never be found."""
    for needle, _ in hccn.ERRORS:
        assert any(a in needle for a in hccn.ERROR_ANCHORS), needle
        assert hccn.error_line(f"Tx Power0 : 1.0 mW\n  {needle}  \nx : y\n") == (needle, dict(hccn.ERRORS)[needle])


def test_optical_fields_are_the_key_value_lines():
    """_optical_fields reads what a regex over `key:value` lines reads (the first colon splits,
    both sides stripped, the `optical info:` heading and blank lines left out), and refuses the
    first non-blank line without a colon: on the real -optical samples, and soups of real and odd
    lines."""
    import random
    import re

    def oracle(text: str) -> dict[str, str]:
        for line in text.split("\n"):
            if ":" not in line and line.strip():
                raise ParseError("bare", line)
        return {k.strip(): v.strip() for k, v in re.findall(r"^([^:\n]*):([^\n]*)$", text, re.M)
                if (k + v).strip() != "optical info"}

    parts = ["optical info:", "present              : present", "Tx Power0            : 1.4035 mW",
             "high power enable reg: enabled", "", "   ", "a:b:c", " : x", "optical: info", "no colon here",
             "Tx Los Flag          : 0x0", "optical info :  "]
    real = [body(name) for name in fixture_names("hccn_tool_-optical")]
    rng = random.Random(11)
    soups = ["\n".join(rng.choice(parts) for _ in range(rng.randint(0, 8))) + rng.choice(["", "\n"])
             for _ in range(3000)]
    assert read_alike(hccn._optical_fields, oracle, real + soups) > 0


def read_alike(reader, oracle, texts: list[str]) -> int:
    """Every text read by `reader` as `oracle` reads it: the same value, or a ParseError quoting the
    same text; the number of texts both read."""
    read = 0
    for text in texts:
        try:
            want = oracle(text)
        except ParseError as exc:
            with pytest.raises(ParseError) as got:
                reader(text)
            assert got.value.text == exc.text, repr(text)
            continue
        assert reader(text) == want, repr(text)
        read += 1
    return read


def test_optical_judges_what_its_fields_hold():
    """parse_optical reads only the judged lines, yet gives what reading every line into
    _optical_fields and judging those gives (a later line with the same key wins, padded keys are
    one key, a lane's index read from its key): on the real -optical samples and soups of judged,
    unjudged, padded, repeated and bare lines."""
    import random

    def oracle(text: str) -> tuple:
        fields = hccn._optical_fields(text)
        if "present" not in fields:
            raise ParseError("no present", text)
        lanes: dict = {"Tx Power": {}, "Rx Power": {}}
        thresholds, flags = {}, {}
        for key, value in fields.items():
            lane = re.match(r"^(Tx Power|Rx Power)(\d*)$", key)
            if key.endswith("Thres"):
                thresholds[key] = hccn.optical_value(value)
            elif key.endswith("Flag"):
                flags[key] = value
            elif lane:
                lanes[lane[1]][int(lane[2] or 0)] = hccn.optical_value(value)
        return (fields["present"], list(lanes["Tx Power"].items()), list(lanes["Rx Power"].items()),
                list(thresholds.items()), hccn.optical_value(fields.get("temperature", "NA")), list(flags.items()))

    def got(text: str) -> tuple:
        o = hccn.parse_optical(text)
        return (o.present, list(o.tx_power.items()), list(o.rx_power.items()), list(o.thresholds.items()),
                o.temperature, list(o.flags.items()))

    parts = ["optical info:", "present              : present", "present:not present", " present ",
             "Tx Power             : 1.4035 mW", "Tx Power2: 0.3 mW", " Rx Power1 :NA", "Rx Power1   : 0.0054 mW",
             "TxPower High Thres   : 3.5481 mW", "RxPower Low Thres : not supported", "Rx Los Flag          : 0xff",
             "Tx LoL Flag:0x0 ", "temperature          : 47 C", "temperature:NA", "Temp High Thres : 80 C",
             "Tx Power1x : 1 mW", "vendor name          : Hisense", "a:b:c", "", "   ", "no colon here"]
    real = [body(name) for name in fixture_names("hccn_tool_-optical")]
    rng = random.Random(19)
    soups = ["\n".join(rng.choice(parts) for _ in range(rng.randint(0, 10))) + rng.choice(["", "\n"])
             for _ in range(3000)]
    assert read_alike(got, oracle, real + soups) > 500


LOOP_MARK = re.compile(r"^(?:@@dev|@@rc) [^\n]*", re.M)  # a marker line, as probes.hccn_loop prints it


def test_loops_of_real_samples_split_back_into_them():
    """Every real hccn_tool sample framed as the node's loop frames it (`echo @@dev $i`, the
    tool's output, `echo @@rc $?`), eight of them a loop: split_loop gives each back byte for
    byte with its exit code, and the marker lines found are the regex's."""
    from preflight.ascend import probes

    samples = [fixture_body(name) for name in fixture_names("hccn_tool_")]
    assert len(samples) >= 17
    for first in range(0, len(samples), 8):
        group = samples[first:first + 8]
        text = "".join(f"@@dev {i}\n{t if t.endswith(chr(10)) else t + chr(10)}@@rc {i % 2}\n"
                       for i, t in enumerate(group))
        assert probes._loop_marks(text) == [(m.start(), m.group(0)) for m in LOOP_MARK.finditer(text)]
        got = probes.split_loop(CommandOutput(stdout=text))
        assert [(got[i].stdout.rstrip("\n"), got[i].rc) for i in range(len(group))] == \
            [(t.rstrip("\n"), i % 2) for i, t in enumerate(group)]


def test_loop_marks_are_the_regex_matches():
    """split_loop finds its marker lines by str.find: exactly where LOOP_MARK (the `^` regex under
    re.M) matches, on marker soups (marks mid-line, without their space, `@@@`, last line open)."""
    import random

    from preflight.ascend import probes

    parts = ["@@dev 1", "@@rc 0", "@@dev", "@@rc", "x@@dev 2", "@@@dev 3", "\n", " ", "a", "@@", "@@dev 12 z",
             "@@rc 1\n", "@", "\r"]
    rng = random.Random(18)
    for _ in range(5000):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 12)))
        expected = [(m.start(), m.group(0)) for m in LOOP_MARK.finditer(text)]
        assert probes._loop_marks(text) == expected, repr(text)


def test_odd_breaks_check_is_the_regex():
    import random

    from preflight.ascend.hccn import ODD_BREAKS, has_odd_breaks

    chars = ["a", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\u2028", "\u2029", "é", " "]
    rng = random.Random(18)
    for _ in range(5000):
        text = "".join(rng.choice(chars) for _ in range(rng.randint(0, 6)))
        assert has_odd_breaks(text) == (ODD_BREAKS.search(text) is not None), repr(text)
