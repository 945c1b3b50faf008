"""storage.disk — free space and inodes at the checkpoint and data paths; the checkpoint path writable.

What it checks: on every node, for the inventory's `paths.checkpoint` and each `paths.data`, the
space and inodes free to the login user (`stat -f`, the statfs the kernel reports; `df -P` names the
mount). At the checkpoint path the defaults ask for at least 50 GiB and 10% free (parameters
`min_free_gib`, `min_free_pct`, `min_free_inodes_pct`); data paths warn below `data_min_free_gib` /
`data_min_free_pct` (Megatron writes its dataset index cache next to the data). The checkpoint
directory must be writable by the login user: a probe file is created there with `mktemp` and
removed again by a shell trap, even when the write fails or the probe is killed at its timeout.
A read-only mount fails. A path whose statfs hangs (a stale NFS mount) ends at the probe timeout as
`error`; it never hangs the run.

Why it matters: a job that fills the checkpoint disk dies at its first save, hours in; a read-only
or root-owned checkpoint directory fails the same way. Free space is reported in `details.metrics`
(`free_space` in bytes, label path) for trends.

How to fix: free space (`du -sh <path>/* | sort -h`, remove old checkpoints) or point
`paths.checkpoint` at a larger filesystem; `mount -o remount,rw <mount point>` for a read-only mount;
`chown <user> <path>` when the login user cannot write; `umount -f -l <mount point>` and remount a
stale network mount.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from preflight.checkapi import Policy, CommandOutput, Finding, Metric, ParseError, Probe, Status, cmd, passed, require_ok, sh
from preflight.checkhelpers import Shell, first_line, graded, q

ID = "storage.disk"
SCOPE = "node"
POLICY = Policy(trend_metric=("free_space", False))
# What to do with a fail/warn (preflight/actions.py).
ACTIONS = {
    "io_error": ("replace_hardware", "a disk that fails writes with EIO"),
    "read_only": ("fix_config", "a read-only mount: remount rw (and read dmesg for why it was remounted)"),
    "low_space": ("monitor", "space running out: clean up before the next checkpoint"),
    "": ("fix_config", "checkpoint path missing or not writable: mount, permissions"),
}
# The OS's own error text (strerror, as stat/touch print it) -> problem in ACTIONS.
ERRNO_PROBLEMS: tuple[tuple[str, str], ...] = (("Input/output error", "io_error"), ("I/O error", "io_error"))
DEFAULTS: dict[str, Any] = {
    "min_free_gib": 50,          # checkpoint path
    "min_free_pct": 10,
    "min_free_inodes_pct": 5,
    "data_min_free_gib": 1,      # data paths (index cache written there)
    "data_min_free_pct": 1,
    "data_min_free_inodes_pct": 1,
    "write_test": True,
    "timeout_s": 30,             # a stale mount's statfs hangs; end it here, as error
}
GIB = 1 << 30
PROBE_PREFIX = "disk_"
WRITE_PROBE = "disk_write"
PROBE_FILE = ".preflight-probe.XXXXXX"

# role -> (free GiB param, free % param, free inode % param, status when below)
LIMITS = {
    "checkpoint": ("min_free_gib", "min_free_pct", "min_free_inodes_pct", Status.FAIL),
    "data": ("data_min_free_gib", "data_min_free_pct", "data_min_free_inodes_pct", Status.WARN),
}
# `df -P -B1` row: "Filesystem 1-blocks Used Available Capacity Mounted on"; the source may hold spaces.
DF_ROW = re.compile(r"^df=(?P<fs>.+?)\s+\d+\s+\d+\s+\d+\s+(?:\d+%|-)\s+(?P<mount>/.*)$")


@dataclass(frozen=True)
class PathSpace:
    path: str
    role: str                    # checkpoint | data
    error: str | None = None     # statfs failed: the tool's first stderr line
    missing: bool = False
    total_bytes: int = 0
    avail_bytes: int = 0         # free to an unprivileged user (f_bavail)
    total_inodes: int = 0        # 0 where the filesystem does not count inodes (btrfs, many NFS)
    free_inodes: int = 0
    fs_type: str = ""
    source: str = ""             # df's Filesystem column
    mount: str = ""

    @property
    def free_pct(self) -> float:
        return 100.0 * self.avail_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def inodes_pct(self) -> float | None:
        return 100.0 * self.free_inodes / self.total_inodes if self.total_inodes else None


@dataclass(frozen=True)
class Facts:
    paths: tuple[PathSpace, ...]
    checkpoint: str | None
    writable: bool | None        # None: not tested (no checkpoint path, or write_test off)
    write_error: str | None = None
    read_only: bool = False


def _space_cmd(path: str) -> Shell:
    # one probe per path: the path echoed (parse is pure and sees outputs only), statfs, df's row
    return sh("printf 'path=%s\\n' {p}; LC_ALL=C stat -f -c 'statfs=%S %b %a %c %d %T' -- {p} || exit $?; "
              "LC_ALL=C df -P -B1 -- {p} 2>/dev/null | tail -n +2 | sed 's/^/df=/'", p=path)


def _write_cmd(path: str) -> Shell:
    # The EXIT trap removes the probe file on every way out; TERM/INT/HUP (the remote timeout) exit through it.
    return sh("printf 'path=%s\\n' {p}; f=$(LC_ALL=C mktemp -- {tmpl}) || exit 3; "
              "trap 'rm -f -- \"$f\"' EXIT; trap 'exit 143' INT TERM HUP; "
              "printf preflight > \"$f\" || exit 4; echo writable",
              p=path, tmpl=f"{path.rstrip('/') or '/'}/{PROBE_FILE}")


def probes(node, params) -> dict[str, Probe]:
    t = params.get("timeout_s")
    out: dict[str, Probe] = {}
    if node.checkpoint_path:
        out[f"{PROBE_PREFIX}checkpoint"] = cmd(_space_cmd(node.checkpoint_path), timeout=t)
        if params.get("write_test", True):
            out[WRITE_PROBE] = cmd(_write_cmd(node.checkpoint_path), timeout=t)
    for i, path in enumerate(node.data_paths):
        out[f"{PROBE_PREFIX}data_{i}"] = cmd(_space_cmd(path), timeout=t)
    return out


def _fields(text: str) -> dict[str, str]:
    return {k: v for k, _, v in (line.partition("=") for line in text.splitlines()) if k in ("path", "statfs")}


def _unless_ran(out: CommandOutput, what: str) -> None:
    """A probe that timed out (a stale mount's statfs hangs) or never ran is an error, not a fail;
    a non-zero rc is data and is read by the caller."""
    if out.timed_out or out.error or out.rc is None:
        require_ok(out, what)
        raise ParseError(f"{what}: no exit status", out.stderr)


def _parse_space(name: str, out: CommandOutput) -> PathSpace:
    _unless_ran(out, f"statfs probe {name}")
    role = "checkpoint" if name.endswith("checkpoint") else "data"
    f = _fields(out.stdout)
    if "path" not in f:
        raise ParseError(f"{name}: no path line", out.stdout + out.stderr)
    path = f["path"]
    if out.rc != 0:
        err = first_line(out.stderr) or f"rc {out.rc}"
        return PathSpace(path, role, error=err, missing="No such file or directory" in out.stderr)
    parts = f.get("statfs", "").split(None, 5)
    if len(parts) < 5 or not all(p.isdigit() for p in parts[:5]):
        raise ParseError(f"{name}: unreadable stat -f line for {path}", out.stdout)
    bsize, blocks, bavail, files, ffree = (int(p) for p in parts[:5])
    row = next((m for m in map(DF_ROW.match, out.stdout.splitlines()) if m), None)
    return PathSpace(path, role, total_bytes=bsize * blocks, avail_bytes=bsize * bavail, total_inodes=files,
                     free_inodes=ffree, fs_type=parts[5] if len(parts) > 5 else "",
                     source=row["fs"] if row else "", mount=row["mount"] if row else "")


def _parse_write(out: CommandOutput | None) -> tuple[bool | None, str | None, bool]:
    if out is None:
        return None, None, False
    _unless_ran(out, "checkpoint write test")
    if out.rc == 0 and "writable" in out.stdout:
        return True, None, False
    err = first_line(out.stderr) or f"rc {out.rc}"
    return False, err, "Read-only file system" in out.stderr


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    spaces = tuple(_parse_space(n, o) for n, o in sorted(outputs.items())
                   if n.startswith(PROBE_PREFIX) and n != WRITE_PROBE)
    ckpt = next((s.path for s in spaces if s.role == "checkpoint"), None)
    writable, err, ro = _parse_write(outputs.get(WRITE_PROBE))
    return Facts(spaces, ckpt, writable, err, ro)


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def _where(s: PathSpace) -> str:
    return f" on {s.source} mounted on {s.mount}" if s.mount else ""


def _space_findings(s: PathSpace, params: Mapping[str, Any], user: str) -> list[Finding]:
    if s.error:
        if s.role == "data":
            return []  # storage.data reports a missing or unreadable data path, once
        fix = f"Create it: `mkdir -p {q(s.path)} && chown {user} {q(s.path)}`." if s.missing else \
            f"Check the mount and permissions: `ls -ld {q(s.path)}`; `stat -f {q(s.path)}`."
        return [Finding(Status.FAIL, f"checkpoint path {s.path}: {s.error}", {"path": s.path}, fix,
                        action=graded(ACTIONS, *_os_problems(s.error)))]
    gib_key, pct_key, ino_key, status = LIMITS[s.role]
    need_b, need_pct, need_ino = params[gib_key] * GIB, params[pct_key], params[ino_key]
    problems = []
    if s.avail_bytes < need_b or s.free_pct < need_pct:
        problems.append(f"{_gib(s.avail_bytes)} free ({s.free_pct:.1f}%), expected >= {params[gib_key]} GiB and >= {need_pct}%")
    if s.inodes_pct is not None and s.inodes_pct < need_ino:
        problems.append(f"{s.free_inodes} inodes free ({s.inodes_pct:.1f}%), expected >= {need_ino}%")
    if not problems:
        return []
    return [Finding(status, f"{s.role} path {s.path}{_where(s)}: " + "; ".join(problems),
                    {"path": s.path, "avail_bytes": s.avail_bytes, "free_inodes": s.free_inodes},
                    f"Free space at {s.path} (`du -sh {q(s.path)}/* | sort -h`; remove old checkpoints) "
                    f"or point paths.{s.role} at a larger filesystem.", action=graded(ACTIONS, "low_space"))]


def _write_findings(facts: Facts, user: str) -> list[Finding]:
    if facts.writable is not False or facts.checkpoint is None:
        return []
    path = facts.checkpoint
    if facts.read_only:
        fix = f"Remount read-write (`mount -o remount,rw $(df -P {q(path)} | tail -1 | awk '{{print $6}}')`) or point paths.checkpoint at a writable filesystem."
        what = "is on a read-only mount"
    else:
        fix = f"Give the login user write access: `chown {user} {q(path)}` (or `chmod u+w {q(path)}`)."
        what = f"is not writable by {user}"
    return [Finding(Status.FAIL, f"checkpoint path {path} {what}: {facts.write_error}",
                    {"path": path, "error": facts.write_error, "read_only": facts.read_only}, fix,
                    action=graded(ACTIONS, "read_only" if facts.read_only else None, *_os_problems(facts.write_error)))]


def _os_problems(error: str | None) -> list[str]:
    return [p for text, p in ERRNO_PROBLEMS if text in (error or "")]


def _metrics(facts: Facts) -> list[dict[str, Any]]:
    out = []
    for s in facts.paths:
        if s.error is None:
            out.append(Metric("free_space", s.avail_bytes, "bytes", {"path": s.path, "role": s.role}).to_dict())
            out.append(Metric("free_space_pct", round(s.free_pct, 2), "%", {"path": s.path, "role": s.role}).to_dict())
            if s.inodes_pct is not None:
                out.append(Metric("free_inodes", s.free_inodes, "", {"path": s.path, "role": s.role}).to_dict())
    return out


def evaluate(facts: Facts, params: Mapping[str, Any], node) -> list[Finding]:
    if not facts.paths:
        return [Finding(Status.SKIP, "no paths.checkpoint or paths.data in the inventory for this node")]
    user = (node.user if node is not None and node.user else "$USER")
    findings = [f for s in facts.paths for f in _space_findings(s, params, user)] + _write_findings(facts, user)
    metrics = _metrics(facts)
    if not findings:
        measured = ", ".join(f"{s.path} {_gib(s.avail_bytes)} free ({s.free_pct:.0f}%)" for s in facts.paths if not s.error)
        wrote = "; checkpoint writable" if facts.writable else ""
        return [passed((measured or "nothing measured") + wrote, metrics=metrics)]
    return [Finding(f.status, f.summary, {**f.details, "metrics": metrics}, f.remediation, action=f.action)
            for f in findings]
