"""Thin click commands over the runner, inventory and reporters. Exit codes are docs/SPEC.md's."""
from __future__ import annotations

import io
import os
import signal
import sys
import threading
from typing import Callable

import click
from rich.console import Console

from . import __version__
from .atomic import write_atomic
from .inventory import InventoryError, load
from .model import Report
from .registry import SelectionError, discover
from .report import json_report, junit, markdown, table
from .runner import Options, Runner

EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 2, 4, 130
FORMATS = ("table", "json", "junit", "markdown", "prometheus")


def _ids(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def _console(file=None, color: bool | None = None) -> Console:
    f = file or sys.stdout
    tty = hasattr(f, "isatty") and f.isatty()
    return Console(file=f, width=None if tty else 200, no_color=not tty or "NO_COLOR" in os.environ,
                   highlight=False, emoji=False, markup=False, force_terminal=tty and color is not False)


def render(report: Report, fmt: str) -> str:
    if fmt == "table":
        buf = io.StringIO()
        table.render(report, _console(buf))
        return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"
    if fmt == "prometheus":
        from .report import prometheus
        return prometheus.render(report)
    return {"json": json_report.render, "junit": junit.render, "markdown": markdown.render}[fmt](report)


def fail_usage(message: str) -> None:
    click.echo(f"preflight: {message}", err=True)
    sys.exit(EXIT_USAGE)


def safe_echo(text: str) -> None:
    """Write to stdout; a closed pipe (`| head`) is not an error worth a traceback."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


class _Progress:
    """One updating line on stderr, only for a person watching a terminal."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._lock = threading.Lock()

    def __call__(self, done: int, total: int, failing: int) -> None:
        if self.enabled:
            with self._lock:
                sys.stderr.write(f"\r\033[Kpreflight: {done}/{total} nodes done, {failing} failing")
                sys.stderr.flush()

    def clear(self) -> None:
        if self.enabled:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def with_signals(runner: Runner, body: Callable[[], Report]) -> Report:
    """Ctrl-C or SIGTERM: stop new work, kill remote probes (closing the channels does it), keep the
    partial report."""
    def handler(signum, frame):  # noqa: ARG001
        runner.interrupted = True
        runner.cancel.set()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return body()
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def make_transport(replay: str | None):
    if replay:
        from .transport.replay import ReplayTransport
        return ReplayTransport(replay)
    from .transport.ssh import SSHTransport
    return SSHTransport()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="preflight")
def main() -> None:
    """Is this cluster ready to train? Checks every node of an Ascend (or NVIDIA) cluster over SSH."""


@main.command("run")
@click.argument("inventory", type=click.Path(dir_okay=False))
@click.option("--checks", help="Check ids or prefixes to run (comma-separated; `hccn` = every hccn.*).")
@click.option("--skip", help="Check ids or prefixes not to run.")
@click.option("--limit", help="Only these inventory nodes (node set: node[03-05], Slurm hostlist).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--output", type=click.Path(dir_okay=False), help="Write the report here (atomically, mode 0600).")
@click.option("--forks", type=click.IntRange(1, 1024), default=64, show_default=True, help="Nodes at a time.")
@click.option("--deadline", type=click.FloatRange(min=0.1), help="Seconds for the whole run; unfinished nodes: timeout.")
@click.option("--strict", is_flag=True, help="A warning counts as a failure (exit 1).")
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr; with --output, nothing on stdout.")
@click.option("--record", type=click.Path(file_okay=False), help="Save every probe's output under DIR.")
@click.option("--replay", type=click.Path(file_okay=False, exists=True), help="Read outputs from a --record DIR.")
@click.option("--ssh-config", type=click.Path(dir_okay=False), help="ssh_config to honour (default ~/.ssh/config).")
@click.option("--history", is_flag=False, flag_value="", default=None, metavar="[DB]",
              help="Store the run in DB (default $XDG_STATE_HOME/preflight/history.sqlite); one run at a time.")
@click.option("--sweep", is_flag=True, help="Nightly mode: busy nodes reported busy, not disturbed; implies --history.")
@click.option("--prom-output", type=click.Path(dir_okay=False), help="Also write Prometheus textfile metrics here.")
def run_cmd(inventory, checks, skip, limit, fmt, output, forks, deadline, strict, quiet, record, replay, ssh_config,
            history, sweep, prom_output):
    """Run the checks on every node of INVENTORY and report."""
    from .ops_cli import RunExtras
    try:
        inv = load(inventory, limit=limit, ssh_config=ssh_config)
        runner_opts = Options(checks=_ids(checks), skip=_ids(skip), forks=forks, deadline=deadline, strict=strict)
        recorder = None
        if record:
            from .transport.replay import Recorder
            recorder = Recorder(record)
        progress = _Progress(enabled=sys.stderr.isatty() and not quiet)
        runner = RunExtras.runner_class(sweep)(inv, make_transport(replay), runner_opts, progress=progress,
                                               recorder=recorder)
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


def emit(report: Report, fmt: str, output: str | None, quiet: bool) -> None:
    if output:
        try:
            write_atomic(output, render(report, fmt), mode=0o644 if fmt == "prometheus" else 0o600)
        except OSError as exc:
            click.echo(f"preflight: cannot write {output}: {exc.strerror}", err=True)
            sys.exit(EXIT_INTERNAL)
        if not quiet and fmt != "table":
            safe_echo(render(report, "table"))
        return
    if fmt == "table" and sys.stdout.isatty():
        table.render(report, _console())
        return
    safe_echo(render(report, fmt))


@main.command("list-checks")
def list_checks() -> None:
    """Every check: id, scope, one line of what it checks."""
    lines = [f"{c.id:<22} {c.scope:<8} {c.title}" for c in discover().values()]
    safe_echo("\n".join(lines) + "\n")


@main.command("explain")
@click.argument("check_id")
def explain(check_id: str) -> None:
    """What a check looks at, why it matters for a launch, how to fix what it finds."""
    info = discover().get(check_id)
    if info is None:
        fail_usage(f"no check {check_id!r} (see: preflight list-checks)")
    params = "".join(f"\n  {k}: {v!r}" for k, v in info.defaults.items())
    safe_echo(f"{info.id} ({info.scope})\n\n{info.doc}\n" + (f"\nParameters (inventory `checks: {{{info.id}: ...}}`):{params}\n" if params else ""))


@main.group("inventory")
def inventory_group() -> None:
    """Inspect an inventory."""


@inventory_group.command("show")
@click.argument("inventory", type=click.Path(dir_okay=False))
@click.option("--limit", help="Only these nodes.")
@click.option("--ssh-config", type=click.Path(dir_okay=False))
def inventory_show(inventory, limit, ssh_config) -> None:
    """Print the expanded nodes, with the settings each one ends up with."""
    try:
        inv = load(inventory, limit=limit, ssh_config=ssh_config)
    except InventoryError as exc:
        fail_usage(str(exc))
    lines = [f"# {inv.path}: {len(inv.nodes)} nodes" + (f", cluster {inv.cluster}" if inv.cluster else "")]
    for n in inv.nodes:
        lines.append(f"{n.name:<16} {n.user or '(current user)'}@{n.host}:{n.port}  devices={n.devices} "
                     f"backend={n.backend} host_key_policy={n.host_key_policy}"
                     + (f" proxy_jump={n.proxy_jump}" if n.proxy_jump else ""))
    safe_echo("\n".join(lines) + "\n")


def _optional_commands() -> None:
    """Sub-tools that live in their own modules (simulator, planner)."""
    for module, attr in (("preflight.sim.cli", "sim"), ("preflight.plan_cli", "plan"),
                         *(("preflight.ops_cli", c) for c in ("gate", "nagios", "history", "diff", "trend"))):
        try:
            mod = __import__(module, fromlist=[attr])
        except ImportError:
            continue
        cmd = getattr(mod, attr, None)
        if isinstance(cmd, click.Command):
            main.add_command(cmd)


_optional_commands()


def entry() -> None:
    """Console-script entry: bugs exit 4 with one line (PREFLIGHT_DEBUG=1 shows the traceback)."""
    try:
        main(standalone_mode=True)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # noqa: BLE001
        if os.environ.get("PREFLIGHT_DEBUG"):
            raise
        click.echo(f"preflight: internal error (a bug in preflight, please report it): "
                   f"{type(exc).__name__}: {exc}", err=True)
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":
    entry()
