"""File descriptors: as many as the system allows, and never more connections than they cover.

Each open node connection holds one socket; a reconnect may briefly hold a second. Near `ulimit -n`
sockets fail with EMFILE, which must never read as "node unreachable": the soft limit is raised to
the hard one at the start of a run, and `--forks` is lowered to what the limit covers.
"""
from __future__ import annotations

import resource

FDS_PER_CONNECTION = 2
RESERVED_FDS = 64  # stdio, the history database, the agent socket, the report's temp file, python itself
_CEILING = 1 << 20  # Linux's default nr_open: an "unlimited" hard limit is not a settable soft one


def raise_nofile() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = _CEILING if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return _CEILING if soft == resource.RLIM_INFINITY else soft


def forks_within(forks: int, nofile: int) -> int:
    """`forks` lowered, if need be, to the connections `nofile` descriptors can hold."""
    return max(1, min(forks, (nofile - RESERVED_FDS) // FDS_PER_CONNECTION))
