"""`preflight run`: every selected check on every node of the inventory, one report."""
from __future__ import annotations

import sys

import click

from . import options
from .common import Progress, emit, fail_usage, ids, process_origin, warn_shared_addresses, with_signals


@click.command("run")
@options.inventory_argument()
@options.selection()
@options.output()
@options.connection()
@options.deadline()
@options.diagnostics()
@click.option("--record", type=click.Path(file_okay=False), help="Save every probe's output under DIR.")
@click.option("--replay", type=click.Path(file_okay=False, exists=True), help="Read outputs from a --record DIR.")
@click.option("--history", is_flag=False, flag_value="", default=None, metavar="[DB]",
              help="Store the run in DB (default $XDG_STATE_HOME/preflight/history.sqlite); one run at a time.")
@click.option("--sweep", is_flag=True, help="Nightly mode: busy nodes reported busy, not disturbed; implies --history.")
@click.option("--prom-output", type=click.Path(dir_okay=False), help="Also write Prometheus textfile metrics here.")
def run_cmd(inventory, checks, skip, limit, fmt, output, strict, quiet, forks, ssh_config, deadline, record, replay,
            history, sweep, prom_output):
    """Run the checks on every node of INVENTORY and report."""
    from ..inventory import InventoryError, load
    from .extras import RunExtras
    from ..registry import SelectionError
    from ..runner import Options
    from ..transport import factory

    try:
        inv = load(inventory, limit=limit, ssh_config=ssh_config)
        warn_shared_addresses(inv)
        runner_opts = Options(checks=ids(checks), skip=ids(skip), forks=forks, deadline=deadline, strict=strict,
                              started=process_origin())
        recorder = None
        if record:
            from ..transport.replay import Recorder
            recorder = Recorder(record)
        progress = Progress(enabled=sys.stderr.isatty() and not quiet)
        runner = RunExtras.runner_class(sweep)(inv, factory.make_transport(replay), runner_opts,
                                               progress=progress, recorder=recorder)
    except (InventoryError, SelectionError) as exc:
        fail_usage(str(exc))
    extras = RunExtras.start(history, sweep, prom_output, fmt, output)  # exits 2, 75 or 4 before any connection
    report = with_signals(runner, runner.run)
    progress.clear()
    if recorder is not None:
        recorder.write()
    emit(report, fmt, output, quiet)
    extras.finish(report)
    sys.exit(report.exit_code)
