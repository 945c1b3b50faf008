"""`preflight plan`: the valid parallel layouts for N nodes x D devices, before writing a job script.

Registered by cli.py with `main.add_command(plan)`. The arithmetic lives in preflight.parallel and is
the same one the plan.parallel check applies to the inventory's `job:` section.
"""
from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from ..plan.layout import Model, enumerate_layouts, rescaled_lr, template_for


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
@click.option("--max-cp", type=int, default=1, show_default=True, callback=_positive, help="Largest context-parallel size listed.")
@click.option("--base-lr", type=float, help="Learning rate tuned at --base-dp; shows lr for each layout's dp.")
@click.option("--base-dp", type=int, default=1, show_default=True, callback=_positive, help="Data-parallel size the base lr was tuned at.")
@click.option("--templates-only", is_flag=True, help="List only layouts that are docs/MIGRATION.md templates.")
def plan(nodes: int, devices_per_node: int, layers: int | None, heads: int | None, experts: int | None,
         max_cp: int, base_lr: float | None, base_dp: int, templates_only: bool) -> None:
    """List valid (tp, pp, cp, ep, dp) layouts; mark the migration templates among them."""
    world = nodes * devices_per_node
    model = Model(num_layers=layers, heads=heads, experts=experts)
    rows = []
    for layout in enumerate_layouts(nodes, devices_per_node, model, max_cp=max_cp):
        tpl = template_for(nodes, world, layout)
        if templates_only and tpl is None:
            continue
        rows.append((layout, tpl))
    table = Table(title=f"{nodes} nodes x {devices_per_node} devices = world {world}")
    for col in ("tp", "pp", "cp", "ep", "dp"):
        table.add_column(col, justify="right")
    table.add_column("template")
    if base_lr is not None:
        table.add_column(f"lr (base {base_lr:g} at dp {base_dp})", justify="right")
    for layout, tpl in rows:
        dp = layout.dp(world)
        cells = [str(v) for v in (layout.tp, layout.pp, layout.cp, layout.ep, dp)]
        cells.append("migration template" if tpl else "")
        if base_lr is not None:
            cells.append(f"{rescaled_lr(base_lr, dp, base_dp):.3g}")
        table.add_row(*cells)
    console = Console(highlight=False)
    console.print(table, markup=False)
    console.print(f"{len(rows)} valid layouts (tp within a node; cp <= {max_cp}).", markup=False)
    if base_lr is not None:
        console.print("lr_new = base_lr * sqrt(dp_new / dp_base) (docs/MIGRATION.md)", markup=False)
