"""Parallel-layout arithmetic for Megatron-style training (tp, pp, cp, ep, etp, dp).

Pure functions shared by the `plan.parallel` check (is the inventory's `job:` layout valid?) and
the `preflight plan` command (which layouts are valid for N nodes x D devices?). The rules are
Megatron-core's (docs/MIGRATION.md §1.5 "Megatron's general rules" plus its expert layout):

    world % (tp*pp*cp) == 0,  dp = world / (tp*pp*cp)
    num_layers % pp == 0,  heads % tp == 0
    num_experts % ep == 0,  (tp*cp*dp) % (ep*etp) == 0
    global_batch % (micro_batch*dp) == 0
    tp <= devices per node (tensor parallelism across nodes is legal but slow: warn)

Every rule result carries the arithmetic it did, so a message can show it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator

FAIL = "fail"
WARN = "warn"


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    def dp(self, world: int) -> int:
        return world // self.model_parallel

    def label(self, world: int) -> str:
        return f"tp={self.tp} pp={self.pp} cp={self.cp} ep={self.ep} dp={self.dp(world)}"


@dataclass(frozen=True)
class Model:
    """Sizes of the model and batch that constrain the layout; None means "not given, not checked"."""

    num_layers: int | None = None
    heads: int | None = None
    experts: int | None = None
    micro_batch: int | None = None
    global_batch: int | None = None


@dataclass(frozen=True)
class RuleResult:
    rule: str
    ok: bool
    arithmetic: str  # e.g. "world 16 % (tp 4 * pp 2 * cp 1) = 0"
    severity: str = FAIL  # what a violation means

    @property
    def status(self) -> str:
        return "pass" if self.ok else self.severity


def _divides(rule: str, num: int, den: int, num_text: str, den_text: str, severity: str = FAIL) -> RuleResult:
    rest = num % den if den else num
    return RuleResult(rule, den > 0 and rest == 0, f"{num_text} % {den_text} = {rest}", severity)


def check_layout(world: int, per_node: int, layout: Layout, model: Model = Model()) -> list[RuleResult]:
    """Every rule that applies, in the order a reader would check them by hand."""
    t, p, c, e, et = layout.tp, layout.pp, layout.cp, layout.ep, layout.etp
    if min(t, p, c, e, et) < 1 or world < 1:
        return [RuleResult("positive_sizes", False, f"tp={t} pp={p} cp={c} ep={e} etp={et} world={world}: all must be >= 1")]
    mp = layout.model_parallel
    results = [_divides("world_divisible", world, mp, f"world {world}", f"(tp {t} * pp {p} * cp {c} = {mp})")]
    if not results[0].ok:
        return results  # dp is undefined; every later rule would repeat the same error
    dp = world // mp
    results.append(RuleResult("tp_within_node", t <= per_node,
                              f"tp {t} {'<=' if t <= per_node else '>'} devices per node {per_node}", WARN))
    if model.num_layers is not None:
        results.append(_divides("layers_divisible", model.num_layers, p, f"num_layers {model.num_layers}", f"pp {p}"))
    if model.heads is not None:
        results.append(_divides("heads_divisible", model.heads, t, f"num_attention_heads {model.heads}", f"tp {t}"))
    if model.experts is not None:
        results.append(_divides("experts_divisible", model.experts, e, f"num_experts {model.experts}", f"ep {e}"))
    elif e > 1:
        results.append(RuleResult("experts_divisible", False, f"ep {e} > 1 but num_experts not given", WARN))
    if e > 1 or et > 1 or model.experts is not None:
        results.append(_divides("expert_layout", t * c * dp, e * et,
                                f"(tp {t} * cp {c} * dp {dp} = {t * c * dp})", f"(ep {e} * etp {et} = {e * et})"))
    if model.micro_batch is not None and model.global_batch is not None:
        step = model.micro_batch * dp
        results.append(_divides("batch_divisible", model.global_batch, step, f"global_batch {model.global_batch}",
                                f"(micro_batch {model.micro_batch} * dp {dp} = {step})"))
    return results


def is_valid(results: list[RuleResult], allow_warn: bool = True) -> bool:
    return all(r.ok or (allow_warn and r.severity == WARN) for r in results)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def enumerate_layouts(nodes: int, per_node: int, model: Model = Model(), max_cp: int = 1) -> Iterator[Layout]:
    """Layouts that pass every rule without a warning (tp inside a node). cp up to max_cp;
    ep over the divisors of num_experts (ep=1 when no experts are given)."""
    world = nodes * per_node
    for tp in divisors(per_node):
        for pp in divisors(world // tp):
            for cp in (c for c in divisors(world // (tp * pp)) if c <= max_cp):
                eps = divisors(model.experts) if model.experts else [1]
                for ep in eps:
                    layout = Layout(tp, pp, cp, ep)
                    if is_valid(check_layout(world, per_node, layout, model), allow_warn=False):
                        yield layout


@dataclass(frozen=True)
class Template:
    """One row of docs/MIGRATION.md's multi-node templates (Ascend column)."""

    nodes: int
    cards: int
    pp: int
    tp: tuple[int, ...]
    ep: tuple[int, ...] = (1,)
    source: str = "docs/MIGRATION.md, multi-node templates (TP Ascend column)"

    def matches(self, nodes: int, world: int, layout: Layout) -> bool:
        return (nodes, world) == (self.nodes, self.cards) and layout.pp == self.pp and layout.cp == 1 \
            and layout.tp in self.tp and layout.ep in self.ep


# docs/MIGRATION.md §1.2: | nodes | cards | PP | TP NVIDIA | TP Ascend | EP |
#   | 1 | 8 | 1 | 8 | 8 | 1 |  | 2 | 16 | 2 | 8 | 8 | 1 |  | 4 | 32 | 4 | 8 | 4 or 8 | 1–8 |  | 8 | 64 | 8 | 8 | 8 | 1–8 |
MIGRATION_TEMPLATES: tuple[Template, ...] = (
    Template(1, 8, 1, (8,)),
    Template(2, 16, 2, (8,)),
    Template(4, 32, 4, (4, 8), tuple(range(1, 9))),
    Template(8, 64, 8, (8,), tuple(range(1, 9))),
)


def template_for(nodes: int, world: int, layout: Layout) -> Template | None:
    return next((t for t in MIGRATION_TEMPLATES if t.matches(nodes, world, layout)), None)


def rescaled_lr(base_lr: float, dp_new: int, dp_base: int) -> float:
    """docs/MIGRATION.md §1.3: lr_new = base_lr * sqrt(dp_new / dp_base) when the data-parallel size changes."""
    if dp_base < 1 or dp_new < 1:
        raise ValueError(f"data-parallel sizes must be >= 1 (dp_new={dp_new}, dp_base={dp_base})")
    return base_lr * math.sqrt(dp_new / dp_base)


@dataclass(frozen=True)
class Visible:
    """What ASCEND_RT_VISIBLE_DEVICES leaves visible on a node."""

    ids: tuple[int, ...]
    ignored: str = ""  # the tail the runtime stops reading at (docs/ENV.md §A.10)
    notes: tuple[str, ...] = field(default_factory=tuple)


def visible_devices(value: str | None, devices: int) -> Visible:
    """Apply docs/ENV.md §A.10: the ASCEND_RT_VISIBLE_DEVICES rules: comma-separated logical ids, ascending only;
    parsing stops at the first invalid character or id ("1, 2,3" -> only 1; "1,3,8" on an
    8-device host -> 1,3). Unset or empty: all `devices` are visible."""
    if value is None or value == "":
        return Visible(tuple(range(devices)))
    ids: list[int] = []
    items = value.split(",")
    for i, item in enumerate(items):
        if not item.isdigit() or int(item) >= devices or (ids and int(item) <= ids[-1]):
            return Visible(tuple(ids), ",".join(items[i:]))
        ids.append(int(item))
    return Visible(tuple(ids))
