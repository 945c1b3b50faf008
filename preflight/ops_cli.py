"""Operations commands: `gate`, `nagios`, `history`, `diff`, `trend`, and the extras of `run`
(`--history`, `--sweep`, `--prom-output`) that tie a run to the lock, the database and the .prom file.

Why here and not in cli.py: these are the nightly-sweep and job-gate uses; keeping them in one
module keeps cli.py about the core run. cli.py registers the commands and calls `RunExtras`.
"""
from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any

import click

from . import gate as gate_mod
from . import history as hist
from . import nagios as nagios_mod
from .inventory import InventoryError, load
from .lock import EXIT_LOCKED, LockError, Locked, RunLock
from .model import Report
from .registry import SelectionError
from .runner import Options, Runner

EXIT_USAGE, EXIT_INTERNAL = 2, 4
# check -> (default metric for `trend`, rising is bad)
TREND_DEFAULTS = {"hccn.optical": ("optical_rx_power", False), "storage.disk": ("free_space", False),
                  "net.ping_mesh": ("ping_rtt", True), "hccn.ping_mesh": ("ping_rtt", True),
                  "smoke.allreduce": ("busbw", False), "hccn.link": ("link_up_count", True)}


def _say(message: str, code: int) -> None:
    click.echo(f"preflight: {message}", err=True)
    sys.exit(code)


def _ids(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


# ---------------------------------------------------------------- run --history / --sweep

class RunExtras:
    """What `run` does beyond the report: lock, history entry, .prom file. `start` runs before any
    connection (so a refused run ran nothing); `finish` after the report is written."""

    def __init__(self, db_path: str | None, sweep: bool, prom_output: str | None):
        self.db_path = db_path
        self.sweep = sweep
        self.prom_output = prom_output
        self.lock: RunLock | None = None
        self.db = None

    @classmethod
    def start(cls, history: str | None, sweep: bool, prom_output: str | None, fmt: str,
              output: str | None) -> "RunExtras":
        if fmt == "prometheus" and not output:
            _say("--format prometheus needs --output DIR/preflight.prom (the textfile collector's "
                 "directory)", EXIT_USAGE)
        db_path = str(hist.default_path()) if (history == "" or (history is None and sweep)) else history
        extras = cls(db_path, sweep, prom_output)
        if db_path:
            try:
                extras.lock = RunLock(db_path).acquire()
            except Locked as exc:
                _say(str(exc), EXIT_LOCKED)
            except LockError as exc:
                _say(f"{exc} (history database {db_path})", EXIT_INTERNAL)
            try:
                extras.db = hist.open_db(db_path)
            except hist.HistoryError as exc:
                _say(str(exc), EXIT_INTERNAL)
        return extras

    @staticmethod
    def runner_class(sweep: bool) -> type[Runner]:
        if sweep:
            from .sweep import SweepRunner
            return SweepRunner
        return Runner

    def finish(self, report: Report) -> None:
        """Write the .prom file and the history entry; a failure exits 4 with one line."""
        try:
            if self.prom_output:
                from .report import prometheus
                try:
                    prometheus.write(report, self.prom_output)
                except OSError as exc:
                    _say(f"cannot write {self.prom_output}: {exc.strerror}", EXIT_INTERNAL)
            if self.db is not None:
                try:
                    hist.store(self.db, report, sweep=self.sweep)
                except hist.HistoryError as exc:
                    _say(f"{self.db_path}: {exc}; the report itself was written", EXIT_INTERNAL)
        finally:
            if self.db is not None:
                self.db.close()
            if self.lock is not None:
                self.lock.release()


# ---------------------------------------------------------------- gate

@click.command("gate")
@click.argument("inventory", required=False, type=click.Path(dir_okay=False))
@click.option("--checks", help=f"Checks to run (default: {','.join(gate_mod.FAST_CHECKS)}).")
@click.option("--skip", help="Check ids or prefixes not to run.")
@click.option("--limit", help='Only these nodes, e.g. --limit "$SLURM_JOB_NODELIST" (Slurm hostlist).')
@click.option("--deadline", type=click.FloatRange(min=0.1), default=gate_mod.DEFAULT_DEADLINE, show_default=True,
              help="Seconds for the whole gate; unfinished nodes count as not usable.")
@click.option("--local", is_flag=True, help="Check this host only, without SSH (Slurm prolog); INVENTORY optional.")
@click.option("--exclude-out", type=click.Path(dir_okay=False), help="Write failing/unreachable nodes (hostlist).")
@click.option("--good-out", type=click.Path(dir_okay=False), help="Write the usable nodes (hostlist).")
@click.option("--strict", is_flag=True, help="A warning counts as a failure.")
@click.option("--forks", type=click.IntRange(1, 1024), default=64, show_default=True)
@click.option("--format", "fmt", type=click.Choice(("table", "json", "junit", "markdown")), default="table",
              show_default=True)
@click.option("--output", type=click.Path(dir_okay=False), help="Write the report here (atomically).")
@click.option("--quiet", "-q", is_flag=True, help="Nothing on stdout (the exit code says it all).")
@click.option("--ssh-config", type=click.Path(dir_okay=False))
def gate(inventory, checks, skip, limit, deadline, local, exclude_out, good_out, strict, forks, fmt, output,
         quiet, ssh_config) -> None:
    """Fast go/no-go before a job: exit 0 only when every node is usable (SPEC exit codes)."""
    from . import cli
    try:
        if local:
            from .transport.local import LocalTransport
            inv = gate_mod.local_inventory(inventory)
            transport: Any = LocalTransport()
        else:
            if not inventory:
                _say("gate needs an INVENTORY (or --local for this host)", EXIT_USAGE)
            inv = load(inventory, limit=limit, ssh_config=ssh_config)
            transport = cli.make_transport(None)
        opts = Options(checks=gate_mod.gate_checks(_ids(checks), local), skip=_ids(skip), forks=forks,
                       deadline=deadline, strict=strict)
        runner = Runner(inv, transport, opts)
    except (InventoryError, SelectionError) as exc:
        _say(str(exc), EXIT_USAGE)
    report = cli.with_signals(runner, runner.run)
    try:
        gate_mod.write_lists(report, exclude_out, good_out, strict)
    except OSError as exc:
        _say(f"cannot write {exc.filename or 'the node list'}: {exc.strerror}", EXIT_INTERNAL)
    if quiet and not output:
        sys.exit(report.exit_code)
    cli.emit(report, fmt, output, quiet)
    sys.exit(report.exit_code)


# ---------------------------------------------------------------- nagios

@click.command("nagios")
@click.argument("inventory", type=click.Path(dir_okay=False))
@click.option("--checks", help=f"Checks to run (default: {','.join(gate_mod.FAST_CHECKS)}).")
@click.option("--skip", help="Check ids or prefixes not to run.")
@click.option("--limit", help="Only these nodes.")
@click.option("--deadline", type=click.FloatRange(min=0.1), default=50.0, show_default=True,
              help="Seconds for the run (Nagios kills a check at 60 s by default).")
@click.option("--ssh-config", type=click.Path(dir_okay=False))
def nagios(inventory, checks, skip, limit, deadline, ssh_config) -> None:
    """Nagios/Icinga plugin: one status line with perfdata; exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN."""
    from . import cli
    try:
        inv = load(inventory, limit=limit, ssh_config=ssh_config)
        opts = Options(checks=gate_mod.gate_checks(_ids(checks), False), skip=_ids(skip), deadline=deadline)
        runner = Runner(inv, cli.make_transport(None), opts)
        report = cli.with_signals(runner, runner.run)
        code, text = nagios_mod.output(report)
    except (InventoryError, SelectionError) as exc:
        code, text = nagios_mod.unknown(str(exc))
    except Exception as exc:  # noqa: BLE001 - Nagios: the plugin's own failure is UNKNOWN, one line
        code, text = nagios_mod.unknown(f"internal error: {type(exc).__name__}: {exc}")
    cli.safe_echo(text + "\n")
    sys.exit(code)


# ---------------------------------------------------------------- history, diff, trend

db_option = click.option("--db", type=click.Path(dir_okay=False),
                         help="History database (default $XDG_STATE_HOME/preflight/history.sqlite).")


def _open(db: str | None):
    try:
        return hist.open_db(db or hist.default_path(), create=False)
    except hist.HistoryError as exc:
        _say(str(exc), EXIT_USAGE)


@click.command("history")
@db_option
@click.option("--last", "last", type=click.IntRange(1), default=20, show_default=True, help="How many runs.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, one per run.")
def history(db, last, as_json) -> None:
    """List the stored runs, oldest first: id, time, verdict, counts."""
    from .cli import safe_echo
    conn = _open(db)
    rows = hist.runs(conn, last)
    if as_json:
        safe_echo("".join(json.dumps(asdict(r)) + "\n" for r in rows))
        return
    lines = [f"{'id':>5}  {'finished':<20} {'verdict':<11} {'nodes':>5}  pass warn fail error skip  cluster"]
    for r in rows:
        c = r.counts
        lines.append(f"{r.id:>5}  {r.finished_at:<20} {r.verdict:<11} {r.nodes:>5}  {c['pass']:>4} {c['warn']:>4} "
                     f"{c['fail']:>4} {c['error']:>5} {c['skip']:>4}  {r.cluster or ''}{' (sweep)' if r.sweep else ''}")
    safe_echo("\n".join(lines) + "\n" if rows else "no runs stored yet\n")


@click.command("diff")
@click.argument("run_a", required=False)
@click.argument("run_b", required=False)
@db_option
@click.option("--json", "as_json", is_flag=True)
def diff(run_a, run_b, db, as_json) -> None:
    """What changed between two runs (default: the last two): newly failing, recovered, still failing.
    Runs are ids from `preflight history`, or -N for the N-th newest."""
    from .cli import safe_echo
    conn = _open(db)
    try:
        a = hist.resolve(conn, run_a, 2)
        b = hist.resolve(conn, run_b, 1)
    except hist.HistoryError as exc:
        _say(str(exc), EXIT_USAGE)
    d = hist.diff(conn, a, b)
    if as_json:
        safe_echo(json.dumps(asdict(d), indent=2) + "\n")
        return
    out = [f"run {a} -> run {b}"]
    for title, items in (("newly failing", d.new), ("recovered", d.recovered), ("still failing", d.still),
                         ("changed", d.changed)):
        out.append(f"{title}: {len(items)}")
        out += [f"  {c.node:<16} {c.check:<20} {c.before or '-'} -> {c.after or '-'}  {c.summary[:120]}"
                for c in items]
    safe_echo("\n".join(out) + "\n")


@click.command("trend")
@click.option("--check", "check", required=True, help="Check whose metrics to follow, e.g. hccn.optical.")
@click.option("--metric", help="Metric name (default per check: hccn.optical -> optical_rx_power).")
@click.option("--window", type=click.IntRange(2), default=5, show_default=True, help="Last N runs with data.")
@click.option("--min-points", type=click.IntRange(2), default=3, show_default=True)
@click.option("--min-drop-pct", type=float, default=20.0, show_default=True,
              help="Total change over the window, in % of the first value.")
@click.option("--min-slope-pct", type=float, default=3.0, show_default=True,
              help="Least-squares slope, in % of the first value per run.")
@click.option("--rising", is_flag=True, default=None, help="Rising is bad (RTT, loss); default per metric.")
@click.option("--limit", help="Only these nodes (node set).")
@db_option
@click.option("--json", "as_json", is_flag=True)
def trend(check, metric, window, min_points, min_drop_pct, min_slope_pct, rising, limit, db, as_json) -> None:
    """Warn about numbers that drift steadily the bad way (a dying optical lane) before they cross a
    threshold. Exit 0: nothing drifting; 1: at least one warning; 2: bad arguments."""
    from .cli import safe_echo
    from .nodeset import RangeError, expand
    default_metric, default_rising = TREND_DEFAULTS.get(check, (None, False))
    metric = metric or default_metric
    if not metric:
        _say(f"no default metric for {check}; give --metric NAME", EXIT_USAGE)
    try:
        nodes = expand(limit) if limit else None
    except RangeError as exc:
        _say(str(exc), EXIT_USAGE)
    conn = _open(db)
    found, examined = hist.trends(conn, check, metric, window=window, min_points=min_points,
                                  min_drop_pct=min_drop_pct, min_slope_pct=min_slope_pct,
                                  rising=default_rising if rising is None else rising, limit_nodes=nodes)
    if as_json:
        safe_echo("".join(json.dumps(asdict(t)) + "\n" for t in found))
    else:
        lines = [f"WARN {t.node} {check} {metric}{{{t.label_text}}}: "
                 f"{t.values[0]:g} -> {t.values[-1]:g} {t.unit} over {len(t.values)} runs "
                 f"({t.slope:+.4g} {t.unit}/run, {t.drop_pct:.0f}% worse)" for t in found]
        lines.append(f"{len(found)} of {examined} series drifting ({metric} over the last {window} runs)")
        safe_echo("\n".join(lines) + "\n")
    sys.exit(1 if found else 0)
