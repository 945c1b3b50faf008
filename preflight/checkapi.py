"""What a check module may use, and the contract it must follow: `__all__` is the whole contract
(docs/writing-a-check.md opens with it on one page); conveniences beyond it are in
preflight.checkhelpers.

A check is one module in `checks/` (packaged as `preflight.checks`); the file name is its id with
the first dot as an underscore (`npu_health.py` is `npu.health`). Its docstring is the user
documentation `preflight explain` prints. The runner discovers it; there is no list to edit.

Node scope (runs per node)::

    ID = "hccn.link"; SCOPE = "node"
    DEFAULTS = {...}                       # parameters; the inventory's `checks:` overrides them
    REQUIRES = ("npu.health",)             # optional: skip on a node where one of these did not pass
    def probes(node, params) -> {name: Probe}                           # round 1
    def followup(outputs, node, params) -> {name: Probe}                # optional round 2, sees round 1
    def parse(outputs) -> Facts            # pure; raise ParseError quoting the line it could not read
    def evaluate(facts, params, node) -> [Finding]                     # pure judgement

Cluster scope (runs once, over every reachable node)::

    ID = "net.ping_mesh"; SCOPE = "cluster"
    USES = ("env.comm",)                   # node checks whose facts it reads (their probes run too)
    def probes / followup / parse          # optional: per-node facts of its own, as above
    def plan(ctx) -> {node: {name: Probe}}                              # optional: targeted probes
    def evaluate(ctx) -> [Finding]         # summary Finding has node=None; blamed nodes named

Policy: one frozen object, `POLICY = Policy(...)` (preflight/policy.py: the fields, their defaults
and values); the core reads it through the registry, never a list of ids. A misspelt field is a
TypeError at import, a value outside its set a ContractError::

    POLICY = Policy(gate=True, privilege="root", privilege_group="HwHiAiUser", backend="ascend")
    POLICY = Policy(where="job", disruptive=True, cost="heavy", trend_metric=("busbw", False), plan_rounds=2)

    ACTIONS = {"link_down": ("replace_hardware", "source"), "": ("fix_config", "source")}
                                # what to do with a fail/warn: {problem: (action, where the grading
                                #   comes from)}; a finding names its problems where the check finds
                                #   them, Finding(..., action=graded(ACTIONS, "link_down")); "" is the
                                #   fallback (preflight/actions.py); the wording never selects one

A vendor tool that does not give its answer (docs/writing-a-check.md §4, the one rule): missing,
or failing with its own error text, on a node that should have it, is a `fail` built by
`tool_failure()` naming the tool, the path looked at and its first error line; `error` only when
preflight could not tell (timeout, lost connection, output it cannot read: raise ParseError or use
`require_ok`); `skip` never stands for a tool failure (another check owning it: REQUIRES).

Probe commands are shell text run by `sh -c` on the node under a remote `timeout`. They are built
through ONE API, and the runner accepts nothing else (a plain string is refused)::

    cmd("cat {path}/driver/version.info", path=node.ascend_home)       # -> Probe, value quoted
    cmd("{py} -c {src}", py=node.python, src=SCRIPT, timeout=30)       # one word each
    cmd("ls -- {paths}", paths=["/a b", "-x"])                          # a list: one word per item
    part = sh("for f in {files}; do cat \"$f\"; done", files=names)    # a fragment (Shell) ...
    cmd("bash -c {script}", script=part)                                # ... quoted as ONE word
    cmd("{a:raw}; {b:raw}", a=part, b=other)                            # ... or spliced (Shell only)

Every `{field}` of the template is filled with `shlex.quote` of its value (a list: each item
quoted, space-separated). `{field:raw}` splices a `Shell` built by `sh()`/`cmd()` as shell text
and refuses anything else, so an inventory or node value can never reach the shell unquoted. A
field inside single or double quotes of the template is refused when the template is filled (the
framework's quotes would be literal there: `"${X:-{home}}"` was an injection), except inside a
`$( )` that opens its own quoting. Identical commands from several checks run once. Outputs arrive
as `CommandOutput` (rc is data, never an exception).

Privilege is decided per probe by the core, never in a check: a probe that needs root (a Probe's
`root`, else the check's Policy privilege) runs as the login user when that is root (or a member of
its privilege_group), under `sudo -n` when the node has `become: sudo`, and otherwise is not run and the
check is `error` "needs root" (docs/SPEC.md §2.9).

The place is decided per probe too: on a node with `container:`, `cmd(..., where="host")` reads a
host fact (driver and firmware versions, devices, the kernel) and `where="job"` a fact of the job's
container (toolkit, python packages, launch environment); without `where` the check's Policy
`where` decides (docs/SPEC.md §2.10).
"""
from __future__ import annotations

import functools
import shlex
import string
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .model import CommandOutput, Metric, Status, direct_init
from .policy import Policy

__all__ = [  # the one page of contract (docs/writing-a-check.md); helpers: preflight.checkhelpers
    "Policy", "Finding", "Status", "Metric", "Probe", "cmd", "sh", "CommandOutput", "ParseError", "require_ok",
    "ClusterContext", "passed", "skipped", "tool_failure", "Choice",
]


class Shell(str):
    """Shell text built by `sh()`/`cmd()`: every value in it was quoted by the framework. Any
    string operation on it gives a plain `str` again, which `{field:raw}` refuses."""

    __slots__ = ()


class TemplateError(ValueError):
    """A probe template the framework cannot fill safely (a programming error of the check)."""


_FORMATTER = string.Formatter()


def _word(value: Any) -> str:
    if type(value) is str or type(value) is int:  # most fields; Shell and other str subclasses below
        return shlex.quote(str(value))
    if isinstance(value, (list, tuple)):
        return " ".join(_word(v) for v in value)
    if value is None or isinstance(value, (dict, set, bytes)):
        raise TemplateError(f"cannot quote a {type(value).__name__} as a shell word")
    return shlex.quote(str(value))


def _quote_contexts(template: str) -> list[str]:
    """The quoting context (`top`, `sq`, `dq`, `cmd`) of each replacement field, in order: a small
    POSIX-shell lexer over the template's literal text (backslash escapes, '...', "...", $( ), ` `)."""
    contexts: list[str] = []
    stack = ["top"]
    for literal, name, _spec, _conv in _FORMATTER.parse(template):
        i = 0
        while i < len(literal):
            c, top = literal[i], stack[-1]
            if top == "sq":
                if c == "'":
                    stack.pop()
            elif c == "\\":
                i += 1
            elif top == "dq" and c == '"':
                stack.pop()
            elif c == "$" and literal[i + 1:i + 2] == "(":
                stack.append("cmd")
                i += 1
            elif c == "`":
                if top == "bq":
                    stack.pop()
                else:
                    stack.append("bq")
            elif top in ("top", "cmd", "bq"):
                if c == "'":
                    stack.append("sq")
                elif c == '"':
                    stack.append("dq")
                elif c == ")" and top == "cmd":
                    stack.pop()
            i += 1
        if name is not None:
            contexts.append(stack[-1])
    return contexts


@functools.lru_cache(maxsize=1024)
def _fields(template: str) -> tuple[tuple[str, str | None, str, str], ...]:
    """The template's (literal, field, format spec, quoting context) parts, checked once per
    template: probe templates are literals in the checks, built again for every node."""
    parts = []
    contexts = iter(_quote_contexts(template))
    for literal, name, spec, conv in _FORMATTER.parse(template):
        if name is None:
            parts.append((literal, None, "", ""))
            continue
        where = next(contexts)
        if not name or name.isdigit() or conv:
            raise TemplateError(f"template field {{{name}}}: use named fields without conversion")
        if spec and spec != "raw":
            raise TemplateError(f"template field {{{name}:{spec}}}: the only format is :raw")
        if not spec and where in ("sq", "dq"):
            raise TemplateError(f"template field {{{name}}} is inside quotes in {template[:80]!r}: "
                                "quoting would be literal there; put the field outside the quotes")
        parts.append((literal, name, spec, where))
    return tuple(parts)


def sh(template: str, /, **values: Any) -> Shell:
    """Fill a literal template's `{name}` fields with quoted values (see the module docstring)."""
    out: list[str] = []
    for literal, name, spec, _where in _fields(template):
        out.append(literal)
        if name is None:
            continue
        value = values[name] if name.isidentifier() else _FORMATTER.get_field(name, (), values)[0]
        if spec == "raw":
            if not isinstance(value, Shell) and not (isinstance(value, (list, tuple))
                                                     and all(isinstance(v, Shell) for v in value)):
                raise TemplateError(f"{{{name}:raw}} takes shell text built by sh(), got {type(value).__name__}")
            out.append(" ".join(value) if isinstance(value, (list, tuple)) else value)
            continue
        out.append(_word(value))
    return Shell("".join(out))


@direct_init
@dataclass(frozen=True)
class Probe:
    """A command with its own timeout (seconds; None: the node's probe_timeout) and privilege
    (`root=None`: as the check's Policy privilege declares). Build it with `cmd()` (or `Probe.of`), which
    quotes every value; `cmd` holds the finished shell text."""

    cmd: str
    timeout: float | None = None
    root: bool | None = None
    job: bool | None = None  # inside the job's container (None: as the check's Policy where)

    @classmethod
    def of(cls, template: str, /, *, timeout: float | None = None, **values: Any) -> "Probe":
        return cmd(template, timeout=timeout, **values)


WHERE = {None: None, "host": False, "job": True}  # cmd(where=...) -> Probe.job


def cmd(template: str | Shell, /, *, timeout: float | None = None, where: str | None = None, **values: Any) -> Probe:
    """The probe `template` with its fields quoted (`sh()`); a `Shell` is taken as it is. `where`
    places this one probe on a node with `container:` ("host": the host's facts, such as driver and
    firmware versions, devices, the kernel; "job": inside the job's container, such as the toolkit,
    python packages, the launch environment); None leaves it to the check's Policy `where`."""
    if where not in WHERE:
        raise TemplateError(f"cmd(where={where!r}): expected 'host', 'job' or None")
    if isinstance(template, Shell):
        if values:
            raise TemplateError("cmd(Shell) takes no values: the text is already filled")
        return Probe(template, timeout, job=WHERE[where])
    return Probe(sh(template, **values), timeout, job=WHERE[where])


class Choice(str):
    """An enumerated parameter's default in DEFAULTS, with the values it may take (the default
    first): `"mode": Choice("pair", "pairs", "all")`. Loading refuses any other value with
    file:line and the allowed set (a typo would otherwise quietly run the default's branch).

    Why a str: the default reads as the plain string everywhere DEFAULTS is used as parameters
    (a check's own code, its tests); the registry hands the runner plain values and the set."""

    allowed: tuple[str, ...]

    def __new__(cls, default: str, *others: str) -> "Choice":
        values = (default, *others)
        if not all(type(v) is str for v in values) or len(set(values)) != len(values):
            raise TypeError(f"Choice takes distinct strings, the default first: {values!r}")
        made = super().__new__(cls, default)
        made.allowed = values
        return made

    def __getnewargs__(self) -> tuple[str, ...]:
        return self.allowed


class ParseError(ValueError):
    """Output a parser could not read. The runner turns it into an `error` result quoting `text`."""

    def __init__(self, message: str, text: str = ""):
        super().__init__(message)
        self.message = message
        self.text = text[:2000]


@direct_init
@dataclass(frozen=True)
class Finding:
    """One judgement. The runner adds check id, duration, and the node for node-scope checks."""

    status: Status
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    remediation: str | None = None
    node: str | None = None  # cluster checks: the blamed node; None for the summary row
    action: str | None = None  # graded(ACTIONS, problem...) where the check knows the cause; None: the fallback

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


def require_ok(out: CommandOutput | None, what: str) -> CommandOutput:
    """Raise ParseError with the quoted output when a probe did not run cleanly."""
    if out is None:
        raise ParseError(f"{what}: no output (probe not run)")
    if out.timed_out:
        raise ParseError(f"{what}: timed out after {out.duration_s:.0f}s", out.stderr or out.stdout)
    if out.error:
        raise ParseError(f"{what}: {out.error}", out.stderr or out.stdout)
    return out
