"""Operations commands: `gate` (the job gate), `nagios` (the monitoring plugin), and the history
readers `history`, `diff`, `trend`. The logic lives in preflight.ops; these are its command lines."""
from __future__ import annotations

import json
import sys
from dataclasses import asdict

import click

from ..errors import InventoryError
from ..ops import gate as gate_mod
from . import options
from .common import (EXIT_INTERNAL, EXIT_USAGE, emit, ids, process_origin, safe_echo, say, warn_shared_addresses,
                     with_provenance,
                     with_signals, writable_or_exit)

# ---------------------------------------------------------------- gate

FAST_HELP = "Checks to run (default: the gate's fast set, see `preflight list-checks --gate`)."


def _wants_npd(args) -> bool:
    """`--format npd` (or `--format=npd`) among the gate's arguments, before click parses them."""
    args = list(args)
    for i, a in enumerate(args):
        if a == "--":
            return False
        if a == "--format=npd" or (a == "--format" and i + 1 < len(args) and args[i + 1] == "npd"):
            return True
    return False


def _npd_refusal(message: str) -> None:
    from ..report import npd

    safe_echo(npd.refusal(message) + "\n")


class GateCommand(click.Command):
    """With `--format npd`, every refusal before the run (a bad option or value, a bad inventory, a
    node list that cannot be written) is also one NPD line on stdout, `could not tell: reason` (at
    most 80 characters), with the refusal's exit code (2, 4, 5: NPD's Unknown), not an empty message."""

    def make_context(self, info_name, args, parent=None, **extra):
        from . import common

        npd_wanted = _wants_npd(args)
        common.REFUSAL_LINE = _npd_refusal if npd_wanted else None
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.ClickException as exc:
            if npd_wanted:
                _npd_refusal(exc.format_message())
            raise
        finally:
            common.REFUSAL_LINE = None

    def invoke(self, ctx):
        from . import common

        common.REFUSAL_LINE = _npd_refusal if ctx.params.get("fmt") == "npd" else None
        try:
            return super().invoke(ctx)
        finally:
            common.REFUSAL_LINE = None


@click.command("gate", cls=GateCommand)
@options.inventory_argument(required=False)
@options.selection(checks_help=FAST_HELP,
                   limit_help='Only these nodes, e.g. --limit "$SLURM_JOB_NODELIST" (Slurm hostlist).')
@options.output(formats=("table", "json", "jsonl", "junit", "markdown", "html", "npd"),
                quiet_help="Nothing on stdout (the exit code says it all).")
@options.connection()
@options.deadline(default=gate_mod.DEFAULT_DEADLINE,
                  help="Seconds for the whole gate; unfinished nodes count as not usable.")
@options.diagnostics()
@click.option("--local", is_flag=True, help="Check this host only, without SSH (Slurm prolog); INVENTORY optional.")
@click.option("--exclude-out", type=click.Path(dir_okay=False), help="Write failing/unreachable nodes (hostlist).")
@click.option("--good-out", type=click.Path(dir_okay=False),
              help="Write the usable nodes (hostlist); with --need, the N chosen.")
@options.slurm_actions()
@click.option("--drain-on", "drain_on", metavar="ACTIONS",
              help="Hand to repair only nodes whose failures need one of these actions "
                   "(e.g. reboot_node,replace_hardware); with --drain only they are drained. "
                   "The selection is printed on stderr.")
def gate(inventory, checks, skip, limit, fmt, output, strict, quiet, forks, ssh_config, deadline, local,
         exclude_out, good_out, need, drain, drain_unreachable, resume, dry_run, drain_on) -> None:
    """Fast go/no-go before a job: exit 0 only when every node is usable (SPEC exit codes)."""
    from ..actions import parse_list
    from ..inventory import load
    from ..nodeset import fold
    from ..registry import SelectionError
    from ..runner import Options, Runner
    from ..slurm.commands import SlurmError
    from ..transport import factory
    drain = drain or drain_unreachable
    if dry_run and not (drain or resume):
        say("--dry-run shows what --drain or --resume would do: give one of them", EXIT_USAGE)
    try:
        wanted = parse_list(drain_on) if drain_on is not None else None
    except ValueError as exc:
        say(f"--drain-on: {exc}", EXIT_USAGE)
    try:
        if need is not None:
            limit = gate_mod.allocation(limit, need)
        if drain or resume:
            gate_mod.slurm_usable()
            if local:
                gate_mod.local_slurm_name()
        if local:
            inv = gate_mod.local_inventory(inventory)
        else:
            if not inventory:
                say("gate needs an INVENTORY (or --local for this host)", EXIT_USAGE)
            inv = load(inventory, limit=limit, ssh_config=ssh_config)
            warn_shared_addresses(inv)
        opts = Options(checks=gate_mod.gate_checks(ids(checks), local), skip=ids(skip), forks=forks,
                       deadline=deadline, strict=strict, started=process_origin())
        runner = Runner(inv, factory.make_transport(local=local), opts)
    except SlurmError as exc:
        say(str(exc), exc.code)
    except (InventoryError, SelectionError) as exc:
        say(str(exc), EXIT_USAGE)
    writable_or_exit(output=output, exclude_out=exclude_out, good_out=good_out)
    report = with_provenance(_acknowledged(with_signals(runner, runner.run)), "gate", checks=checks, skip=skip,
                             limit=limit, forks=forks, deadline=deadline, strict=strict, local=local, need=need)
    code = report.exit_code
    try:
        if need is not None:
            chosen = gate_mod.select_lists(report, need, exclude_out, good_out, strict)
            code = 0 if len(chosen) == need else 1
            if not quiet:
                click.echo(f"preflight: need {need}: {len(chosen)} usable node(s) chosen"
                           f"{': ' + fold(chosen) if chosen else ''}", err=True)
        else:
            gate_mod.write_lists(report, exclude_out, good_out, strict)
    except OSError as exc:
        say(f"cannot write {exc.filename or 'the node list'}: {exc.strerror}", EXIT_INTERNAL)
    selected = None
    if wanted is not None:
        selected = gate_mod.drain_selection(report, wanted, strict)
        _say_drain(selected, wanted)
    if not (quiet and not output):
        emit(report, fmt, output, quiet)
    if drain or resume:
        try:
            gate_mod.slurm_actions(report, drain, resume, drain_unreachable, dry_run, strict,
                                   say=lambda line: click.echo(line, err=True),
                                   only=set(selected) if selected is not None else None)
        except SlurmError as exc:
            say(str(exc), exc.code)
    sys.exit(code)


def _acknowledged(report):
    """Acks from the default history database, when there is one (`preflight ack` writes there)."""
    from ..config import history_file
    if not history_file().exists():  # the common case: no database, no sqlite3 to import
        return report
    from ..ops import history as hist, memory
    try:
        conn = memory.open_default()
    except hist.HistoryError as exc:
        say(str(exc), EXIT_INTERNAL)
    if conn is None:
        return report
    from ..ops import acks  # only with a database: it loads ClusterShell and the registry
    try:
        return acks.apply(report, acks.active(conn))
    finally:
        conn.close()


def _say_drain(selected: dict, wanted) -> None:
    """One line per selected node on stderr (stdout carries the report)."""
    from ..nodeset import fold
    head = f"preflight: drain-on {','.join(wanted)}: " + (fold(list(selected)) if selected else "no node")
    lines = [head] + [f"preflight:   {node}: " + "; ".join(f"{c} {a}: {s[:100]}" for c, a, s in items)
                      for node, items in selected.items()]
    click.echo("\n".join(lines), err=True)


# ---------------------------------------------------------------- nagios

def _plugin_unknown(message: str) -> None:
    """The plugin guidelines' answer to the plugin's own trouble: `UNKNOWN - reason` on stdout,
    exit 3 (Nagios reads exit 2 as CRITICAL, a claim about the cluster)."""
    from ..ops import nagios as nagios_mod

    code, text = nagios_mod.unknown(message)
    safe_echo(text + "\n")
    sys.exit(code)


class NagiosCommand(click.Command):
    """Every refusal before the run (a bad option or value, `--checks ''`, a bad config file or
    inventory) is UNKNOWN with exit 3, never click's usage exit 2."""

    def make_context(self, info_name, args, parent=None, **extra):
        from . import common

        common.PLUGIN_REFUSAL = _plugin_unknown
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.ClickException as exc:
            _plugin_unknown(exc.format_message())


@click.command("nagios", cls=NagiosCommand)
@options.inventory_argument()
@options.selection(checks_help=FAST_HELP, limit_help="Only these nodes.")
@options.connection(forks=False)
@options.deadline(default=50.0, help="Seconds for the run (Nagios kills a check at 60 s by default).")
def nagios(inventory, checks, skip, limit, ssh_config, deadline) -> None:
    """Nagios/Icinga plugin: one status line with perfdata; exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN."""
    from ..inventory import load
    from ..ops import nagios as nagios_mod
    from ..registry import SelectionError
    from ..runner import Options, Runner
    from ..transport import factory
    try:
        inv = load(inventory, limit=limit, ssh_config=ssh_config)
        opts = Options(checks=gate_mod.gate_checks(ids(checks), False), skip=ids(skip), deadline=deadline,
                       started=process_origin())
        runner = Runner(inv, factory.make_transport(), opts)
        report = with_signals(runner, runner.run)
        code, text = nagios_mod.output(report)
    except (InventoryError, SelectionError) as exc:
        code, text = nagios_mod.unknown(str(exc))
    except Exception as exc:  # noqa: BLE001 - Nagios: the plugin's own failure is UNKNOWN, one line
        code, text = nagios_mod.unknown(f"internal error: {type(exc).__name__}: {exc}")
    safe_echo(text + "\n")
    sys.exit(code)


# ---------------------------------------------------------------- history, diff, trend

db_option = click.option("--db", type=click.Path(dir_okay=False),
                         help="History database (default $XDG_STATE_HOME/preflight/history.sqlite).")


def _open(db: str | None):
    from ..ops import history as hist
    try:
        return hist.open_db(db or hist.default_path(), create=False)
    except hist.HistoryError as exc:
        say(str(exc), EXIT_USAGE)


@click.command("history")
@db_option
@click.option("--last", "last", type=click.IntRange(1), default=20, show_default=True, help="How many runs.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, one per run (with --worst: one per node).")
@click.option("--worst", is_flag=True, help="Rank nodes by the runs (of the last --last) and checks they failed.")
@click.option("--html", "as_html", is_flag=True, help="The last runs as a node x run grid, one HTML page on stdout.")
@click.option("--keep", "keep_days", type=click.FloatRange(min=0, min_open=True), metavar="DAYS",
              help="Delete runs finished more than DAYS ago (and acks expired as long ago), then list.")
def history(db, last, as_json, worst, as_html, keep_days) -> None:
    """List the stored runs, oldest first: id, time, verdict, counts."""
    from ..ops import history as hist, memory
    conn = _open(db)
    if keep_days is not None:
        gone = memory.prune(conn, keep_days)
        click.echo(f"preflight: removed {gone} run(s) older than {keep_days:g} days", err=True)
    if worst:
        ranked = memory.worst_nodes(conn, window=last)
        if as_json:
            safe_echo("".join(json.dumps(asdict(w)) + "\n" for w in ranked))
            return
        lines = [f"{'node':<20} {'runs failed':>11}  checks (runs failed in)"]
        lines += [f"{w.node:<20} {w.runs_failed:>5} of {w.runs_seen:<3}  "
                  + ", ".join(f"{c} ({n})" for c, n in sorted(w.checks.items(), key=lambda kv: -kv[1]))
                  for w in ranked]
        safe_echo("\n".join(lines) + "\n" if ranked else f"no failures in the last {last} runs\n")
        return
    if as_html:
        from ..report import history_html
        safe_echo(history_html.render(memory.run_grid(conn, last)))
        return
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


@click.command("ack")
@click.argument("node", required=False)
@click.argument("check", required=False)
@click.option("--until", help="Last day the ack applies (YYYY-MM-DD, through its end, UTC) or an ISO time with zone.")
@click.option("--reason", help="Why (shown next to the failure): a ticket, a known fault.")
@click.option("--list", "as_list", is_flag=True, help="List the acks still in force.")
@click.option("--db", type=click.Path(dir_okay=False),
              help="History database (default $XDG_STATE_HOME/preflight/history.sqlite; created if missing).")
def ack(node, check, until, reason, as_list, db) -> None:
    """Acknowledge the failures of CHECK on NODE (a node set; CHECK an id or prefix) until a date:
    they stay in the report, dimmed, with the ack, and no longer fail a run or the gate unless --strict."""
    from ..ops import acks, history as hist
    try:
        conn = hist.open_db(db or hist.default_path(), create=not as_list)
    except hist.HistoryError as exc:
        say(str(exc), EXIT_USAGE)
    if as_list:
        rows = acks.active(conn)
        safe_echo("".join(f"{a.id:>4}  {a.node:<20} {a.check:<18} until {a.until}  by {a.by}: {a.reason}\n"
                          for a in rows) or "no acks in force\n")
        return
    if not (node and check and until and reason):
        say("ack needs NODE CHECK --until DATE --reason TEXT (or --list)", EXIT_USAGE)
    try:
        a = acks.add(conn, node, check, until, reason)
    except acks.AckError as exc:
        say(str(exc), EXIT_USAGE)
    safe_echo(f"acknowledged {a.check} on {a.node} until {a.until}: {a.reason}\n")


@click.command("diff")
@click.argument("run_a", required=False)
@click.argument("run_b", required=False)
@db_option
@click.option("--json", "as_json", is_flag=True)
def diff(run_a, run_b, db, as_json) -> None:
    """What changed between two runs (default: the last two): newly failing, recovered, still failing.
    Runs are ids from `preflight history`, or -N for the N-th newest."""
    from ..ops import history as hist
    conn = _open(db)
    try:
        a = hist.resolve(conn, run_a, 2)
        b = hist.resolve(conn, run_b, 1)
    except hist.HistoryError as exc:
        say(str(exc), EXIT_USAGE)
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
    from ..nodeset import RangeError, expand
    from ..ops import history as hist
    from ..registry import discover
    info = discover().get(check)
    default_metric, default_rising = (info.trend_metric if info else None) or (None, False)
    metric = metric or default_metric
    if not metric:
        say(f"no default metric for {check}; give --metric NAME", EXIT_USAGE)
    try:
        nodes = expand(limit) if limit else None
    except RangeError as exc:
        say(str(exc), EXIT_USAGE)
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
