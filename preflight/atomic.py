"""Write a file so that readers see the old one or the new one, never half of either, and never
anything but preflight's own file (the rules of preflight/safefile.py)."""
from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from .safefile import UnsafePath, is_stream, refuse_existing, open_dir


def write_atomic(path: str | os.PathLike, data: str | bytes, mode: int = 0o600) -> None:
    """A temp file created O_EXCL|O_NOFOLLOW in the target's (checked) directory, fsync, fchmod,
    renamed over the target. The target may be missing or a regular file; a link, FIFO or device
    is refused, except the system's streams under /dev/ (/dev/null, /dev/stdout), written in place."""
    p = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    if is_stream(p):
        _write_stream(p, raw)
        return
    dfd = open_dir(p.parent, create=False)
    try:
        refuse_existing(dfd, p.name, p)
        tmp = f".{p.name}.{secrets.token_hex(6)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
                f.flush()
                os.fchmod(f.fileno(), mode)
                os.fsync(f.fileno())
            os.replace(tmp, p.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except FileNotFoundError:
                pass
            raise
    finally:
        os.close(dfd)


def _write_stream(p: Path, raw: bytes) -> None:
    """/dev/null, /dev/stdout, /dev/fd/N: opened without creating, written in place; only a
    character device, a pipe or FIFO, or a socket (never a disk: a block device is refused)."""
    try:
        fd = os.open(p, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise UnsafePath(p, f"cannot write: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as f:
        m = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(m) or stat.S_ISFIFO(m) or stat.S_ISSOCK(m)):
            raise UnsafePath(p, "not a character device or pipe; never written")
        f.write(raw)
