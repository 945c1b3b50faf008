"""What every command shares: exit codes, one-line usage errors, safe stdout, progress on stderr,
signal handling around a run, and writing the report where it was asked for."""
from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import click

if TYPE_CHECKING:
    from ..model import Report
    from ..runner import Runner

EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 2, 4, 130


def ids(value: str | None) -> list[str] | None:
    """`a,b, c` -> ['a', 'b', 'c']; None when not given."""
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def not_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Click callback of --checks/--skip/--limit: given but empty (`--limit "$SLURM_JOB_NODELIST"`
    with the variable unset) is refused; otherwise it would mean "everything"."""
    if value is not None and not any(v.strip() for v in value.split(",")):
        what = "node" if param.name == "limit" else "check id"
        fail_usage(f"--{param.name} {value!r} names no {what}: give at least one, or leave the option out")
    return value


def unwritable(path: str) -> str | None:
    """Why a report or node list could not be written to `path`, found out before the run (the
    way write_atomic writes: a temp file beside it, renamed; a device or FIFO in place), or None."""
    from ..safefile import is_stream, refuse_existing, open_dir
    p = Path(path)
    if p.is_dir():
        return "it is a directory"
    if is_stream(p):  # /dev/null, /dev/stdout: written in place
        return None if os.access(p, os.W_OK) else "permission denied"
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        return f"no directory {parent}"
    try:
        dfd = open_dir(parent, create=False)
        try:
            refuse_existing(dfd, p.name, p)
        finally:
            os.close(dfd)
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{p.name}.")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        return f"{exc.strerror} in {parent}" if exc.filename != str(p) else exc.strerror
    return None


def writable_or_exit(**targets: str | None) -> None:
    """Exit 2 naming the option and its target when one cannot be written (before any connection)."""
    for option, path in targets.items():
        if path and (why := unwritable(path)):
            fail_usage(f"--{option.replace('_', '-')} {path}: cannot write there: {why}")


PLUGIN_REFUSAL: "Callable[[str], None] | None" = None
"""Set by a command whose caller reads exit codes by another contract (`nagios`: the plugin
guidelines' UNKNOWN, exit 3): how that command ends on a usage, inventory or internal error."""


REFUSAL_LINE: "Callable[[str], None] | None" = None
"""Set while a command answers a reader that takes stdout as its message (`gate --format npd`:
node-problem-detector shows stdout as the condition's message): writes that reader's one line for
any refusal; the exit code stays the command's (never 0 or 1, so NPD reads Unknown)."""


def say(message: str, code: int) -> None:
    """One line on stderr, then exit with `code` (a monitoring plugin's refusal: its own line)."""
    if PLUGIN_REFUSAL is not None and code in (EXIT_USAGE, EXIT_INTERNAL):
        PLUGIN_REFUSAL(message)
    if REFUSAL_LINE is not None and code not in (0, 1):
        REFUSAL_LINE(message)
    click.echo(f"preflight: {message}", err=True)
    sys.exit(code)


def fail_usage(message: str) -> None:
    say(message, EXIT_USAGE)


def warn_shared_addresses(inv) -> None:
    """Load-time warning: two inventory nodes that reach one address (preflight.addresses)."""
    from ..addresses import warnings
    for line in warnings(inv.path, inv.nodes):
        click.echo(f"preflight: warning: {line}", err=True)


def safe_echo(text: str) -> None:
    """Write to stdout; a closed pipe (`| head`) is not an error worth a traceback. Control
    characters (but newline and tab) are shown escaped: what `history`, `diff`, `trend` and
    `ack --list` print comes from stored node text, and an ESC sequence in it must not reach the
    terminal (report.nodetext; every report format is already clean)."""
    from ..report.nodetext import clean
    try:
        sys.stdout.write(clean(text))
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_gone()


def _stdout_gone() -> None:
    """The reader left: the rest goes nowhere (and the exit flush cannot fail); the exit code stays
    the report's."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


class Progress:
    """One updating line on stderr, only for a person watching a terminal. Where escape codes are
    not wanted (NO_COLOR, TERM=dumb, --no-color) the line is overwritten with spaces instead of
    ESC [K."""

    def __init__(self, enabled: bool):
        from ..report import color_wanted

        self.enabled = enabled
        self.plain = not color_wanted(sys.stderr)
        self._lock = threading.Lock()
        self._width = 0

    def __call__(self, done: int, total: int, failing: int) -> None:
        if self.enabled:
            with self._lock:
                line = f"preflight: {done}/{total} nodes done, {failing} failing"
                self._write(line)

    def _write(self, line: str) -> None:
        if self.plain:
            sys.stderr.write("\r" + line.ljust(self._width))
            self._width = max(self._width, len(line))
        else:
            sys.stderr.write("\r\033[K" + line)
        sys.stderr.flush()

    def clear(self) -> None:
        if self.enabled:
            with self._lock:
                self._write("")
                if self.plain:
                    sys.stderr.write("\r")
                    sys.stderr.flush()


def enable_debug() -> None:
    """paramiko's log on stderr and tracebacks instead of one-line internal errors."""
    import logging

    os.environ["PREFLIGHT_DEBUG"] = "1"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    log = logging.getLogger("paramiko")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)


# Set by the console-script entry (preflight is the process) and by the main group at each
# invocation: one process may run several commands in turn (a library caller, the tests' CliRunner),
# and a deadline counted from that process's start would expire before a late command begins.
IS_PROCESS = False
INVOKED_AT: float | None = None


def process_origin() -> float:
    """When `--deadline` starts counting, on time.monotonic()'s clock: from this process's start
    (interpreter start and inventory loading included) when preflight is the process, otherwise
    from this command's invocation."""
    import time

    if not IS_PROCESS:
        return INVOKED_AT if INVOKED_AT is not None else time.monotonic()
    try:  # Linux: the start time in clock ticks since boot, field 22 (importing psutil costs ~0.02 s)
        with open("/proc/self/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        age = max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, AttributeError, ValueError, IndexError):  # no /proc, no CLOCK_BOOTTIME
        import psutil

        age = max(0.0, time.time() - psutil.Process().create_time())
    return time.monotonic() - age


def force_exit_on_next_interrupt() -> None:
    """A second Ctrl-C ends the process now, whatever it is waiting for."""
    def now(signum, frame):  # noqa: ARG001
        os.write(2, b"\npreflight: interrupted twice, exiting now\n")
        os._exit(EXIT_INTERRUPTED)

    signal.signal(signal.SIGINT, now)


def with_signals(runner: "Runner", body: "Callable[[], Report]") -> "Report":
    """Ctrl-C or SIGTERM: stop new work, kill remote probes (closing the channels does it), keep the
    partial report. A second Ctrl-C forces the exit."""
    def handler(signum, frame):  # noqa: ARG001
        runner.interrupted = True
        runner.cancel.set()
        force_exit_on_next_interrupt()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return body()
    finally:
        for s, h in old.items():
            if not (s == signal.SIGINT and runner.interrupted):  # after one Ctrl-C, the next one forces
                signal.signal(s, h)


def with_provenance(report: "Report", command: str, **options) -> "Report":
    """The report with what produced it (preflight/provenance.py): the command, its options, the
    checks that ran with their digests, the settings in force."""
    from dataclasses import replace

    from ..provenance import effective

    return replace(report, config=effective(command, (r.check for r in report.results), options))


def emit(report: "Report", fmt: str, output: str | None, quiet: bool) -> None:
    """The report to `output` (atomically, 0600; a .prom file 0644) or stdout; with `output` and a
    machine format, the checklist still goes to stdout unless quiet."""
    from ..atomic import write_atomic
    from ..report import console, render

    for message in report.internal_errors:  # exit 4: the bug is said where a person looks
        click.echo(f"preflight: {message}", err=True)
    if output:
        try:
            write_atomic(output, render(report, fmt), mode=0o644 if fmt == "prometheus" else 0o600)
        except OSError as exc:
            say(f"cannot write {output}: {exc.strerror}", EXIT_INTERNAL)
        if not quiet and fmt != "table":
            safe_echo(render(report, "table"))
        return
    from ..report import color_wanted

    if fmt == "table" and (sys.stdout.isatty() or color_wanted(sys.stdout)):
        from ..report import table
        try:
            table.render(report, console())
            sys.stdout.flush()
        except BrokenPipeError:  # FORCE_COLOR into a pipe whose reader left
            _stdout_gone()
        return
    safe_echo(render(report, fmt))
