"""`preflight run`: every selected check on every node of the inventory, one report."""
from __future__ import annotations

import sys

import click

from . import options
from .common import (Progress, emit, fail_usage, ids, process_origin, warn_shared_addresses, with_provenance, with_signals,
                     writable_or_exit)


@click.command("run")
@options.inventory_argument()
@options.selection()
@options.output()
@options.connection()
@options.deadline(help="Seconds for the whole run (default 3600, the config's `deadline`); unfinished nodes: timeout.")
@options.diagnostics()
@click.option("--record", type=click.Path(file_okay=False), help="Save every probe's output under DIR.")
@click.option("--replay", type=click.Path(file_okay=False, exists=True), help="Read outputs from a --record DIR.")
@click.option("--history", is_flag=False, flag_value="", default=None, metavar="[DB]",
              help="Store the run in DB (default $XDG_STATE_HOME/preflight/history.sqlite); one run at a time.")
@click.option("--sweep", is_flag=True, help="Nightly mode: busy nodes reported busy, not disturbed; implies --history.")
@click.option("--prom-output", type=click.Path(dir_okay=False), help="Also write Prometheus textfile metrics here.")
@click.option("--via", type=click.Choice(["ssh", "slurm"]), default="ssh", show_default=True,
              help="How nodes are reached: SSH, or Slurm's srun (inventory names = Slurm node names).")
@click.option("--flap-window", type=click.IntRange(0), default=5, show_default=True,
              help="With a history: a check that failed on a node in any of the last N runs shows as flapping (0: off).")
@click.option("--keep", "keep_days", type=click.FloatRange(min=0, min_open=True), metavar="DAYS",
              help="With --history: delete stored runs older than DAYS after storing this one.")
def run_cmd(inventory, checks, skip, limit, fmt, output, strict, quiet, forks, ssh_config, deadline, record, replay,
            history, sweep, prom_output, via, flap_window, keep_days):
    """Run the checks on every node of INVENTORY and report."""
    from ..inventory import InventoryError, load
    from .extras import RunExtras
    from ..registry import SelectionError
    from ..runner import DEFAULT_DEADLINE_S, Options, Runner
    from ..transport import factory

    if via == "slurm":
        from ..slurm.commands import SlurmError, tool
        if replay:
            fail_usage("--via slurm and --replay exclude each other")
        try:
            tool("srun")
        except SlurmError as exc:
            click.echo(f"preflight: {exc}", err=True)
            sys.exit(exc.code)
    try:
        inv = load(inventory, limit=limit, ssh_config=ssh_config)
        warn_shared_addresses(inv)
        runner_opts = Options(checks=ids(checks), skip=ids(skip), forks=forks, deadline=deadline, strict=strict,
                              started=process_origin())
        recorder = None
        if record:
            from ..transport.replay import Recorder
            try:
                recorder = Recorder(record)
            except OSError as exc:  # a usage error (SPEC §7: 2), found before any connection
                fail_usage(f"--record {record}: {exc.strerror or exc}")
        progress = Progress(enabled=sys.stderr.isatty() and not quiet)
        transport = factory.make_transport(replay) if via == "ssh" else slurm_transport(inv.nodes)
        runner = Runner(inv, transport, runner_opts, progress=progress, recorder=recorder,
                        mode=RunExtras.mode(sweep))
    except (InventoryError, SelectionError) as exc:
        fail_usage(str(exc))
    writable_or_exit(output=output, prom_output=prom_output)
    if history and (why := history_unusable(history)):  # SPEC §7: 2, as --record, before any connection
        fail_usage(f"--history {history}: cannot create the history database there: {why}")
    extras = RunExtras.start(history, sweep, prom_output, fmt, output)  # exits 2, 75 or 4 before any connection
    extras.keep_days = keep_days
    report = with_provenance(with_signals(runner, runner.run), "run", checks=checks, skip=skip, limit=limit,
                             forks=forks, deadline=deadline if deadline is not None else DEFAULT_DEADLINE_S,
                             strict=strict, via=via, sweep=sweep,
                             replay=replay)
    report = extras.remember(report, flap_window)
    progress.clear()
    if recorder is not None:
        try:
            recorder.write()
        except OSError as exc:  # the report still comes out
            click.echo(f"preflight: cannot write --record {record}: {exc.strerror}", err=True)
    emit(report, fmt, output, quiet)
    extras.finish(report)
    sys.exit(report.exit_code)


def history_unusable(path: str) -> str | None:
    """Why `--history PATH` could not be created or opened for writing, found before the run (its
    directory missing or not a directory, the path a directory, no write permission), or None."""
    import os
    from pathlib import Path

    p = Path(path)
    if p.is_dir():
        return "it is a directory"
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        return f"no directory {parent}"
    if os.path.lexists(p):
        return None if os.access(p, os.R_OK | os.W_OK) else "permission denied"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"permission denied in {parent}"


def slurm_transport(nodes):
    """`--via slurm`: the one srun step's transport; a Slurm that cannot be asked which nodes it can
    launch on (sinfo failing: slurmctld down, no configuration) is one line and exit 5, before any node."""
    from ..slurm.commands import SlurmError
    from ..transport import factory

    try:
        return factory.make_transport(via="slurm", nodes=nodes)
    except SlurmError as exc:
        click.echo(f"preflight: {exc}", err=True)
        sys.exit(exc.code)
