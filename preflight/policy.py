"""A check's policy: what the core needs to know about a check beyond its hooks, as ONE frozen
object the check module declares (`POLICY = Policy(gate=True, privilege="root")`).

Why one object and not loose module constants: a misspelt keyword (`Policy(disruptve=True)`) is a
TypeError when the module is imported, and a value outside its set is refused here, so a typo can
never silently leave a default in force. Every field has today's default; a check names only the
ones it changes. The registry copies the object onto the check's CheckInfo; the core reads it
there (`info.gate`, `info.plan_rounds`), never from the module.
"""
from __future__ import annotations

from dataclasses import dataclass, fields


class ContractError(TypeError):
    """A check module breaks checkapi's contract (a bug in that module, found at import or discovery)."""


# The values each enumerated field may take (the first is the default).
CHOICES: dict[str, tuple[object, ...]] = {
    "cost": ("light", "network", "heavy"),
    "on_busy": ("run", "skip", "report"),
    "privilege": ("user", "root"),
    "where": ("host", "job"),
    "backend": (None, "ascend", "nvidia"),
}


@dataclass(frozen=True, kw_only=True)
class Policy:
    """The fields, their defaults and what each means (docs/writing-a-check.md, the contract page)."""

    gate: bool = False  # in `preflight gate`'s fast default set (light node checks only)
    cost: str = "light"  # light: reads the node's own state; network: traffic between nodes; heavy: loads devices, reads data sets
    disruptive: bool = False  # disturbs a running job: `run --sweep` leaves busy nodes out of it
    on_busy: str = "run"  # a node check on a busy node in --sweep: run | skip (with busy_reason) | report (defines busy(facts))
    busy_reason: str = ""  # with on_busy="skip": why, as the skip says it
    trend_metric: tuple[str, bool] | None = None  # `preflight trend --check ID`'s default: (metric, rising is bad)
    baseline: bool = False  # with `run --history`: trend_metric 3 sigma the bad way from its own stored series warns (ops/baseline.py)
    privilege: str = "user"  # what its probes need on the node: user | root (a Probe's root= overrides it for one probe)
    privilege_group: str | None = None  # with privilege="root": a member of this group needs no root
    where: str = "host"  # where its probes look on a node with a container: host | job (a Probe's job= overrides)
    backend: str | None = None  # node checks: the accelerator backend it applies to (ascend | nvidia; None: all)
    node_params: tuple[str, ...] = ()  # cluster checks: the parameters a node's own `checks:` may set
    plan_rounds: int = 1  # cluster checks with plan(): how many rounds plan() may be asked for probes

    def __post_init__(self) -> None:
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ContractError(f"Policy({name}={getattr(self, name)!r}): expected one of {allowed!r}")
        for name in ("gate", "disruptive", "baseline"):
            if not isinstance(getattr(self, name), bool):
                raise ContractError(f"Policy({name}=...) takes True or False, got {getattr(self, name)!r}")
        metric = self.trend_metric
        if metric is not None:
            metric = tuple(metric)
            if len(metric) != 2 or not isinstance(metric[0], str) or not isinstance(metric[1], bool):
                raise ContractError("Policy(trend_metric=...) is (metric name, rising is bad)")
            object.__setattr__(self, "trend_metric", metric)
        if self.baseline and metric is None:
            raise ContractError("Policy(baseline=True) judges the trend_metric: name one")
        params = tuple(self.node_params)
        if not all(isinstance(p, str) for p in params):
            raise ContractError(f"Policy(node_params=...) names parameters (strings), got {self.node_params!r}")
        object.__setattr__(self, "node_params", params)
        if self.privilege_group is not None and (self.privilege != "root" or not isinstance(self.privilege_group, str)):
            raise ContractError("Policy(privilege_group=...) names a group (a string) and needs privilege='root'")
        if self.on_busy == "skip" and not self.busy_reason:
            raise ContractError("Policy(on_busy='skip') needs a busy_reason")
        if type(self.plan_rounds) is not int or self.plan_rounds < 1:
            raise ContractError(f"Policy(plan_rounds=...) is a whole number >= 1, got {self.plan_rounds!r}")


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Policy))
