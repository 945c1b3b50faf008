"""What `run` does beyond the report: the lock, the history entry and the Prometheus textfile
(`--history`, `--sweep`, `--prom-output`). `start` runs before any connection, so a refused run
ran nothing; `finish` after the report is written."""
from __future__ import annotations

from .common import EXIT_INTERNAL, EXIT_USAGE, say
from ..model import Report
from ..engine.mode import RunMode
from ..ops import history as hist
from ..ops.lock import EXIT_LOCKED, LockError, Locked, RunLock


class RunExtras:
    def __init__(self, db_path: str | None, sweep: bool, prom_output: str | None):
        self.db_path = db_path
        self.sweep = sweep
        self.prom_output = prom_output
        self.lock: RunLock | None = None
        self.db = None
        self.keep_days: float | None = None

    @classmethod
    def start(cls, history: str | None, sweep: bool, prom_output: str | None, fmt: str,
              output: str | None) -> "RunExtras":
        if fmt == "prometheus" and not output:
            say("--format prometheus needs --output DIR/preflight.prom (the textfile collector's "
                "directory)", EXIT_USAGE)
        db_path = str(hist.default_path()) if (history == "" or (history is None and sweep)) else history
        extras = cls(db_path, sweep, prom_output)
        if db_path:
            try:
                extras.lock = RunLock(db_path).acquire()
            except Locked as exc:
                say(str(exc), EXIT_LOCKED)
            except LockError as exc:
                say(f"{exc} (history database {db_path})", EXIT_INTERNAL)
            try:
                extras.db = hist.open_db(db_path)
            except hist.HistoryError as exc:
                say(str(exc), EXIT_INTERNAL)
        return extras

    def remember(self, report: Report, flap_window: int) -> Report:
        """Acks and sticky flapping from the history: the `--history` database, else the default
        one when it exists (read only: acks apply to every run that can see them); with
        `--history`, also the baseline warnings (ops/baseline.py)."""
        from ..ops import memory
        db, own = self.db, self.db is None
        if own:
            try:
                db = memory.open_default()
            except hist.HistoryError as exc:
                say(str(exc), EXIT_INTERNAL)
        try:
            report = memory.remembered(report, db, flap_window)
            if not own:  # a figure against its own past: only where this run is stored beside that past
                from ..ops import baseline
                from ..registry import discover
                report = baseline.mark(report, self.db, discover().get)
            return report
        finally:
            if own and db is not None:
                db.close()

    def prune(self, keep_days: float | None) -> None:
        if keep_days is not None and self.db is not None:
            from ..ops import memory
            memory.prune(self.db, keep_days)

    @staticmethod
    def mode(sweep: bool) -> RunMode:
        """How the run treats busy nodes: the sweep's mode, or the plain run's."""
        if sweep:
            from ..ops.sweep import Sweep
            return Sweep()
        return RunMode()

    def finish(self, report: Report) -> None:
        """Write the .prom file and the history entry; a failure exits 4 with one line."""
        try:
            if self.prom_output:
                from ..report import prometheus
                try:
                    prometheus.write(report, self.prom_output)
                except OSError as exc:
                    say(f"cannot write {self.prom_output}: {exc.strerror}", EXIT_INTERNAL)
            if self.db is not None:
                try:
                    hist.store(self.db, report, sweep=self.sweep)
                    self.prune(self.keep_days)
                except hist.HistoryError as exc:
                    say(f"{self.db_path}: {exc}; the report itself was written", EXIT_INTERNAL)
        finally:
            if self.db is not None:
                self.db.close()
            if self.lock is not None:
                self.lock.release()
