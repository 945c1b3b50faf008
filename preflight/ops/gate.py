"""The job gate: a fast subset of checks under a deadline, and node lists a scheduler can use.

Why a separate entry point: in front of `torchrun` or inside a Slurm prolog the question is only
"may this job start here, and on which nodes", within seconds. So: node-level checks that need
no traffic between nodes (plus ssh.connect), a 30 s deadline by default, exit codes exactly as
`run` (0 is the only "go"; an unreachable node is never a go), and with `--exclude-out` the
failing and unreachable nodes as a Slurm hostlist (`node[03,07]`) ready for `sbatch --exclude`;
`--good-out` the usable ones for `--nodelist`.

`--local` is for a Slurm Prolog, which runs on every allocated node: the checks run on this host
through /bin/sh (no SSH), for one node built from this host's entry in the inventory when it has
one (matched by $SLURMD_NODENAME under Slurm, else by the host name), else from the inventory's
defaults; the node is named so, and `--drain`/`--resume` act on $SLURMD_NODENAME (required there).
"""
from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any

from ..errors import InventoryError
from ..registry import CONNECT_ID, discover, gate_set, matches, scopes

if TYPE_CHECKING:  # the rest is imported where used: `gate --help` needs none of it (YAML ~0.05 s)
    from ..inventory import Inventory
    from ..model import Report

DEFAULT_DEADLINE = 30.0


def this_host_names() -> list[str]:
    """Names this machine may have in an inventory, most specific first: under Slurm (a prolog)
    only $SLURMD_NODENAME, Slurm's name for it, which is the one --drain acts on (the host name
    may differ: node03 vs cn03.cluster.local); elsewhere the host name, full then short."""
    import socket
    if os.environ.get("SLURMD_NODENAME"):
        return [os.environ["SLURMD_NODENAME"]]
    names = [socket.gethostname(), socket.gethostname().split(".")[0]]
    out: list[str] = []
    for n in names:
        if n and n not in out:
            out.append(n)
    return out


def local_inventory(path: str | None) -> Inventory:
    """One node, this host, for LocalTransport. Raises InventoryError (one line) on a bad inventory."""
    import tempfile
    from pathlib import Path

    import yaml

    from ..inventory import load
    names = this_host_names()
    if path:
        full = load(path)  # validate the whole file first: errors name the real file and line
        for name in names:
            if any(n.name == name for n in full.nodes):
                return load(path, limit=name)
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if "all" in doc and "nodes" not in doc:
            defaults = dict((doc.get("all") or {}).get("vars") or {})
            defaults = {k: v for k, v in defaults.items() if not k.startswith("ansible_")}
            top: dict[str, Any] = {}
        else:
            defaults = dict(doc.get("defaults") or {})
            top = {k: doc[k] for k in ("cluster", "checks") if doc.get(k) is not None}
        original = full
    else:
        defaults, top, original = {}, {}, None
    defaults.pop("host", None)
    synthetic = {**top, "defaults": defaults, "nodes": [{"name": _safe_name(names[-1]), "host": "localhost"}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="preflight-local-", delete=False) as f:
        yaml.safe_dump(synthetic, f)
    try:
        inv = load(f.name)
    finally:
        os.unlink(f.name)
    if original is not None:
        return dataclasses.replace(inv, path=original.path, sha256=original.sha256)
    return dataclasses.replace(inv, path="(local)", sha256="")


def _safe_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "._-" else "-" for c in name).strip("-.")
    return cleaned or "localhost"


def gate_checks(checks: list[str] | None, local: bool) -> list[str]:
    """The selection: the fast set (every check whose Policy says gate=True) unless given (a given one is
    validated by the runner); with --local, node-scope checks only: a prolog runs on
    every node at once, and cross-node probes belong in the batch script."""
    every = discover()
    chosen = list(checks) if checks else gate_set()
    if not local:
        return chosen
    for pattern in chosen:
        if not any(matches(k, pattern) for k in every):
            raise InventoryError(f"no check matches {pattern!r} (see: preflight list-checks)")
    expanded = [k for k, scope in scopes().items() if scope == "node" and any(matches(k, c) for c in chosen)]
    if not expanded:
        raise InventoryError("--local runs node checks only, and none of the selected checks is one")
    return expanded


def split_nodes(report: Report, strict: bool = False) -> tuple[list[str], list[str]]:
    """(usable, excluded): excluded = unreachable, or any fail/error on the node (with strict, warn);
    an acknowledged failure excludes only with strict."""
    from ..model import NodeStateKind, Status
    bad_status = {Status.FAIL, Status.ERROR} | ({Status.WARN} if strict else set())
    bad = {n.name for n in report.nodes if n.state is not NodeStateKind.OK}
    bad |= {r.node for r in report.results if r.node and r.status in bad_status and (strict or not r.ack)}
    names = [n.name for n in report.nodes]
    return [n for n in names if n not in bad], [n for n in names if n in bad]


def allocation(limit: str | None, need: int) -> str:
    """The node set --need chooses from: --limit, else the job's $SLURM_JOB_NODELIST.
    Raises SlurmError: no allocation (6), or fewer nodes in it than needed (7)."""
    from ..nodeset import RangeError, expand
    from ..slurm.commands import EXIT_NEED_TOO_LARGE, EXIT_NO_ALLOCATION, SlurmError
    nodes = limit or os.environ.get("SLURM_JOB_NODELIST", "")
    if not nodes:
        raise SlurmError("--need: no Slurm allocation (run inside a job, where $SLURM_JOB_NODELIST is set, "
                         "or give --limit NODELIST)", EXIT_NO_ALLOCATION)
    try:
        count = len(expand(nodes))
    except RangeError as exc:
        raise InventoryError(str(exc)) from None
    if need > count:
        raise SlurmError(f"--need {need} is more than the allocation's {count} node(s) ({nodes})",
                         EXIT_NEED_TOO_LARGE)
    return nodes


def local_slurm_name() -> str:
    """`--local` with --drain/--resume: the node Slurm knows this host as; InventoryError without it
    (the host name is not Slurm's name for it, and draining another node is worse than none)."""
    name = os.environ.get("SLURMD_NODENAME", "")
    if not name:
        raise InventoryError("--local with --drain/--resume acts on $SLURMD_NODENAME, which is not set: "
                             "run it from a Slurm prolog or epilog (or set SLURMD_NODENAME to this node's Slurm name)")
    return name


def slurm_usable() -> None:
    """Before any node is checked: the Slurm commands --drain/--resume use are on PATH (else exit 5)."""
    from ..slurm.commands import tool
    tool("sinfo")
    tool("scontrol")


def slurm_actions(report: Report, drain: bool, resume: bool, drain_unreachable: bool, dry_run: bool,
                  strict: bool, say: Any, only: "set[str] | None" = None) -> None:
    """Drain/resume by NHC's rule (preflight/slurm/drain.py); raises SlurmError. With `only`
    (`--drain-on`: the nodes whose failures need one of the named actions), no other node is drained."""
    import dataclasses

    from ..slurm import commands, drain as drain_mod
    states = commands.node_states([n.name for n in report.nodes])
    actions = drain_mod.decide(report, states, drain, resume, drain_unreachable, strict)
    if only is not None:
        actions = [a if a.verb != "drain" or a.node in only else
                   dataclasses.replace(a, verb="none", note=f"not drained: its failures need none of --drain-on's "
                                                             f"actions ({a.reason})", reason=None)
                   for a in actions]
    drain_mod.apply(actions, dry_run, say)


def select_lists(report: Report, need: int, exclude_out: str | None, good_out: str | None,
                 strict: bool = False) -> list[str]:
    """--need: the chosen nodes to --good-out, the unusable ones to --exclude-out."""
    from ..atomic import write_atomic
    from ..nodeset import fold
    from ..slurm.select import choose
    chosen = choose(report, need, strict)
    _, bad = split_nodes(report, strict)
    if exclude_out:
        write_atomic(exclude_out, (fold(bad) + "\n") if bad else "")
    if good_out:
        write_atomic(good_out, (fold(chosen) + "\n") if chosen else "")
    return chosen


def write_lists(report: Report, exclude_out: str | None, good_out: str | None, strict: bool = False) -> None:
    """Hostlists, one line each (empty file when empty), written atomically, mode 0600."""
    from ..atomic import write_atomic
    from ..nodeset import fold
    good, bad = split_nodes(report, strict)
    if exclude_out:
        write_atomic(exclude_out, (fold(bad) + "\n") if bad else "")
    if good_out:
        write_atomic(good_out, (fold(good) + "\n") if good else "")


# A node the gate could not reach, or that timed out, cannot say what it needs: reaching it again
# takes a reboot (or someone at the console), so for --drain-on it counts as this action.
UNREACHABLE_ACTION = "reboot_node"


def drain_selection(report: Report, wanted: "tuple[str, ...] | set[str]",
                    strict: bool = False) -> dict[str, list[tuple[str, str, str]]]:
    """`gate --drain-on ACTIONS`: node -> [(check, action, summary)] for the nodes that have a fail
    (with strict, a warn) whose action is one of `wanted`; the others may still be excluded from
    the job (--exclude-out) but are not handed to repair. An acknowledged failure never selects.
    Errors (could not tell) carry no action and do not select, except a node not reached at all
    (UNREACHABLE_ACTION)."""
    from ..model import NodeStateKind, Status
    graded = {Status.FAIL} | ({Status.WARN} if strict else set())
    wanted = set(wanted)
    out: dict[str, list[tuple[str, str, str]]] = {}
    for n in report.nodes:
        if n.state is not NodeStateKind.OK and UNREACHABLE_ACTION in wanted:
            out.setdefault(n.name, []).append((CONNECT_ID, UNREACHABLE_ACTION, f"{n.state.value}: {n.error}"))
    for r in report.results:
        if r.node and r.status in graded and r.action in wanted and not r.ack:
            out.setdefault(r.node, []).append((r.check, r.action, r.summary))
    order = {n.name: i for i, n in enumerate(report.nodes)}
    return dict(sorted(out.items(), key=lambda kv: order.get(kv[0], len(order))))
