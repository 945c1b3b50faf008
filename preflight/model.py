"""The result model: plain frozen data that every other module passes around.

Checks produce `Result`s, the transport produces `CommandOutput`s, the runner assembles a `Report`.
Reporters only read a finished `Report`; the exit code is decided here, once.
"""
from __future__ import annotations

import enum
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Mapping


class Status(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"

    @property
    def number(self) -> int:
        """The numeric form SPEC fixes for formats that need numbers (Prometheus, Nagios)."""
        return STATUS_NUMBERS[self]


STATUS_NUMBERS = {Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2, Status.ERROR: 3, Status.SKIP: -1}
# Worst-first order used for summaries of cluster checks and for sorting the checklist.
SEVERITY = {Status.FAIL: 4, Status.ERROR: 3, Status.WARN: 2, Status.PASS: 1, Status.SKIP: 0}


def worst(statuses) -> Status:
    """The most severe status of an iterable (PASS when empty)."""
    statuses = list(statuses)
    return max(statuses, key=SEVERITY.__getitem__) if statuses else Status.PASS


class NodeStateKind(str, enum.Enum):
    OK = "ok"
    UNREACHABLE = "unreachable"
    AUTH_FAILED = "auth_failed"
    HOSTKEY_REJECTED = "hostkey_rejected"
    TIMEOUT = "timeout"


def direct_init(cls: type) -> type:
    """Give a frozen dataclass an `__init__` that writes its fields straight into the instance.

    Why: the `__init__` a frozen dataclass gets calls `object.__setattr__` once a field (1.7 us for
    CommandOutput, 0.7 us this way, 3.2 against 1.3 for npu-smi's 14-field Chip), and a run makes
    about 320 such objects a node: outputs, probes, per-device facts, findings, results, metrics.
    The parameters are the fields, in order, with their defaults; a default_factory is called when
    its argument is left out, and `__post_init__` runs last, as the dataclass's own `__init__`
    does. A class with a field left out of `__init__` (`init=False`), an InitVar (a `__post_init__`
    that takes arguments) or `__slots__` is refused (TypeError): it needs the dataclass's own."""
    post = getattr(cls, "__post_init__", None)
    if (post is not None and post.__code__.co_argcount != 1) or "__slots__" in cls.__dict__:
        raise TypeError(f"direct_init: {cls.__name__} needs the dataclass's own __init__")
    names, params, defaults, factories = [], [], {}, {}
    for f in fields(cls):
        if not f.init:
            raise TypeError(f"direct_init: {cls.__name__}.{f.name} needs the dataclass's own __init__")
        names.append(f.name)
        if f.default_factory is not MISSING:
            factories[f.name] = f.default_factory
            params.append(f"{f.name}=__factory")
        elif f.default is not MISSING:
            defaults[f.name] = f.default
            params.append(f"{f.name}=__defaults[{f.name!r}]")
        else:
            params.append(f.name)
    source = f"def __init__(self, {', '.join(params)}):\n"
    source += "".join(f"    if {n} is __factory:\n        {n} = __factories[{n!r}]()\n" for n in factories)
    source += f"    self.__dict__.update({', '.join(f'{n}={n}' for n in names)})\n"
    source += "    self.__post_init__()\n" if post is not None else ""
    namespace: dict[str, Any] = {"__defaults": defaults, "__factories": factories, "__factory": _FACTORY}
    exec(source, namespace)  # noqa: S102 - generated from the field names, as dataclasses does
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init
    return cls


class _Factory:
    """The default of a parameter whose field has a default_factory (shown as dataclasses does)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


@direct_init
@dataclass(frozen=True)
class CommandOutput:
    """What one probe returned. A non-zero rc is data, never an exception.

    `rc` is None when no exit status came back (connection lost, killed by the run deadline);
    `timed_out` means the remote `timeout` ended it (rc 124/137); `error` says why in words;
    `denied` is set (and equals `error`) when the probe was not run because it needs root that the
    login user lacks, or `sudo -n` refused.
    `node_started_at` is the node's own clock when the probe started and `received_at` the control
    host's clock when its output arrived (epoch seconds): their gap, less `duration_s`, bounds the
    clock offset between the two.
    """

    stdout: str = ""
    stderr: str = ""
    rc: int | None = 0
    duration_s: float = 0.0
    timed_out: bool = False
    truncated: bool = False
    error: str | None = None
    denied: str | None = None  # not run for want of privilege (needs root, sudo -n refused): why
    node_started_at: float | None = None
    received_at: float | None = None

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out and self.error is None


@direct_init
@dataclass(frozen=True)
class Metric:
    name: str
    value: float
    unit: str = ""
    labels: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "unit": self.unit, "labels": dict(self.labels)}


@direct_init
@dataclass(frozen=True)
class Result:
    check: str
    node: str | None
    status: Status
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    remediation: str | None = None
    duration_s: float = 0.0
    action: str | None = None  # fail/warn: what to do (preflight.actions.ACTIONS); else None
    flapping: bool = False  # passes now, failed in one of the last N stored runs (history)
    ack: dict[str, str] | None = None  # a matching `preflight ack`: until, reason, by, at

    def to_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.flapping:
            extra["flapping"] = True
        if self.ack:
            extra["ack"] = dict(self.ack)
        return {
            "check": self.check,
            "node": self.node,
            "status": self.status.value,
            "summary": self.summary,
            "details": self.details,
            "remediation": self.remediation,
            "action": self.action,
            "duration_s": round(self.duration_s, 3),
            **extra,
        }


@dataclass(frozen=True)
class NodeState:
    name: str
    host: str
    state: NodeStateKind = NodeStateKind.OK
    error: str | None = None
    backend: str | None = None  # ascend | nvidia once known (declared, or decided on connect for auto)

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "host": self.host, "state": self.state.value, "error": self.error}
        if self.backend:
            out["backend"] = self.backend
        return out


@dataclass(frozen=True)
class Report:
    started_at: str
    finished_at: str
    inventory_path: str
    inventory_sha256: str
    nodes: tuple[NodeState, ...]
    results: tuple[Result, ...]
    cluster: str | None = None
    tool_version: str = ""
    strict: bool = False
    interrupted: bool = False
    run_id: str = ""  # unique per run (runner: uuid4), so every stored or shipped report is findable
    internal_errors: tuple[str, ...] = ()  # bugs met in node workers: exit 4, each also a result
    config: Mapping[str, Any] | None = None  # what produced it (preflight.provenance.effective)

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in (Status.PASS, Status.WARN, Status.FAIL, Status.SKIP, Status.ERROR)}
        for r in self.results:
            counts[r.status.value] += 1
        return counts

    @property
    def exit_code(self) -> int:
        """SPEC exit codes for a run that happened: 4, then 130, then 1, then 3, else 0."""
        if self.internal_errors:
            return 4
        if self.interrupted:
            return 130
        # an acknowledged failure (`preflight ack`) counts only under --strict
        statuses = {r.status for r in self.results if self.strict or not r.ack}
        if Status.FAIL in statuses or (self.strict and Status.WARN in statuses):
            return 1
        if Status.ERROR in statuses or any(n.state is not NodeStateKind.OK for n in self.nodes):
            return 3
        return 0

    @property
    def verdict(self) -> str:
        return {0: "ready", 1: "not_ready"}.get(self.exit_code, "incomplete")
