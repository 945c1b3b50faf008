"""`preflight plan`: the best few parallel layouts for N nodes x D devices and a model, and how to
launch the first on both stacks (MindSpeed-LLM on Ascend, Megatron-LM on NVIDIA).

The arithmetic is preflight.plan.layout (the one plan.parallel applies to the inventory's `job:`),
the order preflight.plan.recommend.
"""
from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from ..plan.layout import Model
from ..plan.recommend import launch, lr_for, rank

SHOWN = 3


def _positive(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None and value < 1:
        raise click.BadParameter("must be >= 1")
    return value


@click.command("plan")
@click.option("--nodes", type=int, required=True, callback=_positive, help="Number of nodes.")
@click.option("--devices-per-node", type=int, required=True, callback=_positive, help="Ranks (NPUs) per node.")
@click.option("--layers", type=int, callback=_positive, help="num_layers: pp must divide it.")
@click.option("--heads", type=int, callback=_positive, help="num_attention_heads: tp must divide it.")
@click.option("--experts", type=int, callback=_positive, help="num_experts (MoE): ep must divide it.")
@click.option("--seq-length", type=int, callback=_positive, help="Sequence length, passed to the launch arguments.")
@click.option("--micro-batch", type=int, callback=_positive, help="Micro-batch size per rank.")
@click.option("--global-batch", type=int, callback=_positive, help="Global batch: a multiple of micro_batch x dp.")
@click.option("--max-cp", type=int, default=1, show_default=True, callback=_positive, help="Largest context-parallel size listed.")
@click.option("--base-lr", type=float, help="Learning rate tuned at --base-dp; shows lr for each layout's dp.")
@click.option("--base-dp", type=int, default=1, show_default=True, callback=_positive, help="Data-parallel size the base lr was tuned at.")
@click.option("--templates-only", is_flag=True, help="List only layouts that are docs/MIGRATION.md templates.")
@click.option("--all", "show_all", is_flag=True, help="List every valid layout, best first (default: the best 3).")
@click.option("--pick", type=int, default=1, show_default=True, callback=_positive, help="Launch arguments for this row.")
@click.option("--format", "fmt", type=click.Choice(("table", "json")), default="table", show_default=True)
def plan(nodes: int, devices_per_node: int, layers: int | None, heads: int | None, experts: int | None,
         seq_length: int | None, micro_batch: int | None, global_batch: int | None, max_cp: int,
         base_lr: float | None, base_dp: int, templates_only: bool, show_all: bool, pick: int, fmt: str) -> None:
    """Recommend (tp, pp, cp, ep, dp) layouts, best first; launch arguments for the one picked."""
    world = nodes * devices_per_node
    model = Model(num_layers=layers, heads=heads, experts=experts, micro_batch=micro_batch, global_batch=global_batch)
    rows = [r for r in rank(nodes, devices_per_node, model, max_cp=max_cp) if r.template or not templates_only]
    shown = rows if show_all or templates_only else rows[:SHOWN]
    chosen = rows[pick - 1] if 0 < pick <= len(rows) else None
    if pick > 1 and chosen is None:
        raise click.BadParameter(f"there are {len(rows)} valid layouts", param_hint="--pick")
    lr = lr_for(base_lr, chosen.dp, base_dp) if chosen else None
    stacks = launch(chosen.layout, model, nodes, devices_per_node, seq_length, lr) if chosen else {}
    if fmt == "json":
        click.echo(json.dumps({"schema": "preflight.plan/1", "nodes": nodes, "devices_per_node": devices_per_node,
                               "world": world, "valid": len(rows),
                               "layouts": [{"rank": i + 1, "tp": r.layout.tp, "pp": r.layout.pp, "cp": r.layout.cp,
                                            "ep": r.layout.ep, "dp": r.dp, "template": r.template,
                                            "why": r.reasons(nodes, devices_per_node),
                                            "lr": lr_for(base_lr, r.dp, base_dp)} for i, r in enumerate(shown)],
                               "chosen": pick if chosen else None, "launch": stacks}))
        return
    table = Table(title=f"{nodes} nodes x {devices_per_node} devices = world {world}")
    for col in ("#", "tp", "pp", "cp", "ep", "dp"):
        table.add_column(col, justify="right")
    table.add_column("template")
    table.add_column("why")
    if base_lr is not None:
        table.add_column(f"lr (base {base_lr:g} at dp {base_dp})", justify="right")
    for i, r in enumerate(shown):
        cells = [str(rows.index(r) + 1)] + [str(v) for v in (r.layout.tp, r.layout.pp, r.layout.cp, r.layout.ep, r.dp)]
        cells += ["migration template" if r.template else "", ", ".join(x for x in r.reasons(nodes, devices_per_node)
                                                                          if x != "migration template")]
        if base_lr is not None:
            cells.append(f"{lr_for(base_lr, r.dp, base_dp):.3g}")
        table.add_row(*cells)
    console = Console(highlight=False, width=max(120, Console().width))  # a row per layout, never wrapped
    console.print(table, markup=False)
    more = "" if len(shown) == len(rows) else f"; the best {len(shown)} shown (--all lists every one)"
    click.echo(f"{len(rows)} valid layouts (tp within a node; cp <= {max_cp}){more}.")
    if base_lr is not None:
        click.echo("lr_new = base_lr * sqrt(dp_new / dp_base) (docs/MIGRATION.md)")
    if chosen is None:
        return
    click.echo(f"\nLaunch #{pick}: {chosen.layout.label(world)}")
    for s in stacks.values():
        click.echo(f"  {s['stack']}:\n    " + " ".join(s["args"]))
        for note in s["notes"]:
            click.echo(f"    note: {note}")
        click.echo("    env: " + ", ".join(f"{k}={v}" for k, v in s["env"].items()))
    click.echo("  per-node values: `preflight env INVENTORY` derives them from the nodes.")
