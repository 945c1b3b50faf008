"""Megatron checkpoint trees, read from what a node's shell prints (pure; see docs/FORMATS.md §7.1).

Megatron-LM's own layout (megatron/training/checkpointing.py, `get_checkpoint_name` and
`get_checkpoint_tracker_filename`; megatron/core/dist_checkpointing/core.py):

    <load>/latest_checkpointed_iteration.txt     the iteration number, or the word `release`
    <load>/iter_0001000/                         'iter_{:07d}'.format(iteration) (`release/` for release)
        mp_rank_00/model_optim_rng.pt            --ckpt-format torch, tp only
        mp_rank_00_001/...                       tp rank 00, pp rank 001 (or ep rank 001 without pp)
        mp_rank_00_001_002/...                   tp, pp and ep ranks
        metadata.json                            distributed format (torch_dist, zarr): CheckpointingConfig
        .metadata  common.pt  __0_0.distcp       torch_dist: torch.distributed.checkpoint's files

The name has `_PPP` only when pipeline parallelism is used and `_EEE` only when expert parallelism is,
so `mp_rank_00_001` is either pp rank 1 or ep rank 1: Megatron itself tries both readings when it
looks for rank 0 (`find_checkpoint_rank_0`). `saved_layout` reads it the way the job would.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..checkapi import Shell, sh
from ..checkhelpers import seq

TRACKER = "latest_checkpointed_iteration.txt"
RANK_DIR = re.compile(r"^mp_rank_(\d{2,})(?:_(\d{3,}))?(?:_(\d{3,}))?$")
STATE_MARK, LIST_MARK, META_MARK, NOITER_MARK = "@@ckpt-state", "@@ckpt-listing", "@@ckpt-metadata", "@@ckpt-noiter"
DIST_FILES = ("metadata.json", ".metadata", "common.pt")  # any of them: a distributed checkpoint


def iteration_dir(tracker: str) -> str | None:
    """Megatron's directory for a tracker value: 'iter_{:07d}' or 'release'; None when unreadable
    (Megatron's read_metadata then exits with 'Invalid metadata file')."""
    t = tracker.strip()
    if t == "release":
        return "release"
    return f"iter_{int(t):07d}" if t.isdigit() else None


def _kind(var: str) -> str:
    """Shell text classifying the path in variable `var` (a fixed name, not a value)."""
    return (f'if [ -L "${var}" ] && [ ! -e "${var}" ]; then echo broken; elif [ -d "${var}" ]; then echo dir; '
            f'elif [ -e "${var}" ]; then echo file; else echo missing; fi')


def _const(text: str) -> Shell:
    """A line of this module's own shell text (no value in it), braces kept literal."""
    return sh(text.replace("{", "{{").replace("}", "}}"))


def state_command(load: str, save: str | None) -> Shell:
    """Round 1, every node: what the load directory is, its tracker, and where save would write."""
    lines = [sh("L={load}", load=load), sh("echo {m}", m=STATE_MARK), _const(f'echo "load_kind=$({_kind("L")})"'),
             _const('[ -r "$L" ] && [ -x "$L" ] && echo load_readable=1 || echo load_readable=0'),
             _const('echo "load_id=$(stat -f -c %i -- "$L" 2>/dev/null):$(stat -L -c %d:%i -- "$L" 2>/dev/null)"'),
             sh('T="$L"/{t}', t=TRACKER),
             _const('if [ -f "$T" ]; then if [ -r "$T" ]; then echo tracker_state=present; '
                    "printf 'tracker=%s\\n' \"$(head -c 64 \"$T\" | tr -d '\\n\\r')\"; "
                    "else echo tracker_state=unreadable; fi; else echo tracker_state=missing; fi")]
    if save:
        lines += [sh("S={save}", save=save), _const(f'echo "save_kind=$({_kind("S")})"'),
                  _const('p="$S"; while [ ! -e "$p" ] && [ "$p" != / ]; do p=$(dirname -- "$p"); done'),
                  _const('echo "save_at=$p"'), _const('[ -w "$p" ] && echo save_writable=1 || echo save_writable=0'),
                  _const('echo "save_id=$(stat -f -c %i -- "$p" 2>/dev/null):$(stat -L -c %d:%i -- "$p" 2>/dev/null)"'),
                  _const("df -PB1 -- \"$p\" 2>/dev/null | awk 'NR==2{print \"save_free=\" $4}'")]
    return seq(lines, "\n")


def listing_command(load: str, iter_dir: str, limit: int = 100000) -> Shell:
    """Round 2, one node per storage group: the saved iteration's entries (two levels) and metadata.json."""
    return seq([
        sh("D={d}", d=load.rstrip("/") + "/" + iter_dir),
        sh('if [ ! -d "$D" ]; then echo {m}; exit 0; fi', m=NOITER_MARK),
        sh("echo {m}", m=LIST_MARK),
        sh("find \"$D\" -mindepth 1 -maxdepth 2 -printf '%y %s %P\\n' 2>/dev/null | head -n {n}", n=int(limit)),
        sh('if [ -f "$D/metadata.json" ]; then echo {m}; head -c 4096 "$D/metadata.json"; echo; fi', m=META_MARK),
    ], "\n")


@dataclass(frozen=True)
class NodeState:
    """Round 1 on one node."""

    load_kind: str  # dir | file | missing | broken
    load_readable: bool
    load_id: str
    tracker_state: str  # present | missing | unreadable
    tracker: str | None
    save_kind: str | None = None
    save_at: str | None = None
    save_writable: bool | None = None
    save_id: str | None = None
    save_free: int | None = None


def parse_state(text: str) -> NodeState:
    head, sep, body = text.partition(STATE_MARK)
    if not sep:
        raise ValueError("checkpoint state probe: no output marker (cut short)")
    kv = dict(line.split("=", 1) for line in body.splitlines() if "=" in line)
    if "load_kind" not in kv or "tracker_state" not in kv:
        raise ValueError("checkpoint state probe: load_kind/tracker_state missing")
    free = kv.get("save_free", "")
    return NodeState(kv["load_kind"], kv.get("load_readable") == "1", kv.get("load_id", ""), kv["tracker_state"],
                     kv.get("tracker") if kv["tracker_state"] == "present" else None,
                     kv.get("save_kind"), kv.get("save_at"),
                     (kv["save_writable"] == "1") if "save_writable" in kv else None,
                     kv.get("save_id"), int(free) if free.isdigit() else None)


@dataclass(frozen=True)
class Saved:
    """One storage group's copy of the saved iteration."""

    present: bool
    ranks: frozenset[tuple[int, ...]] = frozenset()  # (tp,), (tp, x) or (tp, pp, ep) from mp_rank_* names
    files: int = 0
    size: int = 0  # bytes of the files two levels down
    dist_files: tuple[str, ...] = ()
    metadata: dict = field(default_factory=dict)
    metadata_error: str | None = None

    @property
    def format(self) -> str:
        if self.metadata.get("sharded_backend"):
            return str(self.metadata["sharded_backend"])
        if self.dist_files:
            return "torch_dist"
        return "torch" if self.ranks else "unknown"


def parse_listing(text: str) -> Saved:
    if NOITER_MARK in text:
        return Saved(False)
    _, sep, body = text.partition(LIST_MARK)
    if not sep:
        raise ValueError("checkpoint listing: no output marker (cut short)")
    listing, _, meta_text = body.partition(META_MARK)
    ranks, files, size, dist = set(), 0, 0, []
    for line in listing.splitlines():
        parts = line.split(" ", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        kind, nbytes, rel = parts
        top = rel.split("/", 1)[0]
        if kind == "d" and "/" not in rel and (m := RANK_DIR.match(top)):
            ranks.add(tuple(int(g) for g in m.groups() if g is not None))
        if kind == "f":
            files += 1
            size += int(nbytes)
            if "/" not in rel and rel in DIST_FILES:
                dist.append(rel)
    meta, err = {}, None
    if sep and meta_text.strip():
        try:
            loaded = json.loads(meta_text.strip())
            meta = loaded if isinstance(loaded, dict) else {}
        except ValueError as exc:
            err = f"metadata.json is not JSON ({exc.msg})"
    return Saved(True, frozenset(ranks), files, size, tuple(sorted(dist)), meta, err)


@dataclass(frozen=True)
class SavedLayout:
    tp: int
    pp: int
    ep: int
    missing: tuple[str, ...] = ()  # rank directories a complete tree would have

    def label(self) -> str:
        return f"tp={self.tp} pp={self.pp}" + (f" ep={self.ep}" if self.ep > 1 else "")


def rank_dir(t: int, second: int | None = None, third: int | None = None) -> str:
    name = f"mp_rank_{t:02d}"
    if second is not None:
        name += f"_{second:03d}"
    if third is not None:
        name += f"_{third:03d}"
    return name


def saved_layout(ranks: frozenset[tuple[int, ...]], job_pp: int = 1, job_ep: int = 1) -> SavedLayout | None:
    """tp/pp/ep of a --ckpt-format torch tree from its mp_rank_* names (the union over storage groups).
    A two-part name is read as pp unless the job itself runs pp=1 with ep>1 (then it is ep)."""
    if not ranks:
        return None
    widths = {len(r) for r in ranks}
    width = max(widths)
    tp = max(r[0] for r in ranks) + 1
    if width == 1:
        pp, ep = 1, 1
        want = {(t,) for t in range(tp)}
    elif width == 2:
        second = max(r[1] for r in ranks if len(r) == 2) + 1
        pp, ep = (1, second) if (job_pp == 1 and job_ep > 1) else (second, 1)
        want = {(t, s) for t in range(tp) for s in range(second)}
    else:
        pp = max(r[1] for r in ranks if len(r) == 3) + 1
        ep = max(r[2] for r in ranks if len(r) == 3) + 1
        want = {(t, p, e) for t in range(tp) for p in range(pp) for e in range(ep)}
    have = {r for r in ranks if len(r) == width}
    missing = tuple(sorted(rank_dir(*r) for r in want - have))
    return SavedLayout(tp, pp, ep, missing)
