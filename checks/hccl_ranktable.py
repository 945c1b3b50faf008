"""hccl.ranktable: the job's rank table (RANK_TABLE_FILE, hccl.json) agrees with the cluster it runs on.

What it checks: the rank table at `path` (or, without it, the launch environment's
RANK_TABLE_FILE) on every node: that every node has the same copy; that HCCL would load it at all
(status completed, server_count, rank ids 0..N-1 without gaps, repeats or interleaving, unique
server ids and device IPs, SuperPoD fields: docs/FORMATS.md §8.2); that every server_id (or its
host_ip) is a reachable node of the inventory; that every device_id exists on its node and is
healthy (npu.health); that every device_ip is the address `hccn_tool -i N -ip -g` reports for that
device (hccn.ip's facts: the same probe, run once); and, in a SuperPoD table (version 1.2), that
each device's super_device_id is the SDID `npu-smi info -t spod-info -i <npu> -c <chip>` prints
and the servers of one super_pod_list entry sit in one physical SuperPoD (npu-smi's Super Pod ID).
Inventory nodes the table does not name warn.

Why it matters: HCCL builds the communicator from the table alone. A stale table (a device
re-addressed, a server replaced, a card swapped) fails every rank at init, typically after
HCCL_CONNECT_TIMEOUT: EI0014 `the IP address(...) in the ranktable is inconsistent with the IP
address(...) of the network adapter`, EI0004 on a malformed table, EI0014 `devices have same
superDeviceId` on a wrong SuperPoD layout; a copy that differs on one node gives that rank another
world.

How to fix: regenerate the table from the cluster as it is (MindSpore's `hccl_tools.py`, or let
Ascend Operator rewrite `/user/serverid/devindex/config/hccl.json`) and copy the same file to
every node; or put a re-addressed device back (`hccn_tool -i N -ip -s address <ip> netmask
<mask>`, and /etc/hccn.conf). Parameters: `path` ("": RANK_TABLE_FILE of the launch environment).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from preflight import launchenv
from preflight.ascend import hccn_common as common
from preflight.ascend import ranktable as rt
from preflight.ascend import spod_info
from preflight.checkapi import (ClusterContext, Policy, CommandOutput, Finding, ParseError, Probe, Status, cmd, passed,
                                require_ok, sh)
from preflight.checkhelpers import graded, first_line, seq, worst

ID = "hccl.ranktable"
SCOPE = "cluster"
POLICY = Policy(
    where="job",  # the table is read where the job reads it: inside its container when there is one
)
USES = ("hccn.ip", "npu.health")
ACTIONS = {
    "unhealthy": ("replace_hardware", "a device the table names is unhealthy: npu.health's fault"),
    "": ("fix_config", "a stale or malformed rank table is configuration: regenerate it (docs/FAILURES.md row 28)"),
}
DEFAULTS: dict = {"path": ""}
STAT_PROBE, READ_PROBE, SPOD_PROBE = "rank_table", "rank_table_read", "spod_info"
NONE, ABSENT, PATH = "@@none", "@@absent", "@@path"
SPOD_MARK, RC_MARK = "@@spod", "@@rc"
A3_LAYOUTS = ("phy-id",)  # npu-smi tables of A3 servers, the only ones with spod-info


@dataclass(frozen=True)
class Facts:
    path: str | None  # None: no path given and no RANK_TABLE_FILE
    sha256: str | None = None  # None with a path: absent or unreadable (see error)
    error: str | None = None


def probes(node, params) -> dict[str, Probe]:
    """Where the table is and its sha256, in the launch environment (RANK_TABLE_FILE is set there)."""
    find = sh("p={path}; [ -n \"$p\" ] || p=\"${{RANK_TABLE_FILE:-}}\"; "
              "if [ -z \"$p\" ]; then echo {none}; elif [ ! -e \"$p\" ]; then echo {absent} \"$p\"; "
              "else echo {mark} \"$p\"; sha256sum <\"$p\"; fi",
              path=str(params.get("path") or ""), none=NONE, absent=ABSENT, mark=PATH)
    return {STAT_PROBE: cmd(launchenv.command(node, find))}


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    out = require_ok(outputs.get(STAT_PROBE), "locating the rank table")  # not run or cut: could not tell
    head, _, rest = out.stdout.partition("\n")
    if head.strip() == NONE:
        return Facts(None)
    if head.startswith(ABSENT + " "):
        return Facts(head[len(ABSENT) + 1:], error="not found")
    if not head.startswith(PATH + " "):
        raise ParseError(f"locating the rank table: unexpected output (exit code {out.rc})", out.stdout + out.stderr)
    path, digest = head[len(PATH) + 1:], rest.split()[:1]
    if out.rc != 0 or not digest:
        return Facts(path, error=first_line(out.stderr) or f"unreadable (exit code {out.rc})")
    return Facts(path, digest[0])


# ---- plan: one copy of each distinct table read, spod-info where the table is a SuperPoD one -----

def _copies(ctx: ClusterContext) -> dict[str, list[tuple[str, str]]]:
    """sha256 -> the (node, path) of each copy with that content (one content at two paths is one copy)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for n in sorted(ctx.nodes):
        f = ctx.facts.get(n, {}).get(ID)
        if f is not None and f.sha256:
            out.setdefault(f.sha256, []).append((n, f.path))
    return out


def spod_script(chips: list[tuple[int, int]]) -> Probe:
    """`npu-smi info -t spod-info -i <npu> -c <chip>` for each chip, framed `@@spod N C` / `@@rc R`."""
    calls = [sh("echo {mark} {npu} {chip}; LC_ALL=C npu-smi info -t spod-info -i {npu} -c {chip} 2>&1; echo {rc} $?",
                mark=SPOD_MARK, npu=int(n), chip=int(c), rc=RC_MARK) for n, c in chips]
    return Probe(seq(calls), job=False)  # npu-smi is the host's


def plan(ctx: ClusterContext) -> dict[str, dict[str, Probe]]:
    out: dict[str, dict[str, Probe]] = {}
    for (node, path), *_ in _copies(ctx).values():
        out.setdefault(node, {})[READ_PROBE + "_" + node] = cmd("cat -- {p}", p=path)
    for n in sorted(ctx.nodes):
        health = ctx.facts.get(n, {}).get("npu.health")
        table = getattr(health, "table", None)
        if table is not None and table.layout in A3_LAYOUTS and table.chips:
            out.setdefault(n, {})[SPOD_PROBE] = spod_script([(c.npu, c.chip) for c in table.chips])
    return out


def split_spod(out: CommandOutput | None) -> dict[tuple[int, int], CommandOutput]:
    per: dict[tuple[int, int], CommandOutput] = {}
    key, body = None, []
    for line in (out.stdout if out else "").splitlines():
        if line.startswith(SPOD_MARK + " "):
            _, npu, chip = line.split()
            key, body = (int(npu), int(chip)), []
        elif line.startswith(RC_MARK + " ") and key is not None:
            per[key] = CommandOutput(stdout="\n".join(body) + "\n", rc=int(line.split()[1]))
            key = None
        elif key is not None:
            body.append(line)
    return per


# ---- evaluate --------------------------------------------------------------------------------------

@dataclass
class Verdict:
    """Problems found, per node (the summary's blame) and for the table as a whole."""

    nodes: dict[str, list[str]] = field(default_factory=dict)  # node -> problems
    devices: dict[str, dict[int, str]] = field(default_factory=dict)  # node -> device -> problem
    table: list[str] = field(default_factory=list)
    warn_nodes: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    codes: dict[str, dict[int, str | None]] = field(default_factory=dict)  # node -> device -> ACTIONS problem

    def device(self, node: str, dev: int, problem: str, code: str | None = None) -> None:
        self.devices.setdefault(node, {})[dev] = problem
        self.codes.setdefault(node, {})[dev] = code


def match_servers(table: rt.RankTable, nodes: Mapping[str, Any]) -> dict[str, str]:
    """server_id -> node: the server_id is the node's name or address, or its host_ip is."""
    by_key: dict[str, str] = {}
    for name, node in nodes.items():
        by_key.setdefault(name, name)
        by_key.setdefault(node.host, name)
    out = {}
    for s in table.servers:
        hit = by_key.get(s.server_id) or (by_key.get(s.host_ip) if s.host_ip else None)
        if hit:
            out[s.server_id] = hit
    return out


def compare(table: rt.RankTable, ctx: ClusterContext, v: Verdict) -> None:
    """The table against the facts of the nodes it names (pure: the runner's facts in, problems out)."""
    where = match_servers(table, ctx.nodes)
    for s in table.servers:
        if s.server_id not in where:
            down = [u for u in ctx.unreachable if u == s.server_id]
            v.table.append(f"server {s.server_id} (ranks {s.ranks.start}-{s.ranks.stop - 1}) is "
                           + ("unreachable (see ssh.connect)" if down else
                              "not a reachable node of this run (not in the inventory: replaced? or unreachable, "
                              "or left out by --limit)"))
            continue
        node = where[s.server_id]
        facts = ctx.facts.get(node, {})
        _devices(s, node, facts, v, len(table.servers) > 1)
    named = set(where.values())
    for n in sorted(ctx.nodes):
        if n not in named:
            v.warn_nodes[n] = f"{n} is not in the rank table {table.path}: the job will not use it"
    if table.superpod:
        _superpods(table, where, ctx, v)


def _devices(s: rt.Server, node: str, facts: Mapping[str, Any], v: Verdict, several: bool) -> None:
    """One server's devices against its node: exist, healthy, device_ip as hccn_tool reports it.
    HCCL needs device_ip between servers unless the server has host_ip (host NIC) or the chips
    are A3 (inside a SuperPoD HCCL links over the vNIC): hcomm GetSingleDeviceIp."""
    health = facts.get("npu.health")
    chips = {c.logical_id: c for c in getattr(health, "chips", ())}
    table = getattr(health, "table", None)
    a2 = table is not None and table.layout not in A3_LAYOUTS
    ips = getattr(facts.get("hccn.ip"), "devices", None)
    if ips is None:
        v.notes.append(f"{node}: device IPs unknown (hccn.ip has no answer there); device_ip not compared")
    if not chips:
        v.notes.append(f"{node}: no npu-smi table (see npu.health); device ids and health not compared")
    for d in s.devices:
        rank = f"rank {d.rank_id}"
        if chips and d.device_id not in chips:
            v.device(node, d.device_id, f"{rank}: no device {d.device_id} on this node "
                                        f"(devices {min(chips)}-{max(chips)})")
            continue
        chip = chips.get(d.device_id)
        if chip is not None and chip.health != "OK":
            v.device(node, d.device_id, f"{rank}: device not healthy (npu-smi Health {chip.health}; see npu.health)",
                     "unhealthy")
            continue
        live = ips.get(d.device_id) if ips is not None else None
        if ips is not None and d.ips and (live is None or live.ip not in d.ips):
            got = live.ip if live is not None and live.ip else "no IP"
            v.device(node, d.device_id, f"{rank}: rank table device_ip {d.device_ip}, hccn_tool -ip -g reports {got}")
        elif not d.ips and several and not s.host_ip and a2:
            v.device(node, d.device_id, f"{rank}: no device_ip in the table; HCCL needs it between servers on this "
                                        f"product (EI0014 'device_ip' is not set correctly)")


def _superpods(table: rt.RankTable, where: dict[str, str], ctx: ClusterContext, v: Verdict) -> None:
    pods: dict[str, set[int]] = {}
    compared = 0
    for s in table.servers:
        node = where.get(s.server_id)
        if node is None:
            continue
        health = ctx.facts.get(node, {}).get("npu.health")
        chips = {c.logical_id: c for c in getattr(health, "chips", ())}
        per = split_spod(ctx.planned.get(node, {}).get(SPOD_PROBE))
        for d in s.devices:
            chip = chips.get(d.device_id)
            got = per.get((chip.npu, chip.chip)) if chip is not None else None
            if got is None:
                continue
            if spod_info.UNSUPPORTED in got.stdout:
                v.notes.append(f"{node}: npu-smi offers no spod-info here ({first_line(got.stdout)}); "
                               f"SuperPoD ids not compared")
                break
            if got.rc != 0:
                v.notes.append(f"{node} device {d.device_id}: npu-smi spod-info failed: "
                               f"{first_line(got.stdout) or f'exit code {got.rc}'}")
                continue
            try:
                info = spod_info.parse(got.stdout)
            except ParseError as exc:  # an unknown layout: say so, never guess
                v.notes.append(f"{node} device {d.device_id}: spod-info unreadable ({exc})")
                continue
            if info is None:
                continue
            compared += 1
            pods.setdefault(s.super_pod_id or "", set()).add(info.super_pod_id)
            if d.super_device_id != info.sdid:
                v.device(node, d.device_id, f"rank {d.rank_id}: super_device_id {d.super_device_id}, "
                                            f"npu-smi spod-info SDID {info.sdid}")
    for pid, physical in sorted(pods.items()):
        if len(physical) > 1:
            v.table.append(f"SuperPoD {pid} of the table spans physical SuperPoDs {sorted(physical)} "
                           f"(npu-smi Super Pod ID); HCCL refuses ranks of two physical SuperPoDs in one")
    if compared:
        v.notes.append(f"{compared} super_device_id(s) compared with npu-smi spod-info")


def _fix(table_path: str) -> str:
    return (f"Regenerate {table_path} from the cluster as it is (MindSpore hccl_tools.py, or let Ascend "
            f"Operator rewrite it) and copy the same file to every node; or set a re-addressed device back "
            f"with `hccn_tool -i N -ip -s address <ip> netmask <mask>` (and /etc/hccn.conf)")


def _copy_problems(ctx: ClusterContext, v: Verdict) -> tuple[str, str, str] | None:
    """The reference copy (path, sha256, holder): the copy most nodes hold; other nodes are blamed."""
    facts = {n: ctx.facts.get(n, {}).get(ID) for n in sorted(ctx.nodes)}
    with_path = {n: f for n, f in facts.items() if f is not None and f.path is not None}
    for n, f in with_path.items():
        if f.error:
            v.nodes.setdefault(n, []).append(f"rank table {f.path} {f.error}")
        elif not f.path.endswith(rt.SUFFIX):  # hcomm LoadFile: "path %s is not a valid .json file"
            v.nodes.setdefault(n, []).append(f"rank table {f.path}: HCCL loads it only from a file named *{rt.SUFFIX}")
    for n, f in facts.items():
        if f is not None and f.path is None and with_path:
            v.nodes.setdefault(n, []).append("no rank table: RANK_TABLE_FILE unset in its launch environment")
    copies = _copies(ctx)
    if not copies:
        return None
    digest = max(copies, key=lambda d: (len(copies[d]), d))  # the copy most nodes hold
    holder, path = copies[digest][0]
    for d, holders in copies.items():
        for n, p in holders if d != digest else ():
            v.nodes.setdefault(n, []).append(f"its rank table {p} differs from the copy on {len(copies[digest])} "
                                             f"other node(s) (sha256 {d[:12]} vs {digest[:12]})")
    return path, digest, holder


def evaluate(ctx: ClusterContext) -> list[Finding]:
    facts = [ctx.facts.get(n, {}).get(ID) for n in ctx.nodes]
    if all(f is None for f in facts):  # not one node's answer read (the runner leaves unread nodes out)
        return [Finding(Status.ERROR, "could not locate the rank table on any node (see the nodes' errors)")]
    if not any(f is not None and f.path is not None for f in facts):
        return [Finding(Status.SKIP, "no rank table: set checks.hccl.ranktable.path or RANK_TABLE_FILE "
                                     "in the launch environment")]
    v = Verdict()
    ref = _copy_problems(ctx, v)
    table: rt.RankTable | None = None
    if ref is not None:
        path, _, holder = ref
        read = ctx.planned.get(holder, {}).get(READ_PROBE + "_" + holder)
        if read is None or not read.ok or read.truncated:
            why = ("cut at the output cap (a table this large is not read)" if read is not None and read.truncated
                   else (read.error or first_line(read.stderr) or f"exit code {read.rc}") if read is not None
                   else "not read")
            v.table.append(f"{path} could not be read on {holder}: {why}")
        else:
            try:
                table = rt.parse(read.stdout, f"{path} (on {holder})")
            except rt.RankTableError as exc:
                v.table.append(f"HCCL would refuse it: {exc}")
    if table is not None:
        compare(table, ctx, v)
    return _findings(v, table, ref[0] if ref else "the rank table", ctx)


def _findings(v: Verdict, table: rt.RankTable | None, path: str, ctx: ClusterContext) -> list[Finding]:
    fix = _fix(path)
    out: list[Finding] = []
    for node in sorted(set(v.nodes) | set(v.devices)):
        devs = v.devices.get(node, {})
        chips = {c.logical_id: (c.npu, c.chip) for c in getattr(ctx.facts.get(node, {}).get("npu.health"), "chips", ())}
        parts = v.nodes.get(node, []) + [f"device {d} {p}" for d, p in sorted(devs.items())]
        out.append(Finding(Status.FAIL, f"{node}: " + "; ".join(parts),
                           {"failed_devices": sorted(devs),
                            "devices": [common.device_ref(d, chips, problem=p) for d, p in sorted(devs.items())]},
                           fix, node=node, action=graded(ACTIONS, *v.codes.get(node, {}).values())))
    for node, why in sorted(v.warn_nodes.items()):
        if node not in v.nodes and node not in v.devices:
            out.append(Finding(Status.WARN, why, {"failed_devices": []},
                               f"Add {node} to {path} if the job should use it, or leave it out of this run "
                               f"(--limit)", node=node))
    details: dict[str, Any] = {"path": path}
    if table is not None:
        details.update(version=table.version, servers=len(table.servers), ranks=table.world_size)
    if v.notes:
        details["notes"] = v.notes
    if v.table:
        details["table_problems"] = v.table
    status = worst([f.status for f in out] + ([Status.FAIL] if v.table else []))
    if status is Status.PASS:
        return [passed(f"{path}: {table.world_size} ranks on {len(table.servers)} servers agree with the "
                       f"cluster (device IPs, devices, health" + (", SuperPoD ids" if table.superpod else "") + ")",
                       **details)]
    blamed = sorted({f.node for f in out if f.status is Status.FAIL})
    summary = "; ".join(v.table + ([f"disagrees on {', '.join(blamed)}"] if blamed else [])) or \
        f"{len(out)} node(s) not in the rank table"
    return [Finding(status, f"{path}: {summary}", details, fix)] + out
