"""storage.data — every data path exists and is readable by the login user; Megatron datasets complete.

What it checks: on every node, for each `paths.data` entry, that the path exists, is readable and
(for a directory) traversable by the user preflight logs in as; that no file or directory below it
(down to `max_depth` levels) is unreadable; that no symbolic link is broken; and that every Megatron
dataset `.bin` has its `.idx` and every `.idx` its `.bin`. A data path may also be a Megatron prefix
(`/data/gpt/my_text_document` standing for `my_text_document.bin` + `.idx`). The search is bounded
(`max_depth`, `max_entries`); a path whose stat hangs (a stale NFS mount) ends at the probe timeout
as `error` and never hangs the run.

Why it matters: without shared storage, datasets copied by hand miss files on some nodes; a
missing `.idx` or a root-only directory makes the data loader of some ranks fail after the model
was built and HCCL initialised, and the other ranks hang until the HCCL timeout (docs/MIGRATION.md,
"Data and storage").

How to fix: copy the missing file from a good node (`rsync -a good:/data/path/ /data/path/`),
give the login user read access (`chmod -R a+rX <path>` or `setfacl -R -m u:<user>:rX <path>`),
repair or remove broken links (`find <path> -xtype l`), and remount a stale network mount.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from preflight.checkapi import Policy, CommandOutput, Finding, ParseError, Probe, Status, cmd, passed, require_ok, sh
from preflight.checkhelpers import Shell, q

ID = "storage.data"
SCOPE = "node"
POLICY = Policy(
    where="job",  # on a node with a container: inside the job's container
)
# What to do with a fail/warn (preflight/actions.py).
ACTIONS = {"": ("fix_config", "unreadable or missing data paths: mount, permissions")}
DEFAULTS: dict[str, Any] = {"max_depth": 3, "max_entries": 20000, "max_unreadable": 20, "timeout_s": 30}
PROBE_PREFIX = "data_"
PAIR = {".bin": ".idx", ".idx": ".bin"}
BROKEN = {"N", "L"}  # find %Y: N = target does not exist, L = symlink loop


@dataclass(frozen=True)
class DataPath:
    path: str
    state: str = "ok"                  # ok | missing | broken_link
    kind: str = ""                     # dir | file | prefix (Megatron prefix: <path>.bin / <path>.idx)
    readable: bool = True
    traversable: bool = True
    bins: tuple[str, ...] = ()         # relative paths of .bin files (or their symlinks to files)
    idxs: tuple[str, ...] = ()
    broken_links: tuple[str, ...] = ()
    unreadable: tuple[str, ...] = ()
    truncated: bool = False            # max_entries reached: pairs judged on what was listed


@dataclass(frozen=True)
class Facts:
    paths: tuple[DataPath, ...]


def _cmd(path: str, params: Mapping[str, Any]) -> Shell:
    depth, limit, bad = int(params["max_depth"]), int(params["max_entries"]) + 1, int(params["max_unreadable"]) + 1
    return sh("; ".join([
        "p={path}", "printf 'path=%s\\n' \"$p\"", "echo limit={limit}",
        # a Megatron prefix: the path itself is absent, <path>.bin or <path>.idx exists
        'if [ ! -e "$p" ] && {{ [ -e "$p.bin" ] || [ -e "$p.idx" ]; }}; then echo kind=prefix; '
        'for e in bin idx; do [ -e "$p.$e" ] && printf \'entry\\tf\\t%s.%s\\n\' "${{p##*/}}" "$e"; '
        '[ -e "$p.$e" ] && [ ! -r "$p.$e" ] && printf \'unreadable\\tf\\t%s.%s\\n\' "${{p##*/}}" "$e"; done; exit 0; fi',
        'if [ ! -e "$p" ]; then if [ -L "$p" ]; then echo state=broken_link; else echo state=missing; fi; exit 0; fi',
        '[ -d "$p" ] && echo kind=dir || echo kind=file',
        '[ -r "$p" ] && echo read=yes || echo read=no',
        '[ -x "$p" ] && echo exec=yes || echo exec=no',
        '[ -d "$p" ] || exit 0',
        "LC_ALL=C find \"$p\" -mindepth 1 -maxdepth {depth} \\( -type l -o -name '*.bin' -o -name '*.idx' \\) "
        "-printf 'entry\\t%Y\\t%P\\n' 2>/dev/null | head -n {limit}",
        "LC_ALL=C find \"$p\" -mindepth 1 -maxdepth {depth} ! -type l \\( ! -readable -o -type d ! -executable \\) "
        "-printf 'unreadable\\t%y\\t%P\\n' 2>/dev/null | head -n {bad}",
        "exit 0",
    ]), path=path, depth=depth, limit=limit, bad=bad)


def probes(node, params) -> dict[str, Probe]:
    return {f"{PROBE_PREFIX}{i}": cmd(_cmd(p, params), timeout=params.get("timeout_s"))
            for i, p in enumerate(node.data_paths)}


def _parse_one(name: str, out: CommandOutput) -> DataPath:
    require_ok(out, f"data path probe {name}")
    if out.rc != 0:
        raise ParseError(f"{name}: probe failed with rc {out.rc}", out.stderr or out.stdout)
    kv: dict[str, str] = {}
    entries: list[tuple[str, str]] = []
    unreadable: list[str] = []
    for line in out.stdout.splitlines():
        tag, _, rest = line.partition("\t")
        if tag == "entry":
            entries.append(tuple(rest.split("\t", 1)))  # type: ignore[arg-type]
        elif tag == "unreadable":
            unreadable.append(rest.split("\t", 1)[-1])
        elif "=" in line:
            k, _, v = line.partition("=")
            kv.setdefault(k, v)
    if "path" not in kv:
        raise ParseError(f"{name}: no path line", out.stdout)
    files = [rel for kind, rel in entries if kind == "f"]
    return DataPath(
        kv["path"], kv.get("state", "ok"), kv.get("kind", ""), kv.get("read", "yes") == "yes",
        kv.get("exec", "yes") == "yes",
        tuple(sorted(f for f in files if f.endswith(".bin"))), tuple(sorted(f for f in files if f.endswith(".idx"))),
        tuple(sorted(rel for kind, rel in entries if kind in BROKEN)), tuple(unreadable),
        kv.get("limit", "").isdigit() and len(entries) >= int(kv["limit"]))


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    names = sorted((n for n in outputs if n.startswith(PROBE_PREFIX)), key=lambda n: int(n[len(PROBE_PREFIX):]))
    return Facts(tuple(_parse_one(n, outputs[n]) for n in names))


def unpaired(d: DataPath) -> list[tuple[str, str]]:
    """(present file, missing partner) for every .bin without .idx and .idx without .bin."""
    have = set(d.bins) | set(d.idxs)
    out = []
    for f in sorted(have):  # every name ends in .bin or .idx (see _parse_one): swap the last 4 chars
        partner = f[:-4] + PAIR[f[-4:]]  # (a dotfile named `.bin` has no Path suffix; this pairs it too)
        if partner not in have:
            out.append((f, partner))
    return out


def _problems(d: DataPath, user: str) -> list[tuple[str, str]]:
    """(what is wrong, how to fix it) for one data path; empty when it is fine."""
    p = q(d.path)
    if d.state == "missing":
        return [(f"data path {d.path} does not exist", f"Copy the dataset to {d.path} on this node (`rsync -a <good node>:{q(d.path + '/')} {q(d.path + '/')}`) or mount the shared filesystem.")]
    if d.state == "broken_link":
        return [(f"data path {d.path} is a broken symbolic link", f"Point the link at the dataset: `ls -l {p}` and `ln -sfn <target> {p}`.")]
    found = []
    if not d.readable or (d.kind == "dir" and not d.traversable):
        mode = "read" if not d.readable else "traverse (x)"
        found.append((f"data path {d.path} is not readable by {user}: cannot {mode} it",
                      f"Grant read access: `chmod a+rX {p}` or `setfacl -m {q(f'u:{user}:rX')} {p}`."))
    if d.unreadable:
        shown = ", ".join(d.unreadable[:5]) + (" ..." if len(d.unreadable) > 5 else "")
        found.append((f"{len(d.unreadable)} entries under {d.path} not readable by {user}: {shown}",
                      f"Grant read access below it: `chmod -R a+rX {p}` or `setfacl -R -m {q(f'u:{user}:rX')} {p}`."))
    if d.broken_links:
        found.append((f"broken symbolic links under {d.path}: {', '.join(d.broken_links[:5])}",
                      f"Repair or remove them: `find {p} -xtype l -ls`."))
    pairs = unpaired(d)
    if pairs:
        text = ", ".join(f"{have} without {miss}" for have, miss in pairs[:5])
        found.append((f"incomplete Megatron dataset under {d.path}: {text}",
                      f"Copy the missing files from a node that has them (`rsync -a <good node>:{q(d.path + '/')} {q(d.path + '/')}`) or rerun preprocessing on this node."))
    return found


def evaluate(facts: Facts, params: Mapping[str, Any], node) -> list[Finding]:
    if not facts.paths:
        return [Finding(Status.SKIP, "no paths.data in the inventory for this node")]
    user = node.user if node is not None and node.user else "the login user"
    findings = []
    for d in facts.paths:
        for what, fix in _problems(d, user):
            details = {"path": d.path, "unpaired": [list(p) for p in unpaired(d)], "broken_links": list(d.broken_links),
                       "unreadable": list(d.unreadable), "truncated": d.truncated}
            findings.append(Finding(Status.FAIL, what, details, fix))
    if findings:
        return findings
    counts = ", ".join(f"{d.path} ({len(d.bins)} .bin/.idx pairs)" if d.bins else d.path for d in facts.paths)
    note = "; listing truncated at max_entries" if any(d.truncated for d in facts.paths) else ""
    return [passed(f"readable: {counts}{note}", paths=[d.path for d in facts.paths])]
