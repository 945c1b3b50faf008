"""One run at a time per history database: a kernel file lock (flock) on a file beside the DB.

Why flock and not a PID file: the kernel drops the lock when the holder's file descriptor closes,
including when the process is killed or crashes, so a stale lock can never block the next nightly
run; and a second run learns at once (LOCK_NB) instead of queueing behind a hung one. The PID
written into the file is only there for the message; the lock itself is the flock.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

EXIT_LOCKED = 75  # SPEC: another run holds the lock; EX_TEMPFAIL, the same code `flock -E 75` gives


class Locked(Exception):
    """Another run holds the lock; the message names the lock file and, if known, the holder."""


class LockError(Exception):
    """The lock file could not be created (directory missing, read-only, permissions)."""


def lock_path(db_path: str | os.PathLike) -> Path:
    p = Path(db_path)
    return p.with_name(p.name + ".lock")


class RunLock:
    """Context manager: `with RunLock(db): ...` holds the exclusive lock for the block."""

    def __init__(self, db_path: str | os.PathLike):
        self.path = lock_path(db_path)
        self.fd: int | None = None

    def acquire(self) -> "RunLock":
        from ..safefile import open_private
        try:
            fd = open_private(self.path)  # never through a link, never another's file (it is truncated)
        except OSError as exc:
            raise LockError(f"cannot create lock file {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise Locked(f"another preflight run is using {self.path.with_suffix('')} "
                         f"(lock {self.path}{', held by pid ' + holder if holder else ''}); "
                         f"nothing was run") from None
        except OSError as exc:
            os.close(fd)
            raise LockError(f"cannot lock {self.path}: {exc.strerror}") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock; the file stays (removing it would race)
            self.fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def _read_pid(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""
