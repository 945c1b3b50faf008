"""The record of a `preflight fix` plan, beside its scripts: `DIR/NODE.plan.json`.

Why a record: a rollback runs as root on a node, days after the plan, from a directory on disk. So
it runs only what preflight wrote itself: the directory, the scripts and the record are refused
unless owned by the invoking user and writable by nobody else (opened without following a link);
the script's sha256 must equal the one recorded when the plan was made; and only the steps the
record says applied are undone (an apply that failed on a node records the steps that completed
before it). Each step's description and declared privilege live here, never inside the script.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from typing import Any

from ..atomic import write_atomic
from ..safefile import make_dirs
from ..checkapi import Shell
from .fix import NodeFix

SCHEMA = "preflight.fix/1"


class Untrusted(Exception):
    """A file or directory preflight will not run from or write to (one line, naming it)."""


def _foreign(st: os.stat_result) -> str | None:
    """Why a file's owner or mode lets someone else have written it; None when only we could."""
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not the invoking user ({os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def ensure_dir(path: str) -> None:
    """Create the out-dir 0700, or accept an existing one only when it is a real directory of ours
    that nobody else can write (a planted script could otherwise take a plan's place)."""
    try:
        make_dirs(path)  # new directories 0700 whatever the umask, the missing parents too
        st = os.lstat(path)
    except OSError as exc:
        raise Untrusted(f"{path}: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise Untrusted(f"{path}: not a directory (a link is refused)")
    why = _foreign(st)
    if why:
        raise Untrusted(f"{path}: {why}: refused (preflight runs only scripts it wrote, from a directory only you can write)")


def read_trusted(path: str) -> bytes:
    """A file's bytes, refused when it is a link, not a regular file, or someone else could have written it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise Untrusted(f"{path}: {exc.strerror}" + (" (a link is refused)" if os.path.islink(path) else "")) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(f"{path}: not a regular file")
        why = _foreign(st)
        if why:
            raise Untrusted(f"{path}: {why}: refused")
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def digest(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


@dataclass
class PlanRecord:
    node: str
    steps: list[dict[str, Any]]  # {"what": description, "root": declared need}
    fix_sha256: str
    rollback_sha256: str
    applied: list[int] = field(default_factory=list)  # steps whose apply completed and were not rolled back

    @classmethod
    def of(cls, fix: NodeFix) -> "PlanRecord":
        return cls(fix.node, [{"what": s.what, "root": s.root} for s in fix.steps],
                   digest(fix.script()), digest(fix.script(rollback=True)))

    def to_json(self) -> str:
        return json.dumps({"schema": SCHEMA, "node": self.node, "steps": self.steps, "fix_sha256": self.fix_sha256,
                           "rollback_sha256": self.rollback_sha256, "applied": self.applied}, indent=1) + "\n"

    def needs_root(self, indices: list[int]) -> bool:
        """Privilege from the declared need of the steps that will run, never from the script's text."""
        return any(bool(self.steps[i].get("root")) for i in indices if 0 <= i < len(self.steps))


def paths(out_dir: str, node: str) -> dict[str, str]:
    return {k: os.path.join(out_dir, f"{node}.{k}") for k in ("fix.sh", "rollback.sh", "plan.json")}


def write(out_dir: str, fix: NodeFix) -> PlanRecord:
    rec = PlanRecord.of(fix)
    p = paths(out_dir, fix.node)
    write_atomic(p["fix.sh"], fix.script(), mode=0o600)
    write_atomic(p["rollback.sh"], fix.script(rollback=True), mode=0o600)
    save(out_dir, rec)
    return rec


def save(out_dir: str, rec: PlanRecord) -> None:
    write_atomic(paths(out_dir, rec.node)["plan.json"], rec.to_json(), mode=0o600)


def load(out_dir: str, node: str) -> PlanRecord | None:
    """The node's plan record; None when it has none. Untrusted when it cannot be trusted or read."""
    p = paths(out_dir, node)["plan.json"]
    if not os.path.lexists(p):
        return None
    raw = read_trusted(p)
    try:
        doc = json.loads(raw)
        if doc.get("schema") != SCHEMA or doc.get("node") != node:
            raise ValueError("not a plan of this node")
        return PlanRecord(node, list(doc["steps"]), str(doc["fix_sha256"]), str(doc["rollback_sha256"]),
                          sorted({int(i) for i in doc.get("applied") or []}))
    except (ValueError, KeyError, TypeError) as exc:
        raise Untrusted(f"{p}: not a preflight fix plan ({exc})") from None


def verified_rollback(out_dir: str, rec: PlanRecord) -> Shell:
    """The rollback script's text, only when it is byte for byte the one recorded with the plan."""
    p = paths(out_dir, rec.node)["rollback.sh"]
    raw = read_trusted(p)
    if digest(raw) != rec.rollback_sha256:
        raise Untrusted(f"{p}: sha256 {digest(raw)[:16]}... is not the {rec.rollback_sha256[:16]}... recorded "
                        "when the plan was made: refused")
    # trust boundary: these bytes are the script preflight built with sh() and recorded; the digest
    # above proves nothing else is run
    return Shell(raw.decode("utf-8", "surrogateescape"))
