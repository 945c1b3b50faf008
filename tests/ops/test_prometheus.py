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


def test_names_answer_each_name_for_itself():
    """metric_name and the label keys: each name and unit gets its own spelling back, whatever was
    asked in between."""
    from preflight.report import prometheus as prom

    assert prom.metric_name("optical_rx_power", "mW") == ("preflight_optical_rx_power_watts", 1e-3)
    assert prom.metric_name("optical_rx_power", "C") == ("preflight_optical_rx_power_celsius", 1.0)
    assert prom.metric_name("optical_rx_power", "mW") == ("preflight_optical_rx_power_watts", 1e-3)
    labels = prom._metric_labels("n1", "c", {"node": "x", "lane": 1})
    assert labels == {"node": "n1", "check": "c", "lane": "1", "metric_node": "x"}
    assert prom.metric_name("a-b", "") == ("preflight_a_b", 1.0)
    assert prom.metric_name("optical_rx_power", "mW") == ("preflight_optical_rx_power_watts", 1e-3)
    assert prom.escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd' and prom.escape_label("plain") == "plain"


def test_metric_label_text_kept_only_for_text_labels():
    """A metric's own label text: the same label set spelled the same every time, another set its own text; values that are equal but print
    differently (1, True, 1.0) are each spelled as they print, whatever was asked before."""
    from preflight.report import prometheus as prom

    spelled = prom._label_text(prom._own_labels({"lane": "1", "device": "0"}))
    assert spelled == 'device="0",lane="1"'
    for _ in range(2):
        assert prom._own_text({"device": "0", "lane": "1"}) == spelled
        assert prom._own_text({"lane": "1", "device": "0"}) == spelled
    assert prom._own_text({"device": "0", "lane": "2"}) == 'device="0",lane="2"'
    assert [prom._own_text({"lane": v}) for v in (1, True, 1.0, "1")] == \
        ['lane="1"', 'lane="True"', 'lane="1.0"', 'lane="1"']
    assert prom._own_text({"node": 'a"b'}) == 'metric_node="a\\"b"'
