"""The `preflight` command: one click group, its subcommands registered here by name.

Why a table and not imports: each subcommand lives in its own module and is imported only when it
is called (a Slurm prolog running `gate --local` pays for nothing else), but registration stays
explicit: COMMANDS is the complete list, and a module that fails to import is an error the user
sees (exit 4 with the message), never a command that silently disappears.
Exit codes are docs/SPEC.md's.
"""
from __future__ import annotations

import importlib
import os
import signal
import sys
import time

import click

from .. import __version__
from ..gcwindow import for_this_process
from . import common
from .common import EXIT_INTERNAL, EXIT_INTERRUPTED

# name -> (module, attribute, one line of help shown by `preflight --help`)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("preflight.cli.run", "run_cmd", "Run the checks on every node of INVENTORY and report."),
    "gate": ("preflight.cli.ops", "gate", "Fast go/no-go before a job: exit 0 only when every node is usable."),
    "nagios": ("preflight.cli.ops", "nagios", "Nagios/Icinga plugin: one status line with perfdata."),
    "history": ("preflight.cli.ops", "history", "List the stored runs, oldest first."),
    "ack": ("preflight.cli.ops", "ack", "Acknowledge a known failure on a node until a date (stored in the history)."),
    "diff": ("preflight.cli.ops", "diff", "What changed between two runs: newly failing, recovered, still failing."),
    "trend": ("preflight.cli.ops", "trend", "Warn about numbers that drift steadily the bad way."),
    "list-checks": ("preflight.cli.info", "list_checks", "Every check: id, scope, one line of what it checks."),
    "explain": ("preflight.cli.info", "explain", "What a check looks at, why it matters, how to fix."),
    "inventory": ("preflight.cli.info", "inventory_group", "Inspect an inventory."),
    "plan": ("preflight.cli.plan", "plan", "Recommended parallel layouts for N nodes x D devices, with launch arguments."),
    "env": ("preflight.cli.job", "env_cmd", "Write each node's launch environment, derived from the nodes."),
    "fix": ("preflight.cli.job", "fix_cmd", "Scripts that fix failed launch-environment and port checks (--apply runs them)."),
    "config": ("preflight.cli.config_cmd", "config_group", "Show the settings in force and where each comes from."),
    "sim": ("preflight.sim.cli", "sim", "Simulated Ascend cluster: real sshd nodes in network namespaces."),
}


class LazyGroup(click.Group):
    """A group whose commands are imported from COMMANDS on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        cmd = getattr(importlib.import_module(module), attr)  # an ImportError here is a bug: let it show
        if not isinstance(cmd, click.Command):
            raise TypeError(f"{module}.{attr} is not a click command")
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """`preflight --help` from the table, without importing every command."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][2]) for name in self.list_commands(ctx)])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="preflight")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Is this cluster ready to train? Checks every node of an Ascend (or NVIDIA) cluster over SSH."""
    from ..config import ConfigError, default_map, resolve
    common.INVOKED_AT = time.monotonic()
    common.PLUGIN_REFUSAL = None  # only the nagios command sets it (one process may run several, as tests do)
    try:  # config files and PREFLIGHT_* become the subcommand's defaults; its options still win
        ctx.default_map = default_map(resolve())
    except ConfigError as exc:
        if ctx.invoked_subcommand == "nagios":  # the plugin's own trouble: UNKNOWN, exit 3
            from .ops import _plugin_unknown
            common.PLUGIN_REFUSAL = _plugin_unknown
        common.fail_usage(str(exc))


def _interrupted(signum, frame) -> None:  # noqa: ARG001
    """Ctrl-C or SIGTERM outside a run (loading the inventory, say): exit 130 at once, not click's "Aborted!"
    and exit 1. A run installs its own handler (common.with_signals) that keeps the partial report."""
    from .common import force_exit_on_next_interrupt

    force_exit_on_next_interrupt()
    click.echo("\npreflight: interrupted", err=True)
    try:  # what stdout still holds goes nowhere: the exit must not wait on a reader that stopped
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(EXIT_INTERRUPTED)


def entry() -> None:
    """Console-script entry: bugs exit 4 with one line (PREFLIGHT_DEBUG=1 shows the traceback)."""
    signal.signal(signal.SIGINT, _interrupted)
    signal.signal(signal.SIGTERM, _interrupted)  # SPEC §7: 130 for either, with the line, never a silent 143
    common.IS_PROCESS = True  # --deadline counts from this process's start
    for_this_process()  # the run's data lives until exit: GC passes over it free nothing (gcwindow)
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
