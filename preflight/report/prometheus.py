"""Prometheus textfile-collector output (node_exporter --collector.textfile.directory).

Why written by hand: the text format is a few lines of HELP/TYPE and samples, and keeping
prometheus-client out of the runtime dependencies keeps the tool installable on bare login nodes
(the tests parse our output with prometheus-client's own parser). Rules followed: `preflight_`
prefix, base units (watts, bytes, seconds, ratio), explicit 0s, no timestamps (the collector adds
its own; `preflight_last_run_timestamp_seconds` is what staleness alerts use), bounded labels.
The file is replaced atomically in its own directory so the collector never reads half a file.
"""
from __future__ import annotations

import functools
import math
import os
import re
from datetime import datetime, timezone
from typing import Any, Iterable

from ..atomic import write_atomic
from ..model import NodeStateKind, Report, Status, worst

CLUSTER_LABEL = "_cluster"
PROM_MODE = 0o644  # node_exporter runs as its own user and must read the file; it holds no secrets

# unit in details.metrics -> (suffix, factor to the base unit)
UNITS: dict[str, tuple[str, float]] = {
    "mW": ("watts", 1e-3), "W": ("watts", 1.0), "uW": ("watts", 1e-6),
    "bytes": ("bytes", 1.0), "B": ("bytes", 1.0), "KiB": ("bytes", 1024.0), "MiB": ("bytes", 2.0 ** 20),
    "GiB": ("bytes", 2.0 ** 30), "KB": ("bytes", 1e3), "GB": ("bytes", 1e9),
    # npu-smi's "MB" columns (HBM-Usage(MB)) are MiB: 65536 MB is a 64 GiB chip
    "MB": ("bytes", 2.0 ** 20),
    "ms": ("seconds", 1e-3), "us": ("seconds", 1e-6), "s": ("seconds", 1.0),
    "%": ("ratio", 0.01), "C": ("celsius", 1.0),
    "GB/s": ("bytes_per_second", 1e9), "MB/s": ("bytes_per_second", 1e6), "B/s": ("bytes_per_second", 1.0),
    "Gbps": ("bits_per_second", 1e9),
}
_NAME_BAD = re.compile(r"[^a-zA-Z0-9_]")
RESERVED = {"check", "node"}


def _name(text: str) -> str:
    out = _NAME_BAD.sub("_", text)
    return out if out and not out[0].isdigit() else "_" + out


def escape_label(value: str) -> str:
    if "\\" not in value and "\n" not in value and '"' not in value:  # nearly every value: nothing to do
        return value
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _fmt(v: float) -> str:
    if type(v) is float and -1e15 < v < 1e15 and not v.is_integer():  # most samples: a finite fraction
        return repr(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(float(v))


# A report carries ~100 metrics a node under a handful of names, units and label keys: their
# Prometheus spellings are kept (pure functions of the text), not re-derived by regex per sample.
@functools.lru_cache(maxsize=4096)
def metric_name(name: str, unit: str) -> tuple[str, float]:
    """`optical_rx_power` in mW -> (`preflight_optical_rx_power_watts`, 0.001)."""
    suffix, factor = UNITS.get(unit, (_name(unit).strip("_").lower(), 1.0) if unit else ("", 1.0))
    base = _name(name)
    if suffix and not base.endswith("_" + suffix):
        base += "_" + suffix
    return "preflight_" + base, factor


class _Families:
    """Family name -> (help, {label text: value}); a repeated label set keeps the last value.

    Samples are kept by their label text as exported (`node="n1",check="c"`): the escaping is
    one-to-one, so equal texts are equal label sets, and the text is made once, when added."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.help: dict[str, str] = {}
        self.samples: dict[str, dict[str, float]] = {}

    def add(self, name: str, help_text: str, labels: dict[str, str], value: float) -> None:
        self.add_text(name, help_text, _label_text(labels), value)

    def add_text(self, name: str, help_text: str, labels: str, value: float) -> None:
        samples = self.samples.get(name)
        if samples is None:
            self.order.append(name)
            self.help[name] = help_text
            samples = self.samples[name] = {}
        samples[labels] = value

    def text(self) -> str:
        lines: list[str] = []
        for name in self.order:
            lines.append(f"# HELP {name} {_escape_help(self.help[name])}")
            lines.append(f"# TYPE {name} gauge")
            lines += [f"{name}{{{lab}}} {_fmt(value)}" if lab else f"{name} {_fmt(value)}"
                      for lab, value in self.samples[name].items()]
        return "\n".join(lines) + "\n"


def _label_text(labels: dict[str, str]) -> str:
    return ",".join([f'{k}="{escape_label(v)}"' for k, v in labels.items()])


def _epoch(ts: str) -> float:
    try:
        return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except (TypeError, ValueError):
        return datetime.now(timezone.utc).timestamp()


def _metric_labels(node: str, check: str, labels: dict[str, Any]) -> dict[str, str]:
    return {"node": node, "check": check, **_own_labels(labels)}


def _own_labels(labels: dict[str, Any]) -> dict[str, str]:
    """A metric's labels as exported, sorted by name; _label_key keeps them off `node` and `check`."""
    out: dict[str, str] = {}
    for k, v in sorted(labels.items()):
        out[_label_key(str(k))] = str(v)
    return out


def _own_text(labels: dict[str, Any]) -> str:
    """_own_labels' text: kept by the labels themselves when every name and value is a str (a
    report's ~100 metrics a node repeat a few label sets: device "0" lane "1"); any other value
    (1 and True are equal keys but print differently) is spelled each time."""
    items = tuple(labels.items())
    for k, v in items:
        if type(k) is not str or type(v) is not str:
            return _label_text(_own_labels(labels))
    return _own_text_of(items)


@functools.lru_cache(maxsize=4096)
def _own_text_of(items: tuple[tuple[str, str], ...]) -> str:
    return _label_text(_own_labels(dict(items)))


@functools.lru_cache(maxsize=4096)
def _label_key(k: str) -> str:
    """A metric's label name as exported: Prometheus-safe, and kept off `node`, `check` and `__*`."""
    key = _name(k)
    return "metric_" + key if key in RESERVED or key.startswith("__") else key


def families(report: Report, busy: Iterable[str] = ()) -> _Families:
    fam = _Families()
    per: dict[tuple[str, str], list[Status]] = {}
    for r in report.results:
        per.setdefault((r.check, r.node or CLUSTER_LABEL), []).append(r.status)
    for (check, node), sts in per.items():
        fam.add("preflight_check_status", "Worst status of a check on a node (pass 0, warn 1, fail 2, error 3, "
                "skip -1); node _cluster is a cluster check's summary", {"check": check, "node": node},
                worst(sts).number)
    for r in report.results:
        if r.action:
            fam.add("preflight_check_action", "1 per failing or warning check on a node, labelled with what to do "
                    "(monitor, fix_config, restart_process, reset_device, reboot_node, replace_hardware)",
                    {"check": r.check, "node": r.node or CLUSTER_LABEL, "action": r.action}, 1)
    for n in report.nodes:
        fam.add("preflight_node_reachable", "1 when the node was reached and authenticated, else 0",
                {"node": n.name}, 1 if n.state is NodeStateKind.OK else 0)
    busy = set(busy)
    if busy or any("busy" in r.details for r in report.results):
        for n in report.nodes:
            fam.add("preflight_node_busy", "1 when a sweep found a job running on the node (not checked "
                    "disruptively)", {"node": n.name}, 1 if n.name in busy else 0)
    fam.add("preflight_last_run_timestamp_seconds", "When the last preflight run finished (Unix time)", {},
            _epoch(report.finished_at))
    fam.add("preflight_run_exit_code", "Exit code of the last run (docs/SPEC.md: 0 ready, 1 not ready, 3 incomplete)",
            {}, report.exit_code)
    for r in report.results:
        metrics = r.details.get("metrics")
        if not metrics:
            continue
        # node and check lead every sample's labels: their text is made once a result
        lead = _label_text(_metric_labels(r.node or CLUSTER_LABEL, r.check, {}))
        for m in metrics:
            if not isinstance(m, dict) or not isinstance(m.get("value"), (int, float)) or not m.get("name"):
                continue
            name, factor = metric_name(str(m["name"]), str(m.get("unit") or ""))
            own = _own_text(m.get("labels") or {})
            # the family's help is its first sample's (add keeps it): the text is made once a family
            fam.add_text(name, fam.help.get(name) or f"{m['name']} from {r.check} (converted from "
                         f"{m.get('unit') or 'no unit'})", f"{lead},{own}" if own else lead, float(m["value"]) * factor)
    return fam


def busy_nodes(report: Report) -> list[str]:
    """Nodes a sweep reported busy (the busy-deciding check skipped with details.busy)."""
    return sorted({r.node for r in report.results if r.node and r.details.get("busy")})


def render(report: Report) -> str:
    return families(report, busy_nodes(report)).text()


def write(report: Report, path: str | os.PathLike) -> None:
    """Temp file in the target's directory, fsync, rename (atomic.write_atomic)."""
    write_atomic(path, render(report), mode=PROM_MODE)
