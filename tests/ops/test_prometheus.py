"""The .prom file parses with prometheus-client's parser and says what SPEC and the collector need."""
from __future__ import annotations

import os
import stat

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from preflight.cli import main
from preflight.model import Result, Status
from preflight.report import prometheus
from tests.ops import make_report, optical_metrics


def _parse(text: str) -> dict[str, dict[tuple, float]]:
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(text):
        assert fam.type == "gauge"
        for s in fam.samples:
            assert s.timestamp is None  # the collector stamps; we never do
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def _report():
    summary = Result("net.ping_mesh", None, Status.FAIL, "1 node(s) flagged", remediation="see the per-node results")
    blamed = Result("net.ping_mesh", "node02", Status.FAIL, "unreachable from 2 peers", {"metrics": [
        {"name": "ping_loss", "value": 100, "unit": "%", "labels": {"peer": "node01"}},
        {"name": "ping_rtt", "value": 0.25, "unit": "ms", "labels": {"peer": "node03"}}]}, "check the NIC")
    disk = Result("storage.disk", "node01", Status.WARN, 'free "space" low', {"metrics": [
        {"name": "free_space", "value": 1024, "unit": "bytes", "labels": {"path": '/ckpt "a"\\b\nc', "role": "ckpt"}},
        {"name": "hbm_used", "value": 2, "unit": "MB", "labels": {"node": "weird"}}]}, "free space")
    return make_report(fail={"node02": "hccn.link"}, unreachable={"node03"}, extra=[summary, blamed, disk],
                       metrics={"node01": optical_metrics({(0, 0): 0.5, (0, 1): 0.25})})


def test_parses_with_the_reference_parser_and_has_spec_numbers():
    m = _parse(prometheus.render(_report()))
    st = m["preflight_check_status"]
    assert st[(("check", "hccn.link"), ("node", "node02"))] == 2
    assert st[(("check", "hccn.link"), ("node", "node01"))] == 0      # explicit 0s
    assert st[(("check", "ssh.connect"), ("node", "node03"))] == 3     # error
    assert st[(("check", "hccn.link"), ("node", "node03"))] == -1      # skip
    assert st[(("check", "net.ping_mesh"), ("node", "_cluster"))] == 2
    assert st[(("check", "storage.disk"), ("node", "node01"))] == 1
    reach = m["preflight_node_reachable"]
    assert reach == {(("node", "node01"),): 1, (("node", "node02"),): 1, (("node", "node03"),): 0}
    assert m["preflight_last_run_timestamp_seconds"][()] == 1796094007  # 2026-12-01T03:00:07Z
    assert m["preflight_run_exit_code"][()] == 1


def test_metrics_in_base_units_with_their_labels():
    m = _parse(prometheus.render(_report()))
    rx = m["preflight_optical_rx_power_watts"]
    assert rx[(("check", "hccn.optical"), ("device", "0"), ("lane", "1"), ("node", "node01"))] == pytest.approx(0.00025)
    assert m["preflight_ping_loss_ratio"][(("check", "net.ping_mesh"), ("node", "node02"), ("peer", "node01"))] == 1.0
    assert m["preflight_ping_rtt_seconds"][(("check", "net.ping_mesh"), ("node", "node02"),
                                            ("peer", "node03"))] == pytest.approx(0.00025)
    free = m["preflight_free_space_bytes"]
    assert list(free) == [(("check", "storage.disk"), ("node", "node01"), ("path", '/ckpt "a"\\b\nc'), ("role", "ckpt"))]
    # a metric label that collides with ours is renamed, never overwrites node/check
    assert m["preflight_hbm_used_bytes"] == {(("check", "storage.disk"), ("metric_node", "weird"),
                                              ("node", "node01")): 2 * 2 ** 20}


def test_write_is_atomic_in_the_target_directory_and_readable_by_the_collector(tmp_path):
    target = tmp_path / "textfile" / "preflight.prom"
    target.parent.mkdir()
    target.write_text("old\n")
    prometheus.write(_report(), target)
    assert os.listdir(target.parent) == ["preflight.prom"]  # no temp file left behind
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644
    _parse(target.read_text())
    with pytest.raises(OSError):
        prometheus.write(_report(), tmp_path / "missing" / "p.prom")


def test_the_collector_never_reads_a_half_written_file(tmp_path):
    """node_exporter reads the .prom file at any moment: the write is a rename onto a new inode, so a
    collector that opened the old file reads it whole, and a hard link to it keeps the old text."""
    target = tmp_path / "preflight.prom"
    prometheus.write(make_report(), target)
    old = target.read_text()
    keep = tmp_path / "previous.prom"
    os.link(target, keep)
    before = os.stat(target).st_ino
    with open(target) as collector:
        prometheus.write(_report(), target)
        assert collector.read() == old
    assert os.stat(target).st_ino != before and target.read_text() != old
    assert keep.read_text() == old
    _parse(target.read_text())


def test_busy_gauge_only_in_sweeps():
    busy = Result("npu.idle", "node01", Status.SKIP, "busy", {"busy": True, "processes": []})
    m = _parse(prometheus.render(make_report(extra=[busy])))
    assert m["preflight_node_busy"][(("node", "node01"),)] == 1
    assert m["preflight_node_busy"][(("node", "node02"),)] == 0
    assert "preflight_node_busy" not in _parse(prometheus.render(make_report()))


def test_format_prometheus_needs_output(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - {name: n1, host: 127.0.0.1}\n")
    r = CliRunner().invoke(main, ["run", str(inv), "--format", "prometheus"])
    assert r.exit_code == 2 and "--format prometheus needs --output" in r.output


def _written(tmp_path, metrics: list[dict], node: str = "n1", check: str = "c") -> list[str]:
    """The sample lines of the .prom file prometheus.write makes of one result carrying `metrics`."""
    target = tmp_path / "preflight.prom"
    prometheus.write(make_report(extra=[Result(check, node, Status.PASS, "ok", {"metrics": metrics})]), target)
    text = target.read_text()
    _parse(text)
    return [line for line in text.splitlines() if not line.startswith("#")]


def _metric(name: str, value: float = 1, unit: str = "", **labels) -> dict:
    return {"name": name, "value": value, "unit": unit, "labels": labels}


def test_names_answer_each_name_for_itself(tmp_path):
    """A metric's name and unit, and its label names: each gets its own spelling in the file,
    whatever was written in between; a label named like ours is renamed, never overwrites it."""
    lines = _written(tmp_path, [_metric("optical_rx_power", 2, "mW"), _metric("optical_rx_power", 30, "C"),
                                _metric("a-b", 5), _metric("optical_rx_power", 4, "mW", lane="0"),
                                _metric("hbm", 7, node="x", lane=1)])
    assert 'preflight_optical_rx_power_watts{node="n1",check="c"} 0.002' in lines
    assert 'preflight_optical_rx_power_celsius{node="n1",check="c"} 30' in lines
    assert 'preflight_a_b{node="n1",check="c"} 5' in lines
    assert 'preflight_optical_rx_power_watts{node="n1",check="c",lane="0"} 0.004' in lines
    assert 'preflight_hbm{node="n1",check="c",lane="1",metric_node="x"} 7' in lines
    escaped = _written(tmp_path, [_metric("path", 1, where='a"b\\c\nd'), _metric("plain", 1, where="plain")])
    assert 'preflight_path{node="n1",check="c",where="a\\"b\\\\c\\nd"} 1' in escaped
    assert 'preflight_plain{node="n1",check="c",where="plain"} 1' in escaped


def test_metric_label_text_kept_only_for_text_labels(tmp_path):
    """A metric's own labels in the file: the same label set spelled the same every time, in name
    order whatever the order given, another set its own text; values that are equal but print
    differently (1, True, 1.0) are each spelled as they print, whatever was written before."""
    lines = _written(tmp_path, [_metric("m1", 1, lane="1", device="0"), _metric("m2", 2, device="0", lane="1"),
                                _metric("m3", 3, lane="1", device="0"), _metric("m4", 4, device="0", lane="2"),
                                _metric("v1", 1, lane=1), _metric("v2", 1, lane=True), _metric("v3", 1, lane=1.0),
                                _metric("v4", 1, lane="1"), _metric("q", 1, node='a"b')])
    lead = 'node="n1",check="c"'
    for name, value in (("m1", 1), ("m2", 2), ("m3", 3)):
        assert f'preflight_{name}{{{lead},device="0",lane="1"}} {value}' in lines
    assert f'preflight_m4{{{lead},device="0",lane="2"}} 4' in lines
    assert [line for line in lines if line.startswith("preflight_v")] == \
        [f'preflight_v1{{{lead},lane="1"}} 1', f'preflight_v2{{{lead},lane="True"}} 1',
         f'preflight_v3{{{lead},lane="1.0"}} 1', f'preflight_v4{{{lead},lane="1"}} 1']
    assert f'preflight_q{{{lead},metric_node="a\\"b"}} 1' in lines
