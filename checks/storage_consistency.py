"""storage.consistency — the data files are identical on every node (names, sizes, contents).

What it checks: for each `paths.data` entry, a manifest per node: every file's relative path and
size (down to `max_depth`, at most `max_files` files, sorted by name), its inode and change time,
and the filesystem id (`stat -f`). Nodes whose manifests have the same filesystem id and the same
inode, size, mtime and ctime for every file see the same filesystem (a shared mount): that is said
and the files are hashed once. Otherwise the files present with one size everywhere are hashed on
one node per filesystem: the whole file when it is at most `small_file_bytes`, else a sample of
`sample_blocks` blocks of `sample_block_bytes` (the head, the tail and evenly spaced blocks
between); `full_hash: true` hashes every byte. Only sh, find, stat, dd and sha256sum (md5sum
where sha256sum is missing) run on the node, never its python. Missing files, size differences and
content differences are named by node and file; the nodes that differ from the majority are
blamed; with no majority nobody is blamed and the summary lists who has what.

Why it matters: without shared storage, data copied by hand drifts, and Megatron's dataset index
cache is built only by rank 0, so the other nodes lack it or hold a stale one (docs/MIGRATION.md). Ranks
reading different bytes train on different data or crash at their first batch.

How to fix: copy the dataset from a node in the majority (`rsync -a --checksum good:/data/path/
/data/path/`), or rebuild the index cache on every node, or put the data on shared storage.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping

from preflight.checkapi import (Policy, ClusterContext, CommandOutput, Finding, ParseError, Probe, Status, cmd, passed,
                                require_ok, sh)
from preflight.checkhelpers import Shell, worst, q
from preflight.net.blame import consensus

ID = "storage.consistency"
SCOPE = "cluster"
POLICY = Policy(
    disruptive=True,
    cost="heavy",
    node_params=("timeout_s",),  # a slow mount on one node may need longer
)
# What to do with a fail/warn (preflight/actions.py).
ACTIONS = {"": ("fix_config", "mounts and data sets that differ between nodes: fix the mount or re-sync")}
DEFAULTS: dict[str, Any] = {
    "max_depth": 4,
    "max_files": 1000,
    "small_file_bytes": 1 << 20,      # at most this: hash the whole file
    "sample_block_bytes": 64 << 10,   # larger: hash sample_blocks blocks of this size
    "sample_blocks": 8,
    "full_hash": False,
    "hash_shared": True,              # a shared filesystem is still hashed once (proves it reads)
    "timeout_s": 30,
    "hash_timeout_s": 120,
}
MANIFEST, HASH = "manifest_", "hash_"


@dataclass(frozen=True)
class FileStat:
    rel: str
    size: int
    inode: int
    mtime: str
    ctime: str


@dataclass(frozen=True)
class PathManifest:
    path: str
    state: str = "ok"          # ok | missing
    fsid: str = ""
    files: tuple[FileStat, ...] = ()
    truncated: bool = False

    @property
    def identity(self) -> tuple:
        """Same filesystem: same fsid and, per file, the same inode, size, mtime and ctime."""
        return (self.fsid, tuple((f.rel, f.inode, f.size, f.mtime, f.ctime) for f in self.files))


@dataclass(frozen=True)
class Facts:
    manifests: tuple[PathManifest, ...]


# ---------------------------------------------------------------- round 1: stat-only manifests

def _manifest_cmd(path: str, params: Mapping[str, Any]) -> Shell:
    depth, limit = int(params["max_depth"]), int(params["max_files"]) + 1
    return sh("; ".join([
        "p={path}", "printf 'path=%s\\n' \"$p\"", "echo limit={limit}",
        '[ -d "$p" ] || {{ echo state=missing; exit 0; }}',
        "LC_ALL=C stat -f -c 'fsid=%i' -- \"$p\" || exit $?",
        # sorted by name so a truncated listing is the same prefix on every node
        "LC_ALL=C find \"$p\" -mindepth 1 -maxdepth {depth} -type f -printf '%s\\t%i\\t%T@\\t%C@\\t%P\\n' 2>/dev/null "
        "| LC_ALL=C sort -t \"$(printf '\\t')\" -k 5 | head -n {limit} | sed 's/^/f\\t/'",
    ]), path=path, limit=limit, depth=depth)


def probes(node, params) -> dict[str, Probe]:
    return {f"{MANIFEST}{i}": cmd(_manifest_cmd(p, params), timeout=params.get("timeout_s"))
            for i, p in enumerate(node.data_paths)}


def _parse_manifest(name: str, out: CommandOutput) -> PathManifest:
    require_ok(out, f"manifest probe {name}")
    if out.rc != 0:
        raise ParseError(f"{name}: manifest probe failed with rc {out.rc}", out.stderr or out.stdout)
    kv, files = {}, []
    for line in out.stdout.splitlines():
        if line.startswith("f\t"):
            parts = line.split("\t", 5)
            if len(parts) != 6 or not (parts[1].isdigit() and parts[2].isdigit()):
                raise ParseError(f"{name}: unreadable manifest line", line)
            files.append(FileStat(parts[5], int(parts[1]), int(parts[2]), parts[3], parts[4]))
        elif "=" in line:
            k, _, v = line.partition("=")
            kv.setdefault(k, v)
    if "path" not in kv:
        raise ParseError(f"{name}: no path line", out.stdout)
    limit = int(kv.get("limit", "0") or 0)
    truncated = bool(limit) and len(files) >= limit
    return PathManifest(kv["path"], kv.get("state", "ok"), kv.get("fsid", ""),
                        tuple(files[: limit - 1] if truncated else files), truncated)


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    names = sorted((n for n in outputs if n.startswith(MANIFEST)), key=lambda n: int(n[len(MANIFEST):]))
    return Facts(tuple(_parse_manifest(n, outputs[n]) for n in names))


# ---------------------------------------------------------------- round 2: hashes where needed

def sample_blocks(size: int, params: Mapping[str, Any]) -> list[int] | None:
    """Block indices (of sample_block_bytes) to hash; None = the whole file. Head and tail included."""
    if params.get("full_hash") or size <= int(params["small_file_bytes"]):
        return None
    bs, n = int(params["sample_block_bytes"]), max(2, int(params["sample_blocks"]))
    last = (size - 1) // bs
    return sorted({round(i * last / (n - 1)) for i in range(n)})


def _hash_cmd(path: str, files: list[tuple[str, list[int] | None]], params: Mapping[str, Any]) -> Shell:
    """One probe per data path: reads `blocks<TAB>relpath` lines (each one quoted word of printf, so
    a node's file name is data, never shell text), prints `relpath<TAB>digest`."""
    bs = int(params["sample_block_bytes"])
    lines = [f"{'all' if b is None else ' '.join(map(str, b))}\t{rel}" for rel, b in files]
    return sh("cd -- {path} || exit 2; H=sha256sum; command -v sha256sum >/dev/null 2>&1 || H=md5sum; echo algo=$H; "
              "T=$(printf '\\t'); printf '%s\\n' {lines} | while IFS=\"$T\" read -r b rel; do "
              "if [ ! -r \"$rel\" ]; then printf 'h\\t%s\\tunreadable\\n' \"$rel\"; continue; fi; "
              "if [ \"$b\" = all ]; then d=$($H < \"$rel\"); "
              "else d=$(for k in $b; do dd if=\"$rel\" bs={bs} skip=$k count=1 2>/dev/null; done | $H); fi; "
              "printf 'h\\t%s\\t%s\\n' \"$rel\" \"${{d%% *}}\"; done",
              path=path, lines=lines, bs=bs)


def _groups(ctx: ClusterContext, index: int) -> dict[tuple, list[str]]:
    """Nodes grouped by filesystem identity of data path `index`; missing paths left out."""
    groups: dict[tuple, list[str]] = defaultdict(list)
    for node in sorted(ctx.facts):
        m = _manifest(ctx, node, index)
        if m is not None and m.state == "ok":
            groups[m.identity].append(node)
    return dict(groups)


def _manifest(ctx: ClusterContext, node: str, index: int) -> PathManifest | None:
    facts = ctx.facts.get(node, {}).get(ID)
    return facts.manifests[index] if facts is not None and index < len(facts.manifests) else None


def _to_hash(ctx: ClusterContext, index: int, shared: bool) -> list[str]:
    """Files worth hashing: on a shared filesystem all; else those with one size on >= 2 nodes."""
    sizes: dict[str, set[int]] = defaultdict(set)
    count: dict[str, int] = defaultdict(int)
    for node in ctx.facts:
        m = _manifest(ctx, node, index)
        for f in (m.files if m else ()):
            sizes[f.rel].add(f.size)
            count[f.rel] += 1
    return sorted(r for r in sizes if shared or (len(sizes[r]) == 1 and count[r] >= 2))


def _n_paths(ctx: ClusterContext) -> int:
    return max((len(f[ID].manifests) for f in ctx.facts.values() if ID in f), default=0)


def plan(ctx: ClusterContext) -> dict[str, dict[str, Probe]]:
    p = {**DEFAULTS, **ctx.params}
    out: dict[str, dict[str, Probe]] = defaultdict(dict)
    for i in range(_n_paths(ctx)):
        groups = _groups(ctx, i)
        shared = len(groups) == 1 and len(next(iter(groups.values()), [])) > 1
        if (shared and not p["hash_shared"]) or not groups:
            continue
        rels = set(_to_hash(ctx, i, shared))
        for nodes in groups.values():
            rep = nodes[0]  # one node per filesystem identity reads the bytes
            m = _manifest(ctx, rep, i)
            files = [(f.rel, sample_blocks(f.size, p)) for f in m.files if f.rel in rels]
            if files:
                out[rep][f"{HASH}{i}"] = cmd(_hash_cmd(m.path, files, p), timeout=p["hash_timeout_s"])
    return dict(out)


def parse_hashes(out: CommandOutput | None) -> tuple[str, dict[str, str]]:
    """(algorithm, relpath -> digest or 'unreadable')."""
    out = require_ok(out, "hash probe")
    if out.rc != 0:
        raise ParseError(f"hash probe failed with rc {out.rc}", out.stderr or out.stdout)
    algo, digests = "", {}
    for line in out.stdout.splitlines():
        if line.startswith("algo="):
            algo = line[5:]
        elif line.startswith("h\t"):
            _, rel, digest = line.split("\t", 2)
            digests[rel] = digest
    return algo, digests


# ---------------------------------------------------------------- evaluation

@dataclass
class PathVerdict:
    path: str
    shared_by: list[str]
    problems: dict[str, list[str]]      # node -> what is wrong there
    unresolved: list[str]               # disagreements without a majority
    notes: list[str]


def _short(digest: str) -> str:
    return digest.split(":", 1)[-1][:12]


# field -> how an outlier is described: (relpath, its value, the majority value)
MESSAGES = {
    "state": lambda rel, val, maj: f"data path {val}, present on the majority",
    "presence": lambda rel, val, maj: f"{rel} missing" if val == "missing" else f"{rel} present only on the minority",
    "size": lambda rel, val, maj: f"{rel} size {val} bytes, expected {maj}",
    "content hash": lambda rel, val, maj: f"{rel} content differs at the same size (hash {_short(val)}, majority {_short(maj)})",
}


def _vote(field: str, rel: str, values: Mapping[str, Any], v: PathVerdict) -> None:
    c = consensus(values)
    if c.agreed:
        return
    if c.majority is None:
        v.unresolved.append(f"{rel}: {field} differs with no majority ({c.describe()})")
        return
    for node, value in c.outliers.items():
        v.problems.setdefault(node, []).append(MESSAGES[field](rel, value, c.majority))


def _node_hashes(ctx: ClusterContext, i: int, groups: dict[tuple, list[str]], v: PathVerdict) -> dict[str, dict[str, str]]:
    """node -> relpath -> digest, each group's representative's digests copied to its members."""
    result: dict[str, dict[str, str]] = {}
    for nodes in groups.values():
        out = ctx.planned.get(nodes[0], {}).get(f"{HASH}{i}")
        if out is None:
            continue
        try:
            algo, digests = parse_hashes(out)
        except ParseError as exc:
            v.notes.append(f"hashes from {nodes[0]} unreadable: {exc.message}")
            continue
        for n in nodes:
            result[n] = {rel: f"{algo}:{d}" for rel, d in digests.items()}
    return result


def judge_path(ctx: ClusterContext, i: int) -> PathVerdict:
    groups = _groups(ctx, i)
    path = next((m.path for n in ctx.facts if (m := _manifest(ctx, n, i)) is not None), f"data path #{i}")
    shared = len(groups) == 1 and len(next(iter(groups.values()), [])) > 1
    v = PathVerdict(path, next(iter(groups.values())) if shared else [], {}, [], [])
    manifests = {n: m for n in sorted(ctx.facts) if (m := _manifest(ctx, n, i)) is not None}
    _vote("state", "(the data path)", {n: ("present" if m.state == "ok" else "missing") for n, m in manifests.items()}, v)
    present = {n: {f.rel: f for f in m.files} for n, m in manifests.items() if m.state == "ok"}
    if any(m.truncated for m in manifests.values()):
        v.notes.append(f"listing cut at max_files={ctx.params.get('max_files', DEFAULTS['max_files'])}; files past it not compared")
    hashes = _node_hashes(ctx, i, groups, v)
    for rel in sorted(set().union(*[set(x) for x in present.values()]) if present else ()):
        _vote("presence", rel, {n: ("present" if rel in files else "missing") for n, files in present.items()}, v)
        have = {n: files[rel].size for n, files in present.items() if rel in files}
        _vote("size", rel, have, v)
        if len(set(have.values())) == 1:
            _vote("content hash", rel, {n: h[rel] for n, h in hashes.items() if rel in h and n in have}, v)
    return v


def _fix(path: str, good: list[str]) -> str:
    src = good[0] if good else "<a node in the majority>"
    return (f"Copy the data from a node in the majority: `rsync -a --checksum {q(src + ':' + path + '/')} {q(path + '/')}` "
            "(or rebuild the dataset index cache on every node).")


def evaluate(ctx: ClusterContext) -> list[Finding]:
    n_paths = _n_paths(ctx)
    if n_paths == 0:
        return [Finding(Status.SKIP, "no paths.data in the inventory (or no node returned a manifest)")]
    verdicts = [judge_path(ctx, i) for i in range(n_paths)]
    per_node: dict[str, list[tuple[str, str]]] = defaultdict(list)
    parts, notes = [], []
    for v in verdicts:
        good = [n for n in sorted(ctx.facts) if n not in v.problems]
        for node, items in v.problems.items():
            src = good or [n for n in sorted(ctx.facts) if n != node]
            per_node[node] += [(f"{v.path}: {item}", _fix(v.path, src)) for item in items]
        parts += [f"{v.path}: {u}" for u in v.unresolved]
        notes += [f"{v.path}: {n}" for n in v.notes]
        if v.shared_by:
            notes.append(f"{v.path}: all {len(v.shared_by)} nodes see the same filesystem (same fsid and inodes); hashed once")
    details = {"paths": [{"path": v.path, "shared_by": v.shared_by, "problems": v.problems,
                          "unresolved": v.unresolved, "notes": v.notes} for v in verdicts]}
    missing = sorted(n for n in ctx.nodes if n not in ctx.facts or ID not in ctx.facts[n])
    if missing:
        notes.append(f"no manifest from {', '.join(missing)} (see their errors); not compared")
    blamed = [Finding(Status.FAIL, f"{node}: " + "; ".join(w for w, _ in items[:10]) + (f"; +{len(items) - 10} more" if len(items) > 10 else ""),
                      {"files": [w for w, _ in items]}, items[0][1], node=node)
              for node, items in sorted(per_node.items())]
    status = worst([Status.FAIL] * bool(parts) + [f.status for f in blamed])
    tail = (" (" + "; ".join(notes) + ")") if notes else ""
    if status is Status.PASS:
        counts = ", ".join(f"{v.path}" for v in verdicts)
        return [passed(f"data identical on {len(ctx.facts)} nodes: {counts}{tail}", **details)]
    text = "; ".join(parts + [f.summary for f in blamed]) + tail
    return [Finding(status, text, details, "Make the data identical on every node: `rsync -a --checksum <good node>:<path>/ <path>/`, or use shared storage.")] + blamed
