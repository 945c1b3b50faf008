"""Commands that run nothing on a node: list-checks, explain, inventory show."""
from __future__ import annotations

import click

from . import options
from .common import fail_usage, safe_echo


@click.command("list-checks")
@click.option("--gate", "gate_only", is_flag=True, help="Only the gate's fast set (checks whose policy says gate=True).")
def list_checks(gate_only: bool) -> None:
    """Every check: id, scope, one line of what it checks."""
    from ..registry import listing  # the modules' literals, read without importing them (~0.2 s less)
    lines = [f"{cid:<22} {scope:<8} {title}" for cid, scope, title, gate in listing() if gate or not gate_only]
    safe_echo("\n".join(lines) + "\n")


@click.command("explain")
@click.argument("check_id")
def explain(check_id: str) -> None:
    """What a check looks at, why it matters for a launch, how to fix what it finds."""
    from ..registry import discover
    info = discover().get(check_id)
    if info is None:
        fail_usage(f"no check {check_id!r} (see: preflight list-checks)")
    params = "".join(f"\n  {k}: {v!r}" + (f" (one of: {', '.join(info.choices[k])})" if k in info.choices else "")
                     for k, v in info.defaults.items())
    safe_echo(f"{info.id} ({info.scope})\n\n{info.doc}\n{info.policy_text()}"
              + (f"\nParameters (inventory `checks: {{{info.id}: ...}}`):{params}\n" if params else ""))


FORMATS = {"ansible-ini": "Ansible INI inventory", "ansible-yaml": "Ansible YAML inventory"}


@click.group("inventory")
def inventory_group() -> None:
    """Inspect an inventory."""


@inventory_group.command("show")
@options.inventory_argument()
@click.option("--limit", help="Only these nodes.")
@click.option("--ssh-config", type=click.Path(dir_okay=False))
def inventory_show(inventory, limit, ssh_config) -> None:
    """Print the expanded nodes, with the settings each one ends up with."""
    from ..inventory import NOT_USED, InventoryError, load
    try:
        inv = load(inventory, limit=limit, ssh_config=ssh_config)
    except InventoryError as exc:
        fail_usage(str(exc))
    lines = [f"# {inv.path}: {len(inv.nodes)} nodes" + (f", cluster {inv.cluster}" if inv.cluster else "")]
    if inv.fmt == "rank-table":
        lines.append("# HCCL rank table: its servers are the nodes (server_id or host_ip the address), their "
                     "devices the NPUs; SSH settings from defaults or ssh_config")
    elif inv.fmt != "preflight":
        lines.append(f"# {FORMATS[inv.fmt]}: only Ansible's connection variables, preflight_* variables and the "
                     f"Ascend deployer's npu_num are read; every other variable is left to other tools")
    for n in inv.nodes:
        lines.append(f"{n.name:<16} {n.user or '(current user)'}@{n.host}:{n.port}  devices={n.devices} "
                     f"backend={n.backend} host_key_policy={n.host_key_policy}"
                     + (f" become={n.become}" if n.become else "")
                     + (f" proxy_jump={n.proxy_jump}" if n.proxy_jump else ""))
        used = [o for o in inv.origins.get(n.name, []) if o[0] != NOT_USED]
        if used:
            lines.append("    " + ", ".join(f"{key} from {var} ({inv.path}:{line})" for key, var, line in used))
        lines += [f"    {why} ({inv.path}:{line})" for key, why, line in inv.origins.get(n.name, []) if key == NOT_USED]
    safe_echo("\n".join(lines) + "\n")
