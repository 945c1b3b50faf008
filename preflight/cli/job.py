"""`preflight env` and `preflight fix`: the job's launch environment, derived from the nodes, and the
fixes for the launch-environment and port checks that failed (docs/SPEC.md §1.7, §1.8)."""
from __future__ import annotations

import json
import os
import sys

import click

from . import options
from .common import EXIT_INTERNAL, fail_usage, safe_echo, say

EXIT_REFUSED, EXIT_INCOMPLETE = 1, 3


def _load(inventory: str, limit: str | None, ssh_config: str | None):
    from ..inventory import InventoryError, load

    try:
        return load(inventory, limit=limit, ssh_config=ssh_config)
    except InventoryError as exc:
        fail_usage(str(exc))


def _write(path: str, text: str) -> None:
    from ..atomic import write_atomic

    try:
        write_atomic(path, text, mode=0o600)
    except OSError as exc:
        say(f"cannot write {path}: {exc.strerror}", EXIT_INTERNAL)


@click.command("env")
@options.inventory_argument()
@click.option("--limit", help="Only these inventory nodes (they are the job: NNODES counts them).")
@click.option("--format", "fmt", type=click.Choice(("env", "json", "torchrun")), default="env", show_default=True,
              help="env: one sourceable file per node in --out-dir; json: every node's environment; "
                   "torchrun: the launch line per node.")
@click.option("--out-dir", type=click.Path(file_okay=False), help="Directory for the per-node NODE.env files (--format env).")
@click.option("--output", type=click.Path(dir_okay=False), help="Write the json or torchrun output here (atomically, 0600).")
@options.connection()
@options.deadline()
def env_cmd(inventory, limit, fmt, out_dir, output, forks, ssh_config, deadline):
    """Write the launch environment of every node, derived from what the run finds there.

    Refuses (exit 1, one line per node and check) when a check the values come from fails:
    env.comm, net.ports or npu.health; exit 3 when a node could not be reached.
    """
    from ..job import envgen
    from ..runner import Options
    from ..transport import factory

    if fmt == "env" and not out_dir:
        fail_usage("--format env writes one file per node: give --out-dir DIR")
    inv = _load(inventory, limit, ssh_config)
    opts = Options(checks=list(envgen.DERIVED_FROM), forks=forks, deadline=deadline)
    try:
        envs = envgen.run_and_derive(inv, factory.make_transport(), opts)
    except envgen.EnvRefused as exc:
        for r in exc.refusals:
            click.echo(f"preflight: env refused: {r.line()}", err=True)
        sys.exit(EXIT_INCOMPLETE if exc.incomplete else EXIT_REFUSED)
    except ValueError as exc:
        fail_usage(f"{inv.path}: {exc}")
    entry = (inv.job or {}).get("entry")
    if fmt == "env":
        os.makedirs(out_dir, mode=0o700, exist_ok=True)
        for e in envs:
            _write(os.path.join(out_dir, f"{e.node}.env"), e.sourceable(inv.cluster))
        click.echo(f"preflight: wrote {len(envs)} env files to {out_dir} (master {envs[0].node}, "
                   f"MASTER_ADDR={envs[0].env['MASTER_ADDR']}, MASTER_PORT={envs[0].env['MASTER_PORT']})", err=True)
        return
    if fmt == "json":
        text = json.dumps({"schema": "preflight.env/1", "cluster": inv.cluster, "nodes": [e.to_dict() for e in envs]},
                          sort_keys=False) + "\n"
    else:
        text = "".join(f"{e.node}: {e.torchrun(entry)}\n" for e in envs)
    if output:
        _write(output, text)
    else:
        safe_echo(text)
