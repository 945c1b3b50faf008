"""Option groups shared by run, gate, nagios (and the sweep, which is `run --sweep`), defined once.

Each group is a decorator; a command stacks the groups it takes. Defaults that differ between
commands (the gate's 30 s deadline, Nagios's 50 s) are arguments of the group, not copies of it.
"""
from __future__ import annotations

from typing import Callable, Sequence

import click

from ..report import FORMATS


def _stack(*decorators: Callable) -> Callable:
    def apply(f: Callable) -> Callable:
        for d in reversed(decorators):
            f = d(f)
        return f
    return apply


def inventory_argument(required: bool = True) -> Callable:
    return click.argument("inventory", required=required, type=click.Path(dir_okay=False))


def complete_checks(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    """Shell completion of --checks/--skip: check ids and their prefixes (`hccn` = every hccn.*),
    for the last item of a comma list (`npu.health,hccn.<TAB>`)."""
    from click.shell_completion import CompletionItem

    from ..registry import listing

    done, _, last = incomplete.rpartition(",")
    head = done + "," if done else ""
    ids = [row[0] for row in listing()]
    words = sorted({i.split(".")[0] for i in ids} | set(ids))
    return [CompletionItem(head + w) for w in words if w.startswith(last)]


def selection(checks_help: str = "Check ids or prefixes to run (comma-separated; `hccn` = every hccn.*).",
              limit_help: str = "Only these inventory nodes (node set: node[03-05], Slurm hostlist).") -> Callable:
    """--checks, --skip, --limit: which checks on which nodes."""
    from .common import not_empty

    return _stack(
        click.option("--checks", help=checks_help, callback=not_empty, shell_complete=complete_checks),
        click.option("--skip", help="Check ids or prefixes not to run.", callback=not_empty,
                     shell_complete=complete_checks),
        click.option("--limit", help=limit_help, callback=not_empty),
    )


def deadline(default: float | None = None,
             help: str = "Seconds for the whole run; unfinished nodes: timeout.") -> Callable:
    return click.option("--deadline", type=click.FloatRange(min=0.1), default=default,
                        show_default=default is not None, help=help)


def connection(forks: bool = True) -> Callable:
    """--forks (nodes at a time) and --ssh-config: how nodes are reached."""
    opts = [click.option("--ssh-config", type=click.Path(dir_okay=False),
                         help="ssh_config to honour (default ~/.ssh/config).")]
    if forks:
        opts.insert(0, click.option("--forks", type=click.IntRange(1, 1024), default=64, show_default=True,
                                    help="Nodes at a time."))
    return _stack(*opts)


def output(formats: Sequence[str] = FORMATS,
           quiet_help: str = "No progress on stderr; with --output, nothing on stdout.") -> Callable:
    """--format, --output, --strict, --quiet: what the report looks like and where it goes."""
    return _stack(
        click.option("--format", "fmt", type=click.Choice(tuple(formats)), default="table", show_default=True),
        click.option("--output", type=click.Path(dir_okay=False),
                     help="Write the report here (atomically, mode 0600)."),
        click.option("--strict", is_flag=True, help="A warning counts as a failure (exit 1)."),
        click.option("--quiet", "-q", is_flag=True, help=quiet_help),
    )


def slurm_actions() -> Callable:
    """--need, --drain, --drain-unreachable, --resume, --dry-run: what the gate does in Slurm."""
    return _stack(
        click.option("--need", type=click.IntRange(1), default=None,
                     help="Choose N usable nodes of the allocation (--limit or $SLURM_JOB_NODELIST); "
                          "exit 0 when N were found, 1 when not."),
        click.option("--drain", is_flag=True,
                     help='Drain failing nodes in Slurm (Reason="preflight: <check> <finding>"); resume '
                          "those preflight drained that pass now."),
        click.option("--drain-unreachable", is_flag=True, help="With --drain, drain unreachable nodes too."),
        click.option("--resume", is_flag=True, help="Resume passing nodes that preflight drained (nothing else)."),
        click.option("--dry-run", is_flag=True, help="Print the scontrol lines instead of running them."),
    )


def _debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        from .common import enable_debug
        enable_debug()


def _no_color(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        from ..report import set_color
        set_color(False)


def diagnostics() -> Callable:
    """--debug and --no-color: how much the run says on a terminal, and in which bytes."""
    return _stack(
        click.option("--debug", is_flag=True, expose_value=False, callback=_debug,
                     help="paramiko's log and every traceback on stderr (as PREFLIGHT_DEBUG=1)."),
        click.option("--no-color", is_flag=True, expose_value=False, callback=_no_color,
                     help="No colour or other escape codes (also NO_COLOR, TERM=dumb; FORCE_COLOR forces them)."),
    )
