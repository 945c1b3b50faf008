"""Write a file so that readers see the old one or the new one, never half of either."""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike, data: str | bytes, mode: int = 0o600) -> None:
    """Temp file in the same directory (same filesystem), fsync, chmod, rename."""
    p = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    try:
        if not stat.S_ISREG(os.stat(p).st_mode):  # /dev/null, /dev/stdout, a FIFO: never replace it
            with open(p, "wb") as f:
                f.write(raw)
            return
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(dir=p.parent if str(p.parent) else ".", prefix=f".{p.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
