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


def _make_dirs(path: str) -> None:
    """The out-dir and its missing parents, 0700 whatever the umask (safefile.make_dirs)."""
    from ..safefile import make_dirs

    try:
        make_dirs(path)
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
        _make_dirs(out_dir)
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


@click.command("fix")
@options.inventory_argument()
@click.option("--limit", help="Only these inventory nodes.")
@click.option("--out-dir", type=click.Path(file_okay=False), default="preflight-fix", show_default=True,
              help="Where NODE.fix.sh, NODE.rollback.sh and NODE.plan.json are written (0600, the directory "
                   "0700 and yours alone).")
@click.option("--apply", "apply_", is_flag=True, help="Run the fix scripts on their nodes, then run the checks again.")
@click.option("--rollback", "rollback", is_flag=True,
              help="Undo, on each node, the steps its recorded plan in --out-dir says applied.")
@options.connection()
def fix_cmd(inventory, limit, out_dir, apply_, rollback, forks, ssh_config):
    """Per-node scripts that fix what env.comm and net.ports found (dry run unless --apply)."""
    from ..job import fixplan

    if apply_ and rollback:
        fail_usage("--apply and --rollback exclude each other")
    inv = _load(inventory, limit, ssh_config)
    try:
        fixplan.ensure_dir(out_dir)
        if rollback:
            _rollback(inv, out_dir, forks)
        _plan_and_apply(inv, inventory, ssh_config, out_dir, apply_, forks)
    except fixplan.Untrusted as exc:
        say(str(exc), EXIT_REFUSED)


def _rollback(inv, out_dir: str, forks: int) -> None:
    """Each node's recorded plan: its rollback script (digest as recorded) for the steps that applied."""
    from ..checkapi import Probe, sh
    from ..checkhelpers import seq
    from ..job import fix as fixmod, fixplan
    from ..job.remote import run_each
    from ..transport import factory

    todo, records, found = {}, {}, 0
    for node in inv.nodes:
        rec = fixplan.load(out_dir, node.name)
        if rec is None:
            continue
        found += 1
        if not rec.applied:
            click.echo(f"{node.name}: nothing to roll back (no step of its fix applied)")
            continue
        script = fixplan.verified_rollback(out_dir, rec)
        records[node.name] = rec
        todo[node.name] = (node, Probe(seq([sh("set -- {steps}", steps=[str(i) for i in rec.applied]), script], "\n"),
                                       None, rec.needs_root(rec.applied)))
    if not found:
        fail_usage(f"no NODE.plan.json in {out_dir}: nothing preflight planned there")
    outs = run_each(factory.make_transport(), todo, forks=forks)
    for name, out in outs.items():
        rec = records[name]
        undone = set(fixmod.applied_steps(out.stdout))
        rec.applied = [i for i in rec.applied if i not in undone]
        fixplan.save(out_dir, rec)
    sys.exit(EXIT_REFUSED if _report_runs(outs, "rollback") else 0)


def _shared_files(inventory: str, ssh_config: str | None) -> dict[str, tuple[str, ...]]:
    """env file path -> every node of the whole inventory (not only --limit's) that lists it."""
    full = _load(inventory, None, ssh_config)
    out: dict[str, list[str]] = {}
    for n in full.nodes:
        for p in n.env_files:
            out.setdefault(p, []).append(n.name)
    return {p: tuple(names) for p, names in out.items()}


def _plan_and_apply(inv, inventory: str, ssh_config: str | None, out_dir: str, apply_: bool, forks: int) -> None:
    from ..checkapi import Probe, cmd
    from ..job import ENV_COMM, NET_PORTS, check
    env_comm, net_ports = check(ENV_COMM), check(NET_PORTS)
    from ..job import fix as fixmod, fixplan
    from ..job.remote import run_each
    from ..runner import Options, Runner
    from ..transport import factory

    by_name = {n.name: n for n in inv.nodes}
    checks = [env_comm.ID, net_ports.ID]
    runner = Runner(inv, factory.make_transport(), Options(checks=checks, forks=forks))
    report = runner.run()
    flagged = sorted({r.node for r in report.results if r.check in checks and r.node
                      and r.status.value in ("fail", "warn")})
    facts = {n: runner.runs[n].facts for n in flagged}
    readable = [n for n in flagged if isinstance(facts[n].get(env_comm.ID), env_comm.Facts)]
    reads = run_each(factory.make_transport(), {n: (by_name[n], cmd(fixmod.read_command(list(by_name[n].env_files))))
                                                for n in readable}, forks=forks)
    shared = _shared_files(inventory, ssh_config)
    plans = []
    for n in readable:
        ports = facts[n].get(net_ports.ID)
        files = fixmod.parse_read(reads[n].stdout, list(by_name[n].env_files)) if reads[n].ok else {}
        others = {p: tuple(x for x in names if x != n) for p, names in shared.items()}
        plans.append(fixmod.plan_node(by_name[n], facts[n][env_comm.ID],
                                      ports if isinstance(ports, net_ports.Facts) else None, files,
                                      {p: o for p, o in others.items() if o}))
    for n in flagged:
        if n not in readable:
            click.echo(f"{n}: env.comm could not read the node: nothing planned", err=True)
    plans = [p for p in plans if p.steps or p.manual]
    if not plans:
        click.echo("preflight: nothing to fix (env.comm and net.ports found nothing they can correct)")
        return
    records = {}
    for p in plans:
        for m in p.manual:
            click.echo(f"{p.node}: manual: {m}")
        if not p.steps:
            continue
        earlier = fixplan.load(out_dir, p.node)
        if earlier is not None and earlier.applied:
            say(f"{p.node}: {out_dir} holds its earlier fix, applied and not rolled back: roll it back first "
                "(--rollback) or give another --out-dir", EXIT_REFUSED)
        try:
            records[p.node] = fixplan.write(out_dir, p)
        except OSError as exc:
            say(f"cannot write the plan of {p.node} in {out_dir}: {exc.strerror}", EXIT_INTERNAL)
        for s in p.steps:
            click.echo(f"{p.node}: {s.what}")
    with_steps = [p for p in plans if p.steps]
    click.echo(f"preflight: {len(with_steps)} node(s) with fixes; scripts in {out_dir} "
               f"({'applying' if apply_ else 'dry run: --apply runs them, --rollback undoes them'})")
    if not apply_:
        return
    outs = run_each(factory.make_transport(), {p.node: (by_name[p.node], Probe(p.script(), None, p.needs_root))
                                               for p in with_steps}, forks=forks)
    for name, out in outs.items():  # what completed is recorded before anything else: a rollback undoes only that
        records[name].applied = fixmod.applied_steps(out.stdout)
        fixplan.save(out_dir, records[name])
    if _report_runs(outs, "fix"):
        sys.exit(EXIT_REFUSED)
    again = Runner(inv, factory.make_transport(), Options(checks=checks, forks=forks)).run()
    still = [r for r in again.results if r.check in checks and r.node in {p.node for p in with_steps}
             and r.status.value == "fail"]
    for r in still:
        click.echo(f"preflight: re-check: {r.node}: {r.check} {r.status.value}: {r.summary}", err=True)
    click.echo(f"preflight: re-check {'failed' if still else 'passed'} on the fixed nodes")
    sys.exit(EXIT_REFUSED if still else 0)


def _report_runs(outs, what: str) -> list[str]:
    failed = []
    for node, out in sorted(outs.items()):
        if out.ok:
            click.echo(f"{node}: {what} applied")
        else:
            failed.append(node)
            why = (out.stderr.strip().splitlines() or [out.error or f"rc {out.rc}"])[-1]
            click.echo(f"preflight: {node}: {what} failed: {why}", err=True)
    return failed
