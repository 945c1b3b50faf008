"""plan.parallel — the job's parallel sizes fit the cluster and the model.

What it checks (only when the inventory has a `job:` section): the world size
nnodes x nproc_per_node matches the reachable nodes and the devices each node makes visible to the
launcher (ASCEND_RT_VISIBLE_DEVICES in the launch environment, else the node's `devices`), and the
Megatron-core rules for the job's tensor/pipeline/context/expert parallel sizes:
world % (tp*pp*cp) == 0 (dp = world/(tp*pp*cp)), num_layers % pp == 0,
num_attention_heads % tp == 0, num_experts % ep == 0, (tp*cp*dp) % (ep*etp) == 0 and
global_batch % (micro_batch*dp) == 0. Tensor parallelism across nodes (tp > nproc_per_node) warns.

Why it matters: a layout that does not divide fails only after every node has loaded the model and
initialised HCCL, with an assertion deep in Megatron; a script moved from NVIDIA keeps TP values that
Ascend does not accept (docs/MIGRATION.md). One more visible device than ranks, or one fewer, makes
ranks collide or sit idle.

How to fix: change the sizes in the job script (and the inventory's `job:`) until every rule holds;
`preflight plan --nodes N --devices-per-node D --layers L --heads H --experts E` lists the valid
layouts and the learning rate to use for a new data-parallel size. Fix ASCEND_RT_VISIBLE_DEVICES
(ascending logical ids, no spaces) on the node named.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from preflight import launchenv
from preflight.checkapi import Policy, ClusterContext, CommandOutput, Finding, Probe, Status, passed, skipped
from preflight.checkhelpers import worst
from preflight.plan.layout import Layout, Model, RuleResult, check_layout, visible_devices

ID = "plan.parallel"
SCOPE = "cluster"
# On a node with a container: inside it. ASCEND_RT_VISIBLE_DEVICES is read from the launch
# environment as the container sees it (the image's ENV and the job's -e settings count there).
POLICY = Policy(where="job")
# What to do with a fail/warn (preflight/actions.py): the layout is the job's configuration.
ACTIONS = {"": ("fix_config", "ranks per node against visible devices (docs/FAILURES.md row 26)")}
DEFAULTS: dict[str, Any] = {}

VISIBLE_VAR = "ASCEND_RT_VISIBLE_DEVICES"

# Remediation per rule: what to change when the arithmetic does not hold.
FIXES = {
    "positive_sizes": "Set every parallel size in the job: section (tp, pp, cp, ep, etp) to an integer >= 1.",
    "world_divisible": "Choose tp*pp*cp dividing nnodes*nproc_per_node; list valid layouts with `preflight plan --nodes N --devices-per-node D`.",
    "tp_within_node": "Keep tensor parallelism inside one node: set tp <= nproc_per_node and move the rest to pp or dp.",
    "layers_divisible": "Choose pp dividing num_layers (or change --num-layers); `preflight plan --layers L` lists valid pp.",
    "heads_divisible": "Choose tp dividing num_attention_heads; `preflight plan --heads H` lists valid tp.",
    "experts_divisible": "Choose ep dividing num_experts (and give num_experts in the job: section); `preflight plan --experts E` lists valid ep.",
    "expert_layout": "Choose ep*etp dividing tp*cp*dp (Megatron-core's expert layout); lower ep and move experts onto the data-parallel dimension.",
    "batch_divisible": "Set global_batch to a multiple of micro_batch*dp (or change micro_batch).",
    "job_fields": "Give nnodes, nproc_per_node, tp and pp as positive integers in the inventory's job: section.",
    "nnodes": "Set job.nnodes to the number of nodes that will run (or bring the missing nodes back).",
}
REQUIRED_JOB_KEYS = ("nnodes", "nproc_per_node", "tp", "pp")
OPTIONAL_ONE = ("cp", "ep", "etp")
MODEL_FIELDS = {"num_layers": "num_layers", "heads": "num_attention_heads", "experts": "num_experts",
                "micro_batch": "micro_batch", "global_batch": "global_batch"}


@dataclass(frozen=True)
class Facts:
    """Per node: the raw ASCEND_RT_VISIBLE_DEVICES of the launch environment (None when unset)."""

    visible_env: str | None


def probes(node, params) -> dict[str, Probe]:
    return launchenv.probe(node)  # the same command env.* checks send: it runs once


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    env = launchenv.parse(outputs.get(launchenv.PROBE_NAME))
    return Facts(env.get(VISIBLE_VAR))


def _int_field(job: Mapping[str, Any], key: str, default: int | None) -> int | None:
    value = job.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"job.{key} is {value!r}, expected an integer")
    return value


def _job(job: Mapping[str, Any]) -> tuple[int, int, Layout, Model]:
    missing = [k for k in REQUIRED_JOB_KEYS if job.get(k) is None]
    if missing:
        raise ValueError(f"job: section lacks {', '.join(missing)}")
    nnodes, per_node, tp, pp = (_int_field(job, k, None) for k in REQUIRED_JOB_KEYS)
    cp, ep, etp = (_int_field(job, k, 1) for k in OPTIONAL_ONE)
    model = Model(**{k: _int_field(job, v, None) for k, v in MODEL_FIELDS.items()})
    return nnodes, per_node, Layout(tp, pp, cp, ep, etp), model  # type: ignore[arg-type]


def _node_findings(ctx: ClusterContext, per_node: int) -> tuple[list[Finding], dict[str, int]]:
    """Blame each node whose visible device count differs from nproc_per_node. A node whose launch
    environment was not read (its job's container could not run the probe, no root) is not judged
    here: the runner gives it its own error, and guessing from `devices:` would blame it falsely."""
    findings, counts = [], {}
    for name, node in sorted(ctx.nodes.items()):
        facts = ctx.facts.get(name, {}).get(ID)
        if facts is None:
            continue
        raw = facts.visible_env
        vis = visible_devices(raw, node.devices)
        counts[name] = len(vis.ids)
        where = f"{VISIBLE_VAR}={raw!r}" if raw is not None else f"devices: {node.devices} (no {VISIBLE_VAR})"
        tail = f"; the runtime stops reading at {vis.ignored!r}" if vis.ignored else ""
        if len(vis.ids) == per_node:
            continue
        status = Status.FAIL if len(vis.ids) < per_node else Status.WARN
        findings.append(Finding(
            status, f"{name}: {len(vis.ids)} visible devices ({where}{tail}), expected nproc_per_node {per_node}",
            {"visible_devices": list(vis.ids), "expected": per_node},
            f"On {name}, set {VISIBLE_VAR} to {per_node} ascending logical ids without spaces "
            f"(e.g. {','.join(map(str, range(per_node)))}) or set job.nproc_per_node to {len(vis.ids)}.",
            node=name))
    return findings, counts


def _nnodes_rule(ctx: ClusterContext, nnodes: int) -> RuleResult:
    reach = len(ctx.nodes)
    down = f" ({', '.join(ctx.unreachable)} unreachable)" if ctx.unreachable else ""
    sev = "fail" if nnodes > reach else "warn"
    return RuleResult("nnodes", nnodes == reach, f"job.nnodes {nnodes} vs {reach} reachable nodes{down}", sev)


def evaluate(ctx: ClusterContext) -> list[Finding]:
    if not ctx.job:
        return [skipped("no job: section in the inventory; nothing to validate")]
    if not any(k in ctx.job for k in REQUIRED_JOB_KEYS + OPTIONAL_ONE + tuple(MODEL_FIELDS.values())):
        return [skipped("the job: section gives no parallel layout (nnodes, nproc_per_node, tp, pp); nothing to validate")]
    try:
        nnodes, per_node, layout, model = _job(ctx.job)
    except ValueError as exc:
        return [Finding(Status.FAIL, str(exc), {}, FIXES["job_fields"])]
    world = nnodes * per_node
    rules = [_nnodes_rule(ctx, nnodes)] + check_layout(world, per_node, layout, model)
    blamed, counts = _node_findings(ctx, per_node)
    bad = [r for r in rules if not r.ok]
    details = {
        "world": world, "dp": world // layout.model_parallel if rules[1].ok else None,
        "layout": {"tp": layout.tp, "pp": layout.pp, "cp": layout.cp, "ep": layout.ep, "etp": layout.etp},
        "rules": [{"rule": r.rule, "status": r.status, "arithmetic": r.arithmetic} for r in rules],
        "visible_devices": counts,
    }
    status = worst([Status(r.status) for r in bad] + [f.status for f in blamed])
    if status is Status.PASS:
        head = f"world {nnodes} x {per_node} = {world}, {layout.label(world)}: every rule holds"
        return [passed(head, **details)]
    parts = [f"{r.rule}: {r.arithmetic}" for r in bad] + [f.summary for f in blamed]
    fixes = [FIXES[r.rule] for r in bad] or [blamed[0].remediation]
    summary = Finding(status, f"world {nnodes} x {per_node} = {world}; " + "; ".join(parts), details, " ".join(fixes))
    return [summary] + blamed
