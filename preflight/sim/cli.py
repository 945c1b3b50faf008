"""`preflight sim up|down|status|inject|reset`: the simulated cluster from the command line.

Registered by the core CLI with `main.add_command(sim)`; also runs standalone:
`python -m preflight.sim.cli up spec.yaml`.
"""
from __future__ import annotations

import json
import os
import sys
from importlib import resources

import click
import yaml

from . import netns
from .cluster import Cluster
from .procs import SimError
from .record import default_dir
from .spec import SimSpecError

DIR_HELP = "cluster state directory (default $PREFLIGHT_SIM_DIR or /tmp/preflight-sim)"


@click.group(name="sim", help="Simulated Ascend cluster: real sshd nodes in network namespaces (or on loopback).")
def sim() -> None:
    pass


@sim.command("up", help="Bring up the cluster described by SPEC (a YAML file, or the name of a built-in "
                        "spec: demo) and write its inventory; prints the inventory's path.")
@click.argument("spec")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None, help=DIR_HELP)
@click.option("--mode", type=click.Choice(["netns", "loopback", "auto"]), default="auto", show_default=True)
@click.option("--slurm", is_flag=True, help="also start real Slurm: slurmctld here, one slurmd per node (netns mode)")
def up_cmd(spec: str, directory: str | None, mode: str, slurm: bool) -> None:
    source: str | dict = spec
    if not os.path.exists(spec):
        builtin = resources.files("preflight.sim").joinpath("templates", f"{spec}.yaml")
        if "/" in spec or not builtin.is_file():
            click.echo(f"error: {spec}: no such spec file (built-in specs: demo)", err=True)
            sys.exit(2)
        source = yaml.safe_load(builtin.read_text(encoding="utf-8"))
    try:
        c = Cluster.up(source, dir=directory, mode=mode, slurm=slurm or None)
    except SimSpecError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except SimError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(f"{len(c.nodes)} nodes up ({c.mode} mode) in {c.dir}", err=True)
    if c.has_slurm:
        click.echo(f"slurm up: export SLURM_CONF={c.slurm_env()['SLURM_CONF']}", err=True)
    click.echo(str(c.inventory_path))


@sim.command("down", help="Tear the cluster down: processes, namespaces, bridges, mounts, files. Safe twice.")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None, help=DIR_HELP)
@click.option("--purge", is_flag=True, help="also delete the client key and the directory")
@click.option("--stale", is_flag=True, help="instead: remove every simulated cluster's namespaces that nothing "
              "runs in, and their bridges (what a killed run leaves behind); running clusters stay (not while one is "
              "being brought up)")
def down_cmd(directory: str | None, purge: bool, stale: bool) -> None:
    if stale:
        if not netns.available()[0]:
            click.echo("no namespaces here: nothing stale", err=True)
            return
        gone = netns.destroy_stale()
        click.echo(f"removed {len(gone)} stale namespace(s) and link(s)" if gone else "nothing stale", err=True)
        return
    try:
        found = Cluster.down_dir(directory, purge=purge)
    except SimError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo("down" if found else f"nothing to tear down in {directory or default_dir()}", err=True)


@sim.command("status", help="Show the nodes of the running cluster and whether their sshd answers.")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None, help=DIR_HELP)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def status_cmd(directory: str | None, as_json: bool) -> None:
    try:
        st = Cluster.attach(directory).status()
    except SimError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(3)
    if as_json:
        click.echo(json.dumps(st, indent=1))
        return
    click.echo(f"cluster {st['cluster']} ({st['mode']} mode) in {st['dir']}; inventory {st['inventory']}")
    for n in st["nodes"]:
        where = f"{n['host']}:{n['port']}"
        ok = "answering" if n["answering"] else "not answering"
        click.echo(f"  {n['name']:<12} {where:<22} sshd {n['sshd']:<7} {ok}")


@sim.command("inject", help="Apply FAULT to NODE of the running cluster; PARAMS are key=value (YAML values), "
                            "e.g. `inject node02 npu_health device=3 status=Alarm codes=[A4025021]`.")
@click.argument("node")
@click.argument("fault")
@click.argument("params", nargs=-1)
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None, help=DIR_HELP)
def inject_cmd(node: str, fault: str, params: tuple[str, ...], directory: str | None) -> None:
    kw = {}
    for item in params:
        key, sep, value = item.partition("=")
        if not sep or not key:
            click.echo(f"error: parameter {item!r} is not key=value", err=True)
            sys.exit(2)
        kw[key] = yaml.safe_load(value)
    try:
        Cluster.attach(directory).inject(node, fault, **kw)
    except SimError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


@sim.command("reset", help="Return NODE (or every node) to its healthy baseline.")
@click.argument("node", required=False)
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None, help=DIR_HELP)
def reset_cmd(node: str | None, directory: str | None) -> None:
    try:
        Cluster.attach(directory).reset(node)
    except SimError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    sim()
