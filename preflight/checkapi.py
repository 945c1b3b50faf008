"""What a check module may use, and the contract it must follow.

A check is one module in `checks/` (packaged as `preflight.checks`); the file name is its id with
the first dot as an underscore (`npu_health.py` is `npu.health`). Its docstring is the user
documentation `preflight explain` prints. The runner discovers it; there is no list to edit.

Node scope (runs per node)::

    ID = "hccn.link"; SCOPE = "node"
    DEFAULTS = {...}                       # parameters; the inventory's `checks:` overrides them
    REQUIRES = ("npu.health",)             # optional: skip on a node where one of these did not pass
    def probes(node, params) -> {name: cmd | Probe}                    # round 1
    def followup(outputs, node, params) -> {name: cmd | Probe}         # optional round 2, sees round 1
    def parse(outputs) -> Facts            # pure; raise ParseError quoting the line it could not read
    def evaluate(facts, params, node) -> [Finding]                     # pure judgement

Cluster scope (runs once, over every reachable node)::

    ID = "net.ping_mesh"; SCOPE = "cluster"
    USES = ("env.comm",)                   # node checks whose facts it reads (their probes run too)
    def probes / followup / parse          # optional: per-node facts of its own, as above
    def plan(ctx) -> {node: {name: cmd | Probe}}                       # optional: targeted probes
    def evaluate(ctx) -> [Finding]         # summary Finding has node=None; blamed nodes named

Policy (module attributes; the core reads them through the registry, never a list of ids)::

    GATE = True                 # in `preflight gate`'s fast default set         (default False)
    DISRUPTIVE = True           # disturbs a running job (traffic, device load, full hashing):
                                #   `run --sweep` leaves busy nodes out of it     (default False)
    ON_BUSY = "skip"            # a node check on a busy node in `--sweep`: "run" as usual,
                                #   "skip" with BUSY_REASON, or "report": the check that decides
                                #   busy (defines `busy(facts) -> bool`) says busy instead of failing
    BUSY_REASON = "its ports are in use by the job"   # with ON_BUSY = "skip"
    TREND_METRIC = ("ping_rtt", True)   # `preflight trend --check ID` default: metric, rising is bad
    PRIVILEGE = "root"          # what its probes need on the node: "user" (default) or "root"
    COST = "network"            # "light" (default: reads the node's own state), "network"
                                #   (traffic between nodes), "heavy" (loads devices, reads data sets)
    ACTIONS = (("link DOWN", "replace_hardware", "source"), ("", "fix_config", "source"))
                                # what to do with a fail/warn: (regex on the summary, action, where
                                #   the grading comes from); "" is the fallback (preflight/actions.py)
    NODE_PARAMS = ("targets",)  # cluster checks: parameters a node's own `checks:` may set; any
                                #   other per-node parameter of a cluster check is refused at load

A vendor tool that does not give its answer (docs/writing-a-check.md §4, the one rule): missing,
or failing with its own error text, on a node that should have it, is a `fail` built by
`tool_failure()` naming the tool, the path looked at and its first error line; `error` only when
preflight could not tell (timeout, lost connection, output it cannot read: raise ParseError or use
`require_ok`); `skip` never stands for a tool failure (another check owning it: REQUIRES).

Probe commands are shell text run by `sh -c` on the node under a remote `timeout`; every value that
came from the inventory or a node goes in through `q()` (shlex.quote). Identical commands from
several checks run once. Outputs arrive as `CommandOutput` (rc is data, never an exception).
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping

from .model import CommandOutput, Metric, Status

# The policy attributes, their defaults and the values each may take (None: any value of that type).
POLICY: dict[str, tuple[Any, tuple[Any, ...] | None]] = {
    "GATE": (False, (True, False)),
    "DISRUPTIVE": (False, (True, False)),
    "ON_BUSY": ("run", ("run", "skip", "report")),
    "BUSY_REASON": ("", None),
    "TREND_METRIC": (None, None),
    "PRIVILEGE": ("user", ("user", "root")),
    "COST": ("light", ("light", "network", "heavy")),
    "NODE_PARAMS": ((), None),
    "ACTIONS": ((), None),
}

__all__ = [
    "ClusterContext", "CommandOutput", "Finding", "Metric", "ParseError", "Probe", "Status",
    "q", "require_ok", "first_line", "passed", "skipped", "tool_failure",
]


def q(value: Any) -> str:
    """Quote one inventory- or node-derived value for the remote shell."""
    return shlex.quote(str(value))


@dataclass(frozen=True)
class Probe:
    """A command with its own timeout (seconds); a plain string uses the node's probe_timeout."""

    cmd: str
    timeout: float | None = None


class ParseError(ValueError):
    """Output a parser could not read. The runner turns it into an `error` result quoting `text`."""

    def __init__(self, message: str, text: str = ""):
        super().__init__(message)
        self.message = message
        self.text = text[:2000]


@dataclass(frozen=True)
class Finding:
    """One judgement. The runner adds check id, duration, and the node for node-scope checks."""

    status: Status
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    remediation: str | None = None
    node: str | None = None  # cluster checks: the blamed node; None for the summary row
    action: str | None = None  # set only when computed from data; else the module's ACTIONS table decides

    def __post_init__(self) -> None:
        if self.status in (Status.FAIL, Status.WARN) and not self.remediation:
            raise ValueError(f"a {self.status.value} finding needs a remediation: {self.summary}")
        if self.action is not None:
            from .actions import RANK
            if self.action not in RANK:
                raise ValueError(f"unknown action {self.action!r} for: {self.summary}")


def tool_failure(summary: str, remediation: str, **details: Any) -> Finding:
    """The one shape of a vendor tool that is missing or failed with its own error: a fail of the
    node (no device of it could be judged), naming the tool and what it said."""
    return Finding(Status.FAIL, summary, {"failed_devices": [], **details}, remediation=remediation)


def passed(summary: str, **details: Any) -> Finding:
    return Finding(Status.PASS, summary, details)


def skipped(summary: str, **details: Any) -> Finding:
    return Finding(Status.SKIP, summary, details)


@dataclass
class ClusterContext:
    """Everything a cluster check sees. `facts[node][check_id]` holds parsed node facts (its own
    under its own id, plus those of its USES); nodes whose parse failed are absent there.
    `planned[node][name]` holds the outputs of the probes `plan()` asked for."""

    nodes: Mapping[str, Any]  # name -> inventory Node, reachable nodes only
    facts: Mapping[str, Mapping[str, Any]]
    params: Mapping[str, Any]
    planned: Mapping[str, Mapping[str, CommandOutput]] = field(default_factory=dict)
    job: Mapping[str, Any] | None = None
    unreachable: tuple[str, ...] = ()


def first_line(text: str, limit: int = 300) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


def require_ok(out: CommandOutput | None, what: str) -> CommandOutput:
    """Raise ParseError with the quoted output when a probe did not run cleanly."""
    if out is None:
        raise ParseError(f"{what}: no output (probe not run)")
    if out.timed_out:
        raise ParseError(f"{what}: timed out after {out.duration_s:.0f}s", out.stderr or out.stdout)
    if out.error:
        raise ParseError(f"{what}: {out.error}", out.stderr or out.stdout)
    return out
