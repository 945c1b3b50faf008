"""ckpt.resume: the checkpoint the job will resume from is there, agrees across nodes, and fits the job's layout.

What it checks, when the inventory's `job:` has `load` (the directory Megatron's `--load` reads)
and optionally `save` (its `--save`):
- `load` is a directory, readable, on every node (a path that is a file, missing, or a broken link fails
  that node); nodes that see the same filesystem (same filesystem id and directory inode) are one
  storage group, and each group's tree is listed once (shared storage: once for the whole cluster);
- `latest_checkpointed_iteration.txt` is present on every node, holds an iteration number or
  `release`, and agrees across nodes (a node without it, or with another iteration, is blamed);
- the iteration it names (`iter_NNNNNNN/`) exists in every storage group;
- the saved layout matches the job: `--ckpt-format torch` trees name their ranks
  `mp_rank_TT[_PPP[_EEE]]/`, which give the saved tensor, pipeline and expert parallel sizes (and
  show a rank directory that is missing); a distributed checkpoint (`metadata.json`, `.metadata`,
  `common.pt`) is reported with its format from metadata.json: Megatron's dist_checkpointing loads it
  into the job's own layout;
- `save` (or its nearest existing parent) is writable and has room for one more checkpoint of the
  size observed (the bytes of the saved iteration that storage group holds), per save filesystem.

Why it matters: Megatron asserts on a checkpoint saved with another layout only after every rank has
initialised and started reading (torch format: the `mp_rank_*` file of its rank is not there, or
`tensor_model_parallel_size value from checkpoint (8) is not equal to the input argument value (4)`);
a node without the tracker file silently starts from iteration 0 while the others resume, and a save
that fills the disk loses the run's last hours (docs/MIGRATION.md §7; the tree: docs/FORMATS.md §7.1).

How to fix: run with the layout the checkpoint was saved with, or reshard it first (Megatron-LM's
`tools/checkpoint/convert.py --target-tensor-parallel-size N --target-pipeline-parallel-size M`,
or save once with `--ckpt-format torch_dist`); copy the tracker file and the iteration directory to
the node named (`rsync -a`), or put `--load` on shared storage; free space or move `--save`.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping

from preflight.checkapi import Policy, ClusterContext, Finding, Probe, Status, cmd, passed, skipped
from preflight.checkhelpers import worst
from preflight.megatron import ckpt
from preflight.net.blame import consensus

ID = "ckpt.resume"
SCOPE = "cluster"
# On a node with a container: inside it. `job.load` / `job.save` are paths as the job sees them (the
# container's mounts); a bind mount keeps the host filesystem's ids, so storage groups still
# join nodes that share the storage.
POLICY = Policy(where="job", cost="light", plan_rounds=2)
# What to do with a fail/warn (preflight/actions.py).
# Every problem it finds is configuration: a save path without room or write access (free space or
# move --save), a checkpoint layout, tracker file or copy (reshard, copy or point --load elsewhere).
ACTIONS = {"": ("fix_config", "save path room and access; checkpoint layout, tracker or copy (docs/MIGRATION.md §7)")}
DEFAULTS: dict[str, Any] = {
    "headroom": 1.05,   # room needed at save: this many times the size of one observed checkpoint
    "max_entries": 100000,  # listing cap per storage group
}
STATE, LISTING = "ckpt_state", "ckpt_listing"
RESHARD = ("run with the saved layout, or reshard the checkpoint first: Megatron-LM's "
           "`tools/checkpoint/convert.py --model-type GPT --load-dir LOAD --save-dir NEW "
           "--target-tensor-parallel-size TP --target-pipeline-parallel-size PP`, then point --load at NEW")


def _load(ctx: ClusterContext) -> str | None:
    return (ctx.job or {}).get("load")


def _states(ctx: ClusterContext) -> tuple[dict[str, ckpt.NodeState], dict[str, str]]:
    """Node -> round-1 state, and node -> why it could not be read."""
    states, errors = {}, {}
    for name in sorted(ctx.nodes):
        out = ctx.planned.get(name, {}).get(STATE)
        if out is None:
            continue
        if not out.ok:
            errors[name] = out.error or ("timed out" if out.timed_out else f"rc {out.rc}: {out.stderr.strip()[:200]}")
            continue
        try:
            states[name] = ckpt.parse_state(out.stdout)
        except ValueError as exc:
            errors[name] = str(exc)
    return states, errors


def groups(states: Mapping[str, ckpt.NodeState]) -> dict[str, list[str]]:
    """Storage group (filesystem id and directory inode of `load`) -> its nodes, for readable trees."""
    out: dict[str, list[str]] = defaultdict(list)
    for name, s in sorted(states.items()):
        if s.load_kind == "dir" and s.load_readable:
            out[s.load_id or name].append(name)
    return dict(out)


def plan(ctx: ClusterContext) -> dict[str, dict[str, Probe]]:
    load = _load(ctx)
    if not load:
        return {}
    if not any(STATE in p for p in ctx.planned.values()):
        text = ckpt.state_command(load, (ctx.job or {}).get("save"))
        return {n: {STATE: cmd(text, timeout=30)} for n in ctx.nodes}
    states, _ = _states(ctx)
    wanted = {}
    majority = _agreement(states).majority
    for members in groups(states).values():
        it = _iteration_of(states[members[0]], majority)
        if it:
            wanted[members[0]] = {LISTING: cmd(ckpt.listing_command(load, it, ctx.params.get("max_entries", 100000)), timeout=60)}
    return wanted


def _valid(states: Mapping[str, ckpt.NodeState]) -> dict[str, ckpt.NodeState]:
    return {n: s for n, s in states.items() if s.tracker is not None and ckpt.iteration_dir(s.tracker)}


def _agreement(states: Mapping[str, ckpt.NodeState]):
    return consensus({n: s.tracker for n, s in _valid(states).items()})


def _iteration_of(state: ckpt.NodeState, majority: str | None) -> str | None:
    """The iteration directory a group is listed for: its own tracker's, else the cluster's (a node
    without the tracker still holds rank directories the union needs)."""
    own = ckpt.iteration_dir(state.tracker) if state.tracker is not None else None
    return own or (ckpt.iteration_dir(majority) if majority is not None else None)


def _node_problems(states: Mapping[str, ckpt.NodeState], load: str) -> dict[str, tuple[str, str]]:
    """Node -> (problem, fix) for load paths and tracker files."""
    out = {}
    fixes = {
        "file": f"point job.load (Megatron's --load) at the checkpoint directory; {load} is a file",
        "missing": f"mount or copy the checkpoint directory to {load} on this node (`rsync -a`), or fix job.load",
        "broken": f"{load} is a symbolic link to nothing: fix the link or the mount",
    }
    for name, s in states.items():
        if s.load_kind != "dir":
            what = {"file": "is a file, not a directory", "missing": "does not exist",
                    "broken": "is a broken symbolic link"}.get(s.load_kind, f"is {s.load_kind}")
            out[name] = (f"{load} {what}", fixes.get(s.load_kind, fixes["missing"]))
        elif not s.load_readable:
            out[name] = (f"{load} is not readable by the login user", f"make {load} readable (chmod/ownership) for the job's user")
        elif s.tracker_state != "present":
            why = "missing" if s.tracker_state == "missing" else "unreadable"
            out[name] = (f"{ckpt.TRACKER} {why} in {load}: Megatron starts this node from iteration 0",
                         f"copy {load}/{ckpt.TRACKER} and its iteration directory from a good node (`rsync -a`)")
        elif ckpt.iteration_dir(s.tracker or "") is None:
            out[name] = (f"{ckpt.TRACKER} holds {s.tracker!r}, not an iteration number or 'release' "
                         "(Megatron: 'Invalid metadata file')", f"write the saved iteration number into {load}/{ckpt.TRACKER}")
    return out


def _listings(ctx: ClusterContext, grouped: dict[str, list[str]]) -> tuple[dict[str, ckpt.Saved], dict[str, str]]:
    saved, errors = {}, {}
    for gid, members in grouped.items():
        out = ctx.planned.get(members[0], {}).get(LISTING)
        if out is None:
            continue
        try:
            if not out.ok:
                raise ValueError(out.error or f"rc {out.rc}: {out.stderr.strip()[:200]}")
            saved[gid] = ckpt.parse_listing(out.stdout)
        except ValueError as exc:
            errors[gid] = str(exc)
    return saved, errors


def _layout_findings(saved: dict[str, ckpt.Saved], job: Mapping[str, Any], where: str) -> tuple[list[tuple[Status, str, str]], dict]:
    """Compare the saved layout (union of every group's rank directories) with the job's."""
    present = [s for s in saved.values() if s.present]
    if not present:
        return [], {}
    formats = sorted({s.format for s in present})
    details: dict[str, Any] = {"format": formats[0] if len(formats) == 1 else formats}
    if any(s.metadata_error for s in present):
        return [(Status.FAIL, next(s.metadata_error for s in present if s.metadata_error) + f" in {where}",
                 "rewrite metadata.json from a good copy of the checkpoint")], details
    if any(s.format != "torch" for s in present):
        backend = ", ".join(f for f in formats if f != "torch")
        details["note"] = (f"distributed checkpoint ({backend}): Megatron's dist_checkpointing loads it into the "
                           "job's layout; the saved tp/pp are not in its file names")
        return [], details
    ranks = frozenset().union(*(s.ranks for s in present))
    jt, jp, je = (int(job.get(k, 1) or 1) for k in ("tp", "pp", "ep"))
    lay = ckpt.saved_layout(ranks, jp, je)
    if lay is None:
        return [(Status.FAIL, f"{where} has no mp_rank_* directories and no distributed-checkpoint metadata",
                 "point job.load at a Megatron checkpoint directory")], details
    details["saved_layout"] = {"tp": lay.tp, "pp": lay.pp, "ep": lay.ep}
    problems = []
    job_label = f"tp={jt} pp={jp}" + (f" ep={je}" if je > 1 or lay.ep > 1 else "")
    if (lay.tp, lay.pp, lay.ep) != (jt, jp, je):
        problems.append((Status.FAIL, f"saved with {lay.label()}, the job uses {job_label}: reshard first", RESHARD))
    elif lay.missing:
        shown = ", ".join(lay.missing[:4]) + (f" (+{len(lay.missing) - 4} more)" if len(lay.missing) > 4 else "")
        problems.append((Status.FAIL, f"incomplete checkpoint in {where}: {shown} missing",
                         "copy the missing rank directories from the node that saved them, or resume from an earlier iteration"))
    details["missing_ranks"] = list(lay.missing)
    return problems, details


def _space(states: Mapping[str, ckpt.NodeState], grouped: dict[str, list[str]], saved: dict[str, ckpt.Saved],
           headroom: float) -> list[Finding]:
    """Per save filesystem: free bytes >= headroom x the bytes of the load groups its nodes see."""
    member_of = {n: gid for gid, ms in grouped.items() for n in ms}
    by_save: dict[str, list[str]] = defaultdict(list)
    for name, s in sorted(states.items()):
        if s.save_kind is not None:
            by_save[s.save_id or name].append(name)
    found = []
    for members in by_save.values():
        s = states[members[0]]
        need = sum(saved[g].size for g in {member_of.get(n) for n in members} if g in saved and saved[g].present)
        need = int(need * headroom)
        if s.save_writable is False:
            for n in members:
                found.append(Finding(Status.FAIL, f"{n}: save path {s.save_at} is not writable", {"path": s.save_at},
                                     f"make {s.save_at} writable for the job's user, or move job.save", node=n))
        elif s.save_free is not None and need and s.save_free < need:
            for n in members:
                found.append(Finding(Status.FAIL, f"{n}: {s.save_at} has {s.save_free / 2**30:.1f} GiB free, one more "
                                     f"checkpoint needs {need / 2**30:.1f} GiB",
                                     {"path": s.save_at, "free": s.save_free, "needed": need},
                                     f"free space on {s.save_at} or point job.save elsewhere", node=n))
    return found


def evaluate(ctx: ClusterContext) -> list[Finding]:
    load = _load(ctx)
    if not load:
        return [skipped("no job.load in the inventory: nothing will be resumed")]
    job = ctx.job or {}
    states, errors = _states(ctx)
    blamed = [Finding(Status.ERROR, f"{n}: checkpoint state unreadable: {why}", node=n) for n, why in errors.items()]
    for name, (problem, fix) in sorted(_node_problems(states, load).items()):
        blamed.append(Finding(Status.FAIL, f"{name}: {problem}", {"path": load}, fix, node=name))
    agree = _agreement(states)
    problems: list[tuple[Status, str, str]] = []
    for n, value in agree.outliers.items():
        blamed.append(Finding(Status.FAIL, f"{n}: {ckpt.TRACKER} says {value}, the other nodes {agree.majority}",
                              {"path": load}, f"copy {load}/{ckpt.TRACKER} and iteration {agree.majority} from a good node", node=n))
    if not agree.agreed and agree.majority is None:
        problems.append((Status.FAIL, f"{ckpt.TRACKER} differs: {agree.describe()}",
                         "decide which iteration to resume and make every node's tracker file name it"))
    grouped = groups(states)
    saved, list_errors = _listings(ctx, grouped)
    for gid, why in list_errors.items():
        problems.append((Status.ERROR, f"listing of {load} on {grouped[gid][0]} unreadable: {why}", ""))
    for gid, s in saved.items():
        if not s.present:
            it = _iteration_of(states[grouped[gid][0]], agree.majority)
            for n in grouped[gid]:
                blamed.append(Finding(Status.FAIL, f"{n}: {ckpt.TRACKER} names {it}, which is not in {load}",
                                      {"path": load}, f"copy {load}/{it} from a good node, or fix {ckpt.TRACKER}", node=n))
    layout_problems, details = _layout_findings(saved, job, load)
    problems += layout_problems
    blamed += _space(states, grouped, saved, float(ctx.params.get("headroom", 1.05)))
    shared = [ms for ms in grouped.values() if len(ms) > 1]
    details.update({"load": load, "save": job.get("save"), "iteration": agree.majority,
                    "storage_groups": [ms for ms in grouped.values()],
                    "checkpoint_bytes": sum(s.size for s in saved.values())})
    status = worst([s for s, _, _ in problems] + [f.status for f in blamed])
    if status is Status.PASS:
        where = (f"shared by {len(shared[0])} nodes, listed once" if len(grouped) == 1 and shared
                 else f"{len(grouped)} storage groups")
        lay = details.get("saved_layout")
        what = f"saved with tp={lay['tp']} pp={lay['pp']}" + (f" ep={lay['ep']}" if lay["ep"] > 1 else "") if lay \
            else details.get("note", "")
        return [passed(f"resume from {load} iteration {agree.majority} ({where}): {what}", **details)]
    texts = [m for s, m, _ in problems if s is not Status.PASS] + [f.summary for f in blamed]
    fixes = [r for _, _, r in problems if r] + [f.remediation for f in blamed if f.remediation]
    summary = Finding(status, "; ".join(texts[:6]) + (f" (+{len(texts) - 6} more)" if len(texts) > 6 else ""),
                      details, " ".join(dict.fromkeys(fixes)) or "see the per-node results")
    return [summary] + _one_per_node(blamed)


def _one_per_node(found: list[Finding]) -> list[Finding]:
    """A node blamed for several things gets one result naming them all."""
    by: dict[str, list[Finding]] = defaultdict(list)
    for f in found:
        by[f.node or ""].append(f)
    out = []
    for node, fs in sorted(by.items()):
        if len(fs) == 1:
            out.append(fs[0])
            continue
        fixes = [f.remediation for f in fs if f.remediation]
        out.append(Finding(worst(f.status for f in fs), f"{node}: " + "; ".join(f.summary.removeprefix(f"{node}: ") for f in fs),
                           {"path": fs[0].details.get("path")}, " ".join(dict.fromkeys(fixes)) or None, node=node))
    return out
