"""Every file preflight writes, or reads for trust, goes through here (docs/SPEC.md "files").

Why: preflight often runs as root, in directories other users can reach (/tmp, a shared out-dir,
a history database on shared storage). A path someone else prepared must never make it write a
file that is not its own, nor believe a file that someone else can edit:

- a file written is never reached through a symbolic link (O_NOFOLLOW on the last component)
  and must be a regular file (fstat after open: a FIFO, device or socket is refused, except the
  system's own streams under /dev/, such as /dev/null and /dev/stdout, which are written in place);
- the directory it goes into is opened once (O_DIRECTORY) and every later step works relative to
  that descriptor, so a path component swapped in between cannot redirect it; the directory must
  belong to the invoking user or root and not be writable by others, unless sticky (/tmp);
- what preflight creates is 0600, directories 0700, set with fchmod/chmod (not left to the umask);
- a file read for trust (a config file, the acks database) must belong to the invoking user or
  root and be writable by nobody else.

"The invoking user" is the effective user, plus, when that is root through sudo, the user who ran
sudo (SUDO_UID: `sudo preflight run --output ~/reports/x.json` writes into the operator's own
directory). Every refusal is an UnsafePath whose text is one line naming the path and the reason.
"""
from __future__ import annotations

import errno
import os
import pwd
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
STREAM_DIR = "/dev/"  # the system's streams and devices; written in place, never replaced


class UnsafePath(OSError):
    """A path preflight refuses to write or to trust: an OSError (EPERM) whose strerror is the
    reason, so every "cannot write PATH: {strerror}" message already says it; str() is one line."""

    def __init__(self, path: object, reason: str):
        super().__init__(errno.EPERM, reason, str(path))

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def trusted_uids() -> set[int]:
    uids = {0, os.geteuid(), os.getuid()}
    if os.geteuid() == 0 and (sudo := os.environ.get("SUDO_UID", "")).isdigit():
        uids.add(int(sudo))
    return uids


def user_name(uid: int | None = None) -> str:
    """The login name of the real user (not $LOGNAME or $USER, which anyone can set)."""
    uid = os.getuid() if uid is None else uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _owner(uid: int) -> str:
    return f"user {user_name(uid)}" if uid != os.getuid() else "you"


def _dir_problem(st: os.stat_result) -> str | None:
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid not in trusted_uids():
        return f"belongs to {_owner(st.st_uid)}"
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        return "is writable by others (and not sticky)"
    return None


def open_dir(path: str | os.PathLike, create: bool = True) -> int:
    """A descriptor of directory `path`, checked; missing components created 0700 when `create`."""
    p = Path(path) if str(path) else Path(".")
    if create and not p.is_dir():
        make_dirs(p)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UnsafePath(p, "no such directory") from None
    except OSError as exc:
        raise UnsafePath(p, exc.strerror) from None
    why = _dir_problem(os.fstat(fd))
    if why:
        os.close(fd)
        raise UnsafePath(p, f"the directory {why}; nothing is written there")
    return fd


def make_dirs(path: str | os.PathLike) -> None:
    """`mkdir -p` whose new directories are 0700 whatever the umask; an existing one is kept as
    it is (it may be a shared parent such as /tmp), but a link at a new component is refused."""
    p = Path(os.path.abspath(path))
    missing = []
    while not p.exists() and not p.is_symlink():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:
            pass
        except OSError as exc:
            raise UnsafePath(d, f"cannot create directory: {exc.strerror}") from None
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafePath(d, "not a directory (a link?); nothing is written there")
        if st.st_uid == os.geteuid():
            os.chmod(d, DIR_MODE)


def is_stream(path: str | os.PathLike) -> bool:
    return os.path.abspath(path).startswith(STREAM_DIR)


def refuse_existing(dir_fd: int, name: str, shown: object) -> os.stat_result | None:
    """The lstat of `name` in the directory, or None when it is not there; refused when a link or
    not a regular file."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(shown, "it is a symbolic link; never written through")
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(shown, "not a regular file; never written")
    return st


def open_private(path: str | os.PathLike, create: bool = True) -> int:
    """A descriptor of the regular file `path`: read-write, created 0600 when missing, with
    `create`; read-only, and it must exist, without. Never through a link, never truncated, never
    another user's; for lock files and databases opened in place."""
    p = Path(path)
    dfd = open_dir(p.parent, create=create)
    try:
        if refuse_existing(dfd, p.name, p) is None and not create:
            raise UnsafePath(p, "no such file")
        flags = (os.O_RDWR | os.O_CREAT if create else os.O_RDONLY) | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fd = os.open(p.name, flags, FILE_MODE, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # ELOOP: the last component is a symbolic link
                raise UnsafePath(p, "it is a symbolic link; never opened through") from None
            raise
        st = os.fstat(fd)
        why = ("not a regular file" if not stat.S_ISREG(st.st_mode)
               else f"it belongs to {_owner(st.st_uid)}" if st.st_uid not in trusted_uids() else None)
        if why:
            os.close(fd)
            raise UnsafePath(p, f"{why}; not opened")
        os.set_blocking(fd, True)
        return fd
    finally:
        os.close(dfd)


def private_dir(path: str | os.PathLike) -> None:
    """A directory only the invoking user can change, made 0700 when missing: for state that a
    fixed name in a shared place (/tmp) would otherwise let another user prepare. An existing one
    must be a real directory (not a link) of the effective user (or root) that group and others
    cannot write."""
    p = Path(os.path.abspath(path))
    make_dirs(p)
    st = os.lstat(p)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(p, "not a directory (a link is refused)")
    if st.st_uid not in (0, os.geteuid()):
        raise UnsafePath(p, f"belongs to {_owner(st.st_uid)}, not to you: refused (remove it, or choose another)")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePath(p, "group or others can write it: refused (chmod go-w, or choose another)")


def trusted_file(path: str | os.PathLike, what: str) -> None:
    """Refuse a file read for trust (`what`: "history database") that another user could change:
    see _refuse_untrusted. A missing file is fine (nothing is read). For a file preflight reads
    itself, trusted_read checks the descriptor it reads from instead."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError:
        return  # the read itself reports it
    _refuse_untrusted(st, path, what)


def trusted_read(path: str | os.PathLike, what: str) -> str | None:
    """The UTF-8 text of a file read for trust (`what`: "config file"), or None when there is
    none. The checks are made on the descriptor the text is then read from, so a file swapped
    after the check is never the one read; a FIFO or device is refused without blocking on it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(path, f"refusing to trust this {what}: not a regular file")
        _refuse_untrusted(st, path, what)
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read().decode("utf-8")
    finally:
        os.close(fd)


def _refuse_untrusted(st: os.stat_result, path: str | os.PathLike, what: str) -> None:
    """A file read for trust must belong to you or root with nobody else able to write it, and
    no directory above its real path may let another user replace it (owned by you or root, not
    writable by group or others unless sticky, as /tmp is): OpenSSH's StrictModes rule."""
    if st.st_uid not in trusted_uids():
        raise UnsafePath(path, f"refusing to trust this {what}: it belongs to {_owner(st.st_uid)}")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "group and others" if st.st_mode & stat.S_IWGRP and st.st_mode & stat.S_IWOTH else \
            "others" if st.st_mode & stat.S_IWOTH else "its group"
        raise UnsafePath(path, f"refusing to trust this {what}: {who} can write it "
                         f"(chmod go-w {path})")
    for d in Path(os.path.realpath(path)).parents:
        try:
            dst = os.stat(d)
        except OSError:
            continue
        if dst.st_uid not in trusted_uids():
            raise UnsafePath(path, f"refusing to trust this {what}: its directory {d} belongs to {_owner(dst.st_uid)}")
        if dst.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not dst.st_mode & stat.S_ISVTX:
            raise UnsafePath(path, f"refusing to trust this {what}: group or others can replace it in {d} (chmod go-w {d})")
