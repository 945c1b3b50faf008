"""smoke.allreduce: a real 2-node all_reduce through torch.distributed, with a verdict.

What it does: picks two nodes (the first two reachable nodes whose env.comm facts look fine, filled
up with other reachable nodes; or `nodes: [a, b]`), and starts rank 0 on the first and rank 1 on the
second at the same time, each inside its node's launch environment (env_files, env, launch_shell),
with the inventory's `python`. So HCCL_IF_IP, HCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME are exercised
exactly as the job will use them. A small self-contained rank script (torch only) travels inline in
the probe into a private `mktemp -d` directory that the probe's trap removes.
- Backend: hccl when torch_npu imports and NPUs are visible, nccl when CUDA is available, else gloo
  (`backend:` overrides; both ranks must agree, or the check fails naming the backends). An
  all-reduce never mixes an Ascend node and an NVIDIA node: the default pair is two nodes of one
  backend, `mode: pairs` pairs nodes within each backend, and `nodes: [a, b]` naming one of each is
  refused with the reason.
- Rendezvous: rank 0 hosts a c10d TCPStore at its communication address (HCCL_IF_IP, else the
  address of GLOO_SOCKET_IFNAME's interface, else the node's host) on `port:` or the first port of
  `port_range:` not listening on rank 0 (net.ports facts); rank 0's bind is the in-probe free check.
- Measurement: warm-up, then `iters` timed all_reduce of `size_mib` MiB (default 64; use 1 for
  gates), exact check of the result (rank r contributes r+1 everywhere, the sum is 3), algbw and
  busbw (= algbw * 2(n-1)/n) and the small-message latency in `details.metrics` (`busbw` GB/s,
  `algbw` GB/s, `allreduce_latency` ms). `min_busbw_gbps:` warns, or fails with `below_min: fail`.
- Verdict: both ranks exit with the right sum: pass. A rank that fails or hangs fails, naming the
  side, with its first error lines (`Gloo connectFullMesh failed`, `Unable to find address for`,
  HCCL `EI0006`, a c10d connect timeout, ...) and the matching remediation. HCCL's texts are classified
  by the error-code table preflight/data/hccl_errors.yaml (EI0001 HCCL_SOCKET_IFNAME naming no NIC,
  EJ0003/EI0019/EI0020 a port already bound, EI0006 socket timeouts, EI0009; each rule with its sources).
  The node whose own setup
  broke is blamed (a missing NIC, torch missing, a taken port); when rank 1 cannot reach rank 0's
  store, rank 0's side (its address or firewall) is blamed; when both only waited, both ends.
- `rendezvous_timeout_s` (default 60) bounds the rendezvous (TCPStore and init_process_group
  timeouts); the probe's remote timeout is rendezvous + run + startup. Other cluster checks' probes
  may run before this one on a node: the rendezvous timeout must absorb that skew.
- Cleanup: the probe's trap kills the rank and removes its directory on exit, TERM, INT or HUP; the
  rank exits when its shell goes away; the runner's remote `timeout` kills the probe when the SSH
  channel closes (Ctrl-C, --deadline). No rank process or temp file stays on a node.
- `mode: pairs`: every selected node (`nodes:`, default all reachable) is paired and all pairs run
  at once, each with its own port. A failing pair is blamed by the same side rules; then each of
  its ends is re-paired with a node of a passing pair (a second planned round), which
  names the bad node when neither side's error does.
- `mode: all`: one all-reduce across every selected node (one backend), one rank per node
  (`ranks_per_node: devices`: one per NPU/GPU, each seeing only its own device through
  ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES: the i-th entry of the list the launch
  environment set, else i), every element of the result checked exactly
  (rank r contributes (1 + r mod 16)(1 + i mod 4) in fp32, exact up to 493,450 ranks; a larger
  selection is refused). When it fails, hangs or is slow, adaptive group
  testing finds the culprits (preflight/smoke/isolate.py, docs/ISOLATION.md): the suspects are
  split into groups run in parallel, failing groups split again, each suspect confirmed beside
  nodes already proven good; slow = busbw under the round's median by more than `slow_fraction`
  (0.3), or under `min_busbw_gbps`. One bad node among N is named in at most ceil(log2 N) + 2
  rounds. Each culprit gets a fail row with its evidence (the groups it was in, wrong sum / hang /
  slow with measured and expected busbw, the proven-good nodes beside it); a node whose rank
  cannot start (no torch, a taken port) is blamed without a collective; the cluster row lists the
  proven-good nodes. A whole selection that passed is surveyed once in up to four groups (slowness
  needs peers). `fanout` (2), `max_rounds` (12), `budget_s` (2400: a hung node among
  256 needs 9 rounds of up to 210 s) bound the isolation.
- `RANK_TABLE_FILE` in a launch environment is unset for the ranks (torch_npu would build the
  communicator from the job's table, whose ranks are not this check's), and noted; the table is
  hccl.ranktable's to check.
- With `run --history`: a pair's busbw (or the whole collective's, in mode all) at least 3 sigma
  and 10% under the same series' last stored values (10, at least 5) warns on the row and on the
  pair's two ends (MindCluster's slow-node rule; preflight/ops/baseline.py): a link degrading
  while it still passes beside its peers.

Why it matters: the last word before a launch. A collective that completes between two nodes with
the job's own environment separates fabric and environment problems from model code
(docs/MIGRATION.md); the typical failures (docs/FAILURES.md rows 4, 5, 9, 17-21, 24) all show up here in
seconds instead of after a 30-minute HCCL timeout in the real job.

How to fix: follow the remediation of the failing side: set GLOO_SOCKET_IFNAME/HCCL_SOCKET_IFNAME to
an UP interface that reaches the peer (`ip -br addr`), HCCL_IF_IP to the node's own address on the
training network, open the port range in the firewall (`iptables -S INPUT`), point the inventory's
`python` at the interpreter with torch (and torch_npu), raise HCCL_CONNECT_TIMEOUT for EI0006.
torch is not needed on the machine that runs preflight, only on the nodes.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from preflight import backend as backends, launchenv
from preflight.ascend import hccl_errors
from preflight.net import ifname
from preflight.checkapi import (Policy, Choice, ClusterContext, CommandOutput, Finding, Metric, Probe, Status, cmd, passed, sh,
                                skipped)
from preflight.checkhelpers import Shell, graded, seq, worst
from preflight.smoke import allreduce_worker as worker, isolate, worker_source

ID = "smoke.allreduce"
SCOPE = "cluster"
# On a node with a container: inside it. The ranks run with the container's python, torch and
# torch_npu (the host may have none) in its launch environment, and die with the run (container.py).
POLICY = Policy(
    where="job",
    disruptive=True,
    trend_metric=("busbw", False),
    baseline=True,  # with --history: a pair's (or the whole collective's) busbw 3 sigma under its own past warns
    cost="heavy",
    plan_rounds=24,  # pairs: 2 (the ends of failing pairs re-paired); all: the isolation's rounds (max_rounds bounds them)
)
USES = ("env.comm", "net.ports")
# What to do with a fail/warn (preflight/actions.py).
ACTIONS = {
    "below_min": ("monitor", "bandwidth below min_busbw_gbps: a degrading link, watch it"),
    "under_baseline": ("monitor", "busbw 3 sigma under its own stored baseline (MindCluster's slow-node rule; "
                       "preflight/ops/baseline.py): degrading, not yet broken"),
    "": ("fix_config", "an all-reduce that fails: interfaces, addresses, ports (docs/FAILURES.md rows 4-6, 17-21)"),
}
DEFAULTS: dict[str, Any] = {
    "nodes": None,  # [rank0, rank1] (pair) or the selection (pairs); default: picked from the reachable nodes
    "mode": Choice("pair", "pairs", "all"),
    "backend": Choice("auto", "hccl", "nccl", "gloo"),
    "port": None,  # the rendezvous port; default: the first free one of port_range on rank 0
    "port_range": "29400-29499",
    "size_mib": 64,
    "warmup": 2,
    "iters": 5,
    "rendezvous_timeout_s": 60,
    "run_timeout_s": 120,  # bounds warm-up and timed loop after the rendezvous
    "startup_s": 30,  # python + torch (+ torch_npu) import budget inside the probe timeout
    "min_busbw_gbps": None,
    "below_min": Choice("warn", "fail"),
    "device": 0,  # device index for hccl/nccl inside the launch environment's visible devices
    # mode all: one collective over every selected node, then isolation (preflight/smoke/isolate.py)
    "ranks_per_node": Choice("node", "devices"),  # one rank per node, or per NPU/GPU (ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES)
    "slow_fraction": 0.3,  # slow: busbw under the round's median by more than this; null: no relative rule, no survey
    "fanout": 2,  # parts a failing group is split into per isolation round
    "max_rounds": 12,  # rounds of mode all, the whole collective included
    "budget_s": 2400,  # a hung node among 256: 9 rounds of up to 210 s each (docs/PERFORMANCE.md §3); no new round starts once the rounds so far and the next one's timeout would pass this
}
SEP = "|"
PREFIX = "smoke"
TMP_PREFIX = ".pf-smoke."
WORKER_NAME = "allreduce_worker.py"
MARK = "pf_smoke"

# ---------------------------------------------------------------- remediations by error text

@dataclass(frozen=True)
class Diagnosis:
    kind: str
    local: bool  # the failing node's own setup is at fault (blame it); False: it waited on its peer
    remediation: str
    peer_unreachable: bool = False  # could not connect to the peer's store: blame the peer's side


R_IFNAME = ("GLOO_SOCKET_IFNAME (or HCCL_SOCKET_IFNAME) names an interface this node does not have: set it to "
            "the UP interface on the training network (`ip -br addr`), e.g. export GLOO_SOCKET_IFNAME=eth0")
R_MESH = ("Gloo could not connect the ranks: set GLOO_SOCKET_IFNAME on every node to the interface that reaches "
          "the other nodes (not lo, not docker0), check that hostname -i is not 127.x, and that no firewall "
          "drops TCP between the nodes (iptables -S INPUT)")
R_STORE = ("rank 1 could not reach rank 0's rendezvous address:port: check that the address is rank 0's on the "
           "training network (HCCL_IF_IP / MASTER_ADDR), that it is routed from rank 1 (ip route get ADDR), and "
           "that rank 0's firewall accepts the port (iptables -S INPUT; open the port range)")
R_WAIT = ("the peer never joined: look at the other rank's error first; otherwise check the network between the "
          "two nodes (ping, firewall) and raise rendezvous_timeout_s if one node starts late")
R_HANG = ("the rank hung until the timeout: check that both nodes reach each other on the communication "
          "interface (net.ping_mesh), that no firewall drops the ports, and that the devices are idle (npu.idle)")
R_BIND = ("the port is already in use on this node: stop the process holding it (ss -ltnp), or set this "
          "check's `port`/`port_range` (and HCCL_IF_BASE_PORT) to a free range")
R_TORCH = ("the inventory's `python` has no torch on this node: install torch (and torch_npu) there, or point "
           "`python:` at the interpreter of the training environment")
R_PYTHON = "the inventory's `python` is not runnable in the launch environment: fix `python:` or PATH (which python3)"
R_NPU = ("torch_npu or the NPUs are not usable here: source set_env.sh in the launch environment (env_files), "
         "install the torch_npu that matches torch, check npu-smi info")
R_CUDA = "CUDA is not usable here: check nvidia-smi, CUDA_VISIBLE_DEVICES and the torch build (torch.version.cuda)"
R_VISIBLE = ("the launch environment's ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES lists fewer devices than "
             "the inventory's `devices` for this node (ranks_per_node: devices starts one rank per device): make "
             "the two agree")
R_BACKEND = ("the nodes would use different backends: install torch_npu/CUDA identically on every node, or set "
             "this check's `backend:` explicitly")
R_SUM = ("the all_reduce completed with a wrong result: suspect the device or the fabric (run npu.health, "
         "hccn.* checks) and rerun; do not launch on these nodes")
R_HCCL = ("HCCL failed: read the EIxxxx code in the error and the plog (~/ascend/log), check HCCL_IF_IP, "
          "the device links (hccn.link) and identical CANN versions (sw.consistency)")
R_GENERIC = "read the error lines above; rerun the worker by hand on that node with the launch environment"
R_MISSING = "the rank produced no result line: rerun; if it persists, run the probe by hand on the node"

# Rules before HCCL's table (the rank never got to HCCL) and after it (torch/Gloo/c10d wordings).
_BEFORE_HCCL: list[tuple[re.Pattern[str], Diagnosis]] = [
    (re.compile(r"Unable to find address for|ifa != nullptr|Unable to find interface", re.I),
     Diagnosis("ifname", True, R_IFNAME)),
    (re.compile(r"No module named '?torch_npu|torch_npu does not work|no NPU is visible", re.I),
     Diagnosis("npu", True, R_NPU)),
    (re.compile(r"No module named '?torch\b", re.I), Diagnosis("no_torch", True, R_TORCH)),
    (re.compile(r"CUDA is not available", re.I), Diagnosis("cuda", True, R_CUDA)),
    (re.compile(r"visible devices: \w+=\S* lists only", re.I), Diagnosis("visible_devices", True, R_VISIBLE)),
    (re.compile(r"ranks picked different backends", re.I), Diagnosis("backend_mismatch", False, R_BACKEND)),
]
_AFTER_HCCL: list[tuple[re.Pattern[str], Diagnosis]] = [
    (re.compile(r"Address already in use|address in use|EADDRINUSE", re.I), Diagnosis("port_in_use", True, R_BIND)),
    (re.compile(r"connectFullMesh failed", re.I), Diagnosis("gloo_mesh", False, R_MESH)),
    (re.compile(r"client socket has (timed out|failed to connect)|failed to connect/validate|"
                r"Connection refused|No route to host|Network is unreachable", re.I),
     Diagnosis("store_unreachable", False, R_STORE, peer_unreachable=True)),
    (re.compile(r"wait timeout|Timed out waiting|Socket Timeout|timed out", re.I), Diagnosis("peer_wait", False, R_WAIT)),
    (re.compile(r"Connection reset|Broken pipe|Connection closed by peer|recvValue failed|recvBytes failed", re.I),
     Diagnosis("peer_gone", False, R_WAIT)),
    (re.compile(r"HCCL|HcclComm|error code is \d+", re.I), Diagnosis("hccl", False, R_HCCL)),
]
HANG = Diagnosis("hang", False, R_HANG)
WRONG_SUM = Diagnosis("wrong_sum", False, R_SUM)
NO_PYTHON = Diagnosis("no_python", True, R_PYTHON)
MISSING = Diagnosis("no_result", False, R_MISSING)
GENERIC = Diagnosis("error", True, R_GENERIC)


def _from_hccl(rule: hccl_errors.HcclRule) -> Diagnosis:
    return Diagnosis(rule.kind, rule.local, rule.remediation)


def diagnose(text: str) -> Diagnosis:
    """The first rule whose pattern appears in the error text: setup rules, then HCCL's error-code
    table (preflight/data/hccl_errors.yaml, each rule with its sources), then torch/Gloo/c10d."""
    for pattern, diag in _BEFORE_HCCL:
        if pattern.search(text):
            return diag
    rule = hccl_errors.classify(text)
    if rule is not None:
        return _from_hccl(rule)
    for pattern, diag in _AFTER_HCCL:
        if pattern.search(text):
            return diag
    return GENERIC


# ---------------------------------------------------------------- per-rank result

@dataclass(frozen=True)
class RankResult:
    """What one rank reported (its JSON line), or what its probe output says when there was none."""

    node: str
    rank: int
    ok: bool
    record: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    error_lines: tuple[str, ...] = ()
    phase: str | None = None
    diagnosis: Diagnosis | None = None

    @property
    def busbw(self) -> float | None:
        return _num(self.record.get("busbw_gbps"))


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _json_line(stdout: str, rank: int | None = None) -> dict[str, Any] | None:
    """The worker's result line (the given rank's, where a probe ran several)."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get(MARK) and (rank is None or rec.get("rank") in (rank, None)):
                return rec
    return None


def _lines(text: str, n: int = 6) -> tuple[str, ...]:
    """First meaningful lines of an error text (C++ stack frames left out)."""
    out = []
    for ln in text.splitlines():
        s = ln.strip()
        if not s or s.startswith(("frame #", "Exception raised from", "Traceback", "File \"")):
            continue
        out.append(s[:300])
        if len(out) >= n:
            break
    return tuple(out)


def first_error(text: str) -> str:
    """The line that says what went wrong: a Python traceback's exception line (the first line at
    column 0 after "Traceback (most recent call last):"), else the first meaningful line."""
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith("Traceback (most recent call last)"):
            exc = next((x.strip() for x in lines[i + 1:] if x.strip() and not x[:1].isspace()), None)
            if exc:
                return exc[:300]
    found = _lines(text, 1)
    return found[0] if found else ""


def parse_rank(node: str, rank: int, out: CommandOutput | None) -> RankResult:
    """One rank's probe output -> RankResult. Pure: works on recorded outputs."""
    if out is None:
        return RankResult(node, rank, False, error="the rank's probe did not run", diagnosis=MISSING)
    rec = _json_line(out.stdout, rank)
    if rec is not None:
        if rec.get("ok") and rec.get("sum_ok"):
            return RankResult(node, rank, True, rec, phase=rec.get("phase"))
        if rec.get("phase") == "done" and not rec.get("sum_ok"):
            return RankResult(node, rank, False, rec, rec.get("error") or "wrong all_reduce result",
                              (rec.get("error") or "",), "verify", WRONG_SUM)
        lines = tuple(str(x) for x in rec.get("error_lines") or ()) or (str(rec.get("error") or ""),)
        text = "\n".join(lines) + "\n" + out.stderr
        diag = HANG if rec.get("kind") == "hang" else diagnose(text)
        if diag is GENERIC and rec.get("kind") == "hang":
            diag = HANG
        return RankResult(node, rank, False, rec, str(rec.get("error") or first_error(text)),
                          _lines("\n".join(lines)) or _lines(out.stderr), rec.get("phase"), diag)
    err_lines = _lines(out.stderr) or _lines(out.stdout)
    if out.timed_out:
        return RankResult(node, rank, False, error=f"rank {rank} did not finish: {out.error or 'timed out'}",
                          error_lines=err_lines, phase="timeout",
                          diagnosis=diagnose(out.stderr) if diagnose(out.stderr) is not GENERIC else HANG)
    if out.rc == 127 or re.search(r"python[0-9.]*: (command )?not found|No such file or directory", out.stderr):
        return RankResult(node, rank, False, error=first_error(out.stderr) or "python not found",
                          error_lines=err_lines, phase="start", diagnosis=NO_PYTHON)
    text = out.stderr + "\n" + out.stdout
    diag = diagnose(text)
    why = out.error or f"exit {out.rc}"
    return RankResult(node, rank, False, error=f"no result line ({why}): {first_error(text) or 'no output'}",
                      error_lines=err_lines, phase="start", diagnosis=MISSING if diag is GENERIC and not text.strip() else diag)


def parse(outputs: Mapping[str, CommandOutput]) -> dict[str, Any]:
    """No node-scope probes of its own: the facts it reads are env.comm's and net.ports' (USES)."""
    return {}


# ---------------------------------------------------------------- choosing nodes, address, port

def _facts(ctx: ClusterContext, node: str, check: str) -> Any:
    return (ctx.facts.get(node) or {}).get(check)


def _looks_fine(ctx: ClusterContext, node: str) -> bool:
    """Whether env.comm's facts (USES, never its verdict: a check does not call another's hooks) show a
    launch environment this all-reduce can run in: the facts were read, the interfaces too, the
    backend's communication address (Facts.comm: HCCL_IF_IP, else what the SOCKET_IFNAME selects)
    is on an UP interface, and GLOO_SOCKET_IFNAME, where set, names UP interfaces with an address.
    These are the env.comm failures that break a collective; the others (a MASTER_ADDR that does
    not resolve, a value out of range) are env.comm's own row."""
    facts = _facts(ctx, node, "env.comm")
    if facts is None:
        return False
    try:
        if facts.ip_error:
            return False
        comm = facts.comm("nvidia" if _backend(ctx, node) == "nvidia" else "ascend")
        iface = facts.iface(comm.iface) if comm.ip and comm.iface else None
        if iface is None or not iface.up:
            return False
        names, bad = ifname.gloo_names(facts.env.get("GLOO_SOCKET_IFNAME", ""))
        gloo = [facts.iface(n) for n in names]
        return not bad and all(i is not None and i.up and not i.loopback and i.addresses(facts.family) for i in gloo)
    except AttributeError:  # facts of another shape: no preference, as before
        return True


def _machine_keys(ctx: ClusterContext, node: str) -> tuple[tuple, ...]:
    """What makes two inventory entries one machine: the same SSH endpoint as written, or the same
    communication address (HCCL_IF_IP / the GLOO_SOCKET_IFNAME interface's address), per jump host."""
    n = ctx.nodes[node]
    jump = getattr(n, "proxy_jump", None)
    return (("ssh", jump, str(n.host), int(getattr(n, "port", 22) or 22)), ("comm", jump, comm_address(ctx, node)[0]))


def same_machine(ctx: ClusterContext, names: list[str]) -> dict[str, str]:
    """{later node: the earlier node it shares an address with}: such nodes are never paired (a pair
    on one machine measures loopback, not the fabric; preflight.addresses warns about them at load)."""
    first: dict[tuple, str] = {}
    dups: dict[str, str] = {}
    for name in names:
        keys = _machine_keys(ctx, name)
        hit = next((first[k] for k in keys if k in first), None)
        if hit is not None:
            dups[name] = hit
            continue
        for k in keys:
            first[k] = name
    return dups


def select_nodes(ctx: ClusterContext) -> tuple[list[str], str | None]:
    """(selected nodes, problem). pair mode: exactly two; pairs mode: every selected node. A node that
    shares its address with an earlier one is left out (same_machine)."""
    p = ctx.params
    pairs = p.get("mode") in ("pairs", "all")
    wanted = p.get("nodes")
    if wanted:
        wanted = [str(x) for x in ([wanted] if isinstance(wanted, str) else wanted)]
        missing = [n for n in wanted if n not in ctx.nodes]
        if missing:
            why = "unreachable" if all(m in ctx.unreachable for m in missing) else "not reachable or not in the inventory"
            return [], f"node(s) {', '.join(missing)} named in smoke.allreduce nodes: are {why}"
        if not pairs and len(wanted) != 2:
            return [], f"smoke.allreduce nodes: needs exactly two nodes in pair mode, got {len(wanted)}"
        kinds = {_backend(ctx, n) for n in wanted}
        if not pairs and len(kinds) > 1:
            a, b = wanted
            return [], (f"smoke.allreduce nodes: {a} is {backends.NAMES[_backend(ctx, a)]} and {b} is "
                        f"{backends.NAMES[_backend(ctx, b)]}: an all-reduce never mixes the two backends")
        dups = same_machine(ctx, wanted)
        if dups and not pairs:
            a, b = wanted
            return [], (f"smoke.allreduce nodes: {a} and {b} reach the same address "
                        f"({comm_address(ctx, a)[0]}): one machine; name two different machines")
        kept = [n for n in wanted if n not in dups]
        return _one_backend(ctx, kept) if p.get("mode") == "all" else (kept, None)
    names = list(ctx.nodes)
    fine = [n for n in names if _looks_fine(ctx, n)]
    ordered = fine + [n for n in names if n not in fine]
    dups = same_machine(ctx, ordered)
    ordered = [n for n in ordered if n not in dups]
    if len(ordered) < 2:
        extra = f" ({len(dups)} more share an address with these)" if dups else ""
        return [], f"needs two reachable nodes on different machines, {len(ordered)} reachable{extra}"
    if p.get("mode") == "all":
        return _one_backend(ctx, ordered)
    if pairs:
        return ordered, None
    for n in ordered:  # the first two nodes of one backend, in order of preference
        same = [m for m in ordered if _backend(ctx, m) == _backend(ctx, n)]
        if len(same) >= 2:
            return same[:2], None
    return [], "needs two reachable nodes of one backend (an all-reduce never mixes Ascend and NVIDIA nodes)"


def _one_backend(ctx: ClusterContext, nodes: list[str]) -> tuple[list[str], str | None]:
    kinds = sorted({_backend(ctx, n) for n in nodes})
    if len(kinds) > 1:
        return [], ("smoke.allreduce mode all: the selection mixes " + " and ".join(backends.NAMES[k] for k in kinds)
                    + " nodes, and one all-reduce never spans both: select one kind with `nodes:`")
    return nodes, None


def _backend(ctx: ClusterContext, node: str) -> str:
    b = getattr(ctx.nodes.get(node), "backend", "ascend")
    return b if b in backends.NAMES else "ascend"


def comm_address(ctx: ClusterContext, node: str) -> tuple[str, str]:
    """(address, source): HCCL_IF_IP, else GLOO_SOCKET_IFNAME's interface address, else the host."""
    n = ctx.nodes[node]
    facts = _facts(ctx, node, "env.comm")
    env = dict(getattr(facts, "env", None) or {}) or dict(getattr(n, "env", {}) or {})
    ip = (env.get("HCCL_IF_IP") or "").strip()
    if ip:
        return ip, "HCCL_IF_IP"
    gloo = (env.get("GLOO_SOCKET_IFNAME") or "").split(",")[0].strip()
    if gloo and facts is not None:
        try:
            iface = facts.iface(gloo)
            family = getattr(facts, "family", "inet")
            if iface is not None and iface.addresses(family):
                return iface.addresses(family)[0].ip, f"GLOO_SOCKET_IFNAME={gloo}"
        except AttributeError:
            pass
    return str(n.host), "inventory host"


def _port_candidates(spec: Any) -> list[int]:
    text = str(spec or "").strip()
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        lo_i, hi_i = int(lo), int(hi or lo)
        if not (1024 <= lo_i <= hi_i <= 65535):
            raise ValueError(f"smoke.allreduce port_range {text!r}: ports must be within 1024-65535")
        out += list(range(lo_i, hi_i + 1))
    return out


def _listening_ports(ctx: ClusterContext, node: str) -> set[int]:
    facts = _facts(ctx, node, "net.ports")
    try:
        return {int(ls.port) for ls in getattr(facts, "listeners", ()) or ()}
    except (TypeError, ValueError, AttributeError):
        return set()


def choose_port(ctx: ClusterContext, rank0: str, taken: set[int]) -> int:
    """The `port` parameter, else the first port of the range not listening on rank 0 (net.ports
    facts, where present) and not used by another pair of this run."""
    if ctx.params.get("port"):
        return int(ctx.params["port"]) + len(taken)  # pairs mode: consecutive ports from the given one
    busy = _listening_ports(ctx, rank0) | taken
    for port in _port_candidates(ctx.params.get("port_range") or DEFAULTS["port_range"]):
        if port not in busy:
            return port
    raise ValueError(f"no free port in smoke.allreduce port_range {ctx.params.get('port_range')} on {rank0}")


# ---------------------------------------------------------------- the probe

def probe_timeout(params: Mapping[str, Any]) -> float:
    return (float(params.get("rendezvous_timeout_s") or 60) + float(params.get("run_timeout_s") or 120)
            + float(params.get("startup_s") or 30))


def rank_command(node: Any, rank: int, world: int, addr: str, port: int, params: Mapping[str, Any],
                 local: list[tuple[int, int]] | None = None) -> Shell:
    """Shell text for one rank (or, with `local` = [(rank, device), ...], one rank per device, each
    seeing only its own device): write the worker into a private temp dir, run it inside the node's
    launch environment with the inventory's python, remove everything on any exit."""
    ranks = local or [(rank, None)]
    base = {"world": world, "addr": addr, "port": int(port), "node": node.name,
            "backend": str(params.get("backend") or "auto"), "size_mib": float(params.get("size_mib") or 64),
            "warmup": int(params.get("warmup") or 2), "iters": int(params.get("iters") or 5),
            "timeout_s": float(params.get("rendezvous_timeout_s") or 60),
            "run_timeout_s": float(params.get("run_timeout_s") or 120), "device": int(params.get("device") or 0)}
    b64 = base64.b64encode(worker_source().encode()).decode()
    launches = []
    for r, dev in ranks:
        cfg = {**base, "rank": r} | ({"visible_device": dev, "device": 0} if dev is not None else {})
        run = sh('exec {py} "$PF_SMOKE_DIR"/{worker} {cfg}', py=node.python, worker=WORKER_NAME,
                 cfg=json.dumps(cfg, sort_keys=True))
        launches += [sh('PF_SMOKE_DIR="$d" {launch:raw} </dev/null &', launch=launchenv.command(node, run)),
                     sh('p="$p $!"')]
    return seq([
        sh("umask 077"),
        sh('d=$(mktemp -d "${{TMPDIR:-/tmp}}/"{prefix}XXXXXX) || {{ echo "preflight: mktemp failed" >&2; exit 97; }}',
           prefix=TMP_PREFIX),
        sh("p="),
        sh('cleanup() {{ [ -n "$p" ] && {{ kill -TERM $p 2>/dev/null; sleep 0.2; kill -KILL $p 2>/dev/null; }}; rm -rf "$d"; }}'),
        sh("trap cleanup EXIT"),
        sh("trap 'cleanup; exit 143' TERM INT HUP"),
        sh('printf %s {b64} | base64 -d >"$d"/{worker} || {{ echo "preflight: base64 -d failed" >&2; exit 97; }}',
           b64=b64, worker=WORKER_NAME),
        *launches,
        sh('rc=0; for q in $p; do wait "$q" || rc=$?; done; p='),
        sh('exit "$rc"'),
    ], "\n")


def probe_name(round_no: int, a: str, b: str, rank: int) -> str:
    return SEP.join((PREFIX, str(round_no), a, b, str(rank)))


def _pair_probes(ctx: ClusterContext, pairs: list[tuple[str, str]], round_no: int,
                 taken: set[int]) -> dict[str, dict[str, Probe]]:
    plan: dict[str, dict[str, Probe]] = {}
    timeout = probe_timeout(ctx.params)
    for a, b in pairs:
        addr, _ = comm_address(ctx, a)
        port = choose_port(ctx, a, taken)
        taken.add(port)
        for rank, node in ((0, a), (1, b)):
            text = rank_command(ctx.nodes[node], rank, 2, addr, port, ctx.params)
            plan.setdefault(node, {})[probe_name(round_no, a, b, rank)] = cmd(text, timeout=timeout)
    return plan


def pairing(nodes: list[str]) -> list[tuple[str, str]]:
    """Neighbours in order; an odd node out is paired with the first node (a second probe there,
    which runs after its first in that node's batch)."""
    pairs = [(nodes[i], nodes[i + 1]) for i in range(0, len(nodes) - 1, 2)]
    if len(nodes) % 2 and len(nodes) > 2:
        pairs.append((nodes[-1], nodes[0]))
    return pairs


def plan(ctx: ClusterContext) -> dict[str, dict[str, Probe]]:
    """Round 1: the pair (or all pairs). Round 2 (only when the runner calls plan again with round 1
    in ctx.planned): each failing pair's ends re-paired with nodes of passing pairs."""
    nodes, problem = select_nodes(ctx)
    if problem:
        return {}
    if ctx.params.get("mode") == "all":
        return _plan_all(ctx, nodes)
    done = _pairs_run(ctx)
    if not done:
        by_backend: dict[str, list[str]] = {}
        for n in nodes:
            by_backend.setdefault(_backend(ctx, n), []).append(n)
        return _pair_probes(ctx, [p for group in by_backend.values() for p in pairing(group)], 1, set())
    if ctx.params.get("mode") != "pairs" or any(r >= 2 for r, _, _ in done):
        return {}
    results = {k: pair_result(ctx, *k) for k in done}
    repairs = repair_plan(results, lambda n: _backend(ctx, n))
    return _pair_probes(ctx, repairs, 2, set()) if repairs else {}


def repair_plan(results: Mapping[tuple[int, str, str], "PairResult"], backend_of=lambda n: "") -> list[tuple[str, str]]:
    """Each end of a failing pair, paired with a distinct node of a passing pair (known good) of
    the same backend."""
    good = [n for (_, a, b), r in results.items() if r.ok for n in (a, b)]
    suspects = [n for (_, a, b), r in results.items() if not r.ok and not r.lost for n in (a, b)]
    out, i = [], 0
    for s in suspects:
        mine = [g for g in good if backend_of(g) == backend_of(s)]
        if not mine:
            continue
        out.append((mine[i % len(mine)], s))  # known-good node hosts rank 0: the suspect is rank 1
        i += 1
    return out


# ---------------------------------------------------------------- evaluation

@dataclass(frozen=True)
class PairResult:
    a: str
    b: str
    ranks: tuple[RankResult, RankResult]
    blamed: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()  # nodes whose rank output never came back (connection lost): could not tell

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.ranks)

    @property
    def busbw(self) -> float | None:
        vals = [r.busbw for r in self.ranks if r.busbw is not None]
        return min(vals) if vals else None  # the slower rank's view

    def metric(self, key: str) -> float | None:
        vals = [_num(r.record.get(key)) for r in self.ranks]
        vals = [v for v in vals if v is not None]
        return max(vals) if vals else None


def _pairs_run(ctx: ClusterContext) -> list[tuple[int, str, str]]:
    seen: dict[tuple[int, str, str], None] = {}
    for outs in ctx.planned.values():
        for name in outs:
            parts = name.split(SEP)
            if len(parts) == 5 and parts[0] == PREFIX and parts[1].isdigit():
                seen[(int(parts[1]), parts[2], parts[3])] = None
    return sorted(seen, key=lambda k: k[0])


def blame(r0: RankResult, r1: RankResult) -> tuple[str, ...]:
    """Which node(s) of a failed pair to name (see the module docstring)."""
    failed = [r for r in (r0, r1) if not r.ok]
    local = [r.node for r in failed if r.diagnosis is not None and r.diagnosis.local]
    if local:
        return tuple(local)
    if len(failed) == 1:
        return (failed[0].node,)
    if r1.diagnosis is not None and r1.diagnosis.peer_unreachable and not (r0.diagnosis and r0.diagnosis.peer_unreachable):
        return (r0.node,)  # rank 1 could not reach rank 0's store: rank 0's address/firewall
    if any(r.diagnosis is WRONG_SUM for r in failed):
        return (r0.node, r1.node)
    return (r0.node, r1.node)


def pair_result(ctx: ClusterContext, round_no: int, a: str, b: str) -> PairResult:
    o0 = (ctx.planned.get(a) or {}).get(probe_name(round_no, a, b, 0))
    o1 = (ctx.planned.get(b) or {}).get(probe_name(round_no, a, b, 1))
    r0, r1 = parse_rank(a, 0, o0), parse_rank(b, 1, o1)
    # A rank whose output never came back (no exit status, no hang: the connection was lost or the
    # run cut) says nothing about either node: the pair is could-not-tell, never a fail. A probe
    # absent from the plan (None) is still the plan's own failure (MISSING).
    lost = tuple(n for n, o in ((a, o0), (b, o1)) if o is not None and _lost(o))
    if lost:
        return PairResult(a, b, (r0, r1), (), lost)
    return PairResult(a, b, (r0, r1), () if (r0.ok and r1.ok) else blame(r0, r1))


def _lost_findings(pr: PairResult, details: Mapping[str, Any]) -> list[Finding]:
    why = "; ".join(f"{_side(r)}: {r.error or 'no result'}" for r in pr.ranks if r.node in pr.lost)
    head = Finding(Status.ERROR, f"could not tell: all_reduce {pr.a} <-> {pr.b}: connection lost before "
                   f"{', '.join(pr.lost)} reported ({why})"[:600], dict(details),
                   "rerun: the control host lost the connection to the node (or the run was cut), "
                   "so nothing about the node or the fabric follows from this pair")
    return [head] + [Finding(Status.ERROR, f"could not tell: {_side(r)}: connection lost ({r.error or 'no result'})"[:400],
                             _rank_detail(r), head.remediation, node=r.node) for r in pr.ranks if r.node in pr.lost]


def _metrics(pr: PairResult) -> list[dict[str, Any]]:
    labels = {"rank0": pr.a, "rank1": pr.b, "backend": str(pr.ranks[0].record.get("backend") or "")}
    out = []
    for name, key, unit in (("busbw", "busbw_gbps", "GB/s"), ("algbw", "algbw_gbps", "GB/s"),
                            ("allreduce_latency", "latency_ms", "ms"), ("allreduce_time", "time_ms", "ms")):
        vals = [v for v in (_num(r.record.get(key)) for r in pr.ranks) if v is not None]
        if vals:
            v = min(vals) if unit == "GB/s" else max(vals)  # the slower rank's view
            out.append(Metric(name, v, unit, labels).to_dict())
    return out


def _rank_detail(r: RankResult) -> dict[str, Any]:
    d: dict[str, Any] = {"node": r.node, "rank": r.rank, "ok": r.ok, "phase": r.phase}
    for k in ("backend", "busbw_gbps", "algbw_gbps", "latency_ms", "time_ms", "size_bytes", "got", "expected",
              "elapsed_s", "torch", "visible_devices", "rank_table_unset"):
        if k in r.record:
            d[k] = r.record[k]
    if not r.ok:
        d["error"] = r.error
        d["error_lines"] = list(r.error_lines)
        d["kind"] = r.diagnosis.kind if r.diagnosis else None
    return d


def _side(r: RankResult) -> str:
    return f"rank {r.rank} on {r.node}"


def _failure(pr: PairResult) -> tuple[str, str]:
    """(summary, remediation) of a failed pair, led by the side(s) blamed."""
    failed = [r for r in pr.ranks if not r.ok]
    lead = next((r for r in failed if r.node in pr.blamed and r.diagnosis and r.diagnosis.local), None) \
        or next((r for r in failed if r.diagnosis and r.diagnosis.peer_unreachable), None) or failed[0]
    others = [r for r in failed if r is not lead]
    summary = f"{_side(lead)} failed in {lead.phase or '?'}: {lead.error or 'no result'}"
    if others:
        o = others[0]
        summary += f"; {_side(o)}: {o.error or 'no result'}"
    diag = lead.diagnosis or GENERIC
    return summary[:600], diag.remediation


def _threshold(pr: PairResult, params: Mapping[str, Any]) -> tuple[Status, str] | None:
    limit = params.get("min_busbw_gbps")
    bw = pr.busbw
    if limit is None or bw is None or bw >= float(limit):
        return None
    status = Status.FAIL if str(params.get("below_min") or "warn") == "fail" else Status.WARN
    return status, f"busbw {bw:.3g} GB/s between {pr.a} and {pr.b} is under min_busbw_gbps {float(limit):g}"


R_SLOW = ("the fabric between these nodes is slower than expected: check the link speed (ethtool, hccn_tool "
          "-speed -g), that traffic uses the training NIC (HCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME), and "
          "whether other jobs share the link")


def evaluate(ctx: ClusterContext) -> list[Finding]:
    nodes, problem = select_nodes(ctx)
    if problem:
        if ctx.params.get("nodes"):
            return [Finding(Status.ERROR, problem)]
        return [skipped(problem)]
    if ctx.params.get("mode") == "all":
        return evaluate_all(ctx, nodes)
    runs = _pairs_run(ctx)
    if not runs:
        return [Finding(Status.ERROR, "no rank ran (the run was cut off, or the plan did not reach the nodes)")]
    results = {k: pair_result(ctx, *k) for k in runs}
    first = {k: r for k, r in results.items() if k[0] == 1}
    second = {k: r for k, r in results.items() if k[0] == 2}
    findings = (_evaluate_pair(next(iter(first.values())), ctx.params) if ctx.params.get("mode") != "pairs"
                else _evaluate_pairs(first, second, ctx.params))
    dups = same_machine(ctx, list(ctx.nodes))
    if dups:  # said where the verdict is: these entries were not paired with their twin
        findings[0].details["same_address"] = dups
    return findings


def _evaluate_pair(pr: PairResult, params: Mapping[str, Any]) -> list[Finding]:
    details: dict[str, Any] = {"rank0": pr.a, "rank1": pr.b, "ranks": [_rank_detail(r) for r in pr.ranks]}
    if pr.lost:
        details["lost"] = list(pr.lost)
        return _lost_findings(pr, details)
    if not pr.ok:
        summary, remedy = _failure(pr)
        details["blamed"] = list(pr.blamed)
        out = [Finding(Status.FAIL, f"all_reduce {pr.a} <-> {pr.b} failed: {summary}", details, remedy)]
        for node in pr.blamed:
            r = next(x for x in pr.ranks if x.node == node)
            why = r.error or "its peer could not reach it"
            rem = (r.diagnosis or GENERIC).remediation if not r.ok else remedy
            out.append(Finding(Status.FAIL, f"{_side(r)}: {why}"[:400], _rank_detail(r), rem, node=node))
        return out
    details["metrics"] = _metrics(pr)
    r0 = pr.ranks[0].record
    text = (f"all_reduce {pr.a} <-> {pr.b} ({r0.get('backend')}, {int(r0.get('size_bytes', 0)) / (1 << 20):g} MiB): "
            f"sum correct, busbw {pr.busbw or 0:.3g} GB/s, latency {pr.metric('latency_ms') or 0:.3g} ms")
    th = _threshold(pr, params)
    if th:
        return [Finding(th[0], f"{th[1]} ({text})", details, R_SLOW, action=graded(ACTIONS, "below_min"))]
    return [passed(text, **details)]


def _evaluate_pairs(first: Mapping[tuple[int, str, str], PairResult], second: Mapping[tuple[int, str, str], PairResult],
                    params: Mapping[str, Any]) -> list[Finding]:
    lost_pairs = [r for r in list(first.values()) + list(second.values()) if r.lost]
    bad_pairs = [r for r in first.values() if not r.ok and not r.lost]
    verdict: dict[str, str] = {}  # blamed node -> why
    remedies: dict[str, str] = {}
    for pr in bad_pairs:
        summary, remedy = _failure(pr)
        retests = [r for r in second.values() if (pr.a == r.b or pr.b == r.b) and not r.lost]
        if retests:  # round 2: the suspect as rank 1 with a known-good rank 0
            for rt in retests:
                if not rt.ok:
                    s, rem = _failure(rt)
                    verdict[rt.b] = f"failed with {pr.a if rt.b == pr.b else pr.b} and again with known-good {rt.a}: {s}"
                    remedies[rt.b] = rem
            if not any(n in verdict for n in (pr.a, pr.b)):
                for n in (pr.a, pr.b):
                    verdict[n] = f"the pair {pr.a} <-> {pr.b} failed, but each passed with a known-good node: {summary}"
                    remedies[n] = remedy
        else:
            for n in pr.blamed:
                verdict[n] = f"pair {pr.a} <-> {pr.b}: {summary}"
                remedies[n] = remedy
    metrics = [m for pr in first.values() if pr.ok for m in _metrics(pr)]
    slow = [(pr, th) for pr in first.values() if pr.ok and (th := _threshold(pr, params))]
    details: dict[str, Any] = {"pairs": [{"rank0": pr.a, "rank1": pr.b, "ok": pr.ok, "busbw_gbps": pr.busbw,
                                          "blamed": list(pr.blamed), "round": 1} for pr in first.values()]
                               + [{"rank0": pr.a, "rank1": pr.b, "ok": pr.ok, "blamed": list(pr.blamed), "round": 2}
                                  for pr in second.values()],
                               "metrics": metrics}
    if bad_pairs and not second:
        details["limitation"] = ("failing pairs were not re-paired (no known-good node to pair them with): both "
                                 "ends of a pair are named unless one side's own error points at it")
    out: list[Finding] = []
    if verdict:
        out.append(Finding(Status.FAIL, f"{len(bad_pairs)} of {len(first)} pair(s) failed; "
                           f"blamed: {', '.join(sorted(verdict))}", details, "see the per-node results"))
        out += [Finding(Status.FAIL, why[:400], {}, remedies[n], node=n) for n, why in sorted(verdict.items())]
    elif bad_pairs:
        out.append(Finding(Status.FAIL, f"{len(bad_pairs)} of {len(first)} pair(s) failed", details,
                           _failure(bad_pairs[0])[1]))
    if slow:
        status = worst(th[0] for _, th in slow)
        if not out:
            out.append(Finding(status, f"{len(slow)} of {len(first)} pair(s) under min_busbw_gbps", details, R_SLOW,
                               action=graded(ACTIONS, "below_min")))
        for pr, th in slow:
            for n in (pr.a, pr.b):
                if n not in verdict:
                    out.append(Finding(th[0], th[1], {}, R_SLOW, node=n, action=graded(ACTIONS, "below_min")))
    if lost_pairs:  # could not tell for these nodes: an error row each, never a fail and never a pass
        lost_nodes = sorted({n for pr in lost_pairs for n in pr.lost} - set(verdict))
        head = _lost_findings(lost_pairs[0], details)[0]
        if not out:
            out.append(Finding(Status.ERROR, f"could not tell: {len(lost_pairs)} pair(s) lost the connection before "
                               f"{', '.join(lost_nodes)} reported", details, head.remediation))
        for pr in lost_pairs:
            out += [f for f in _lost_findings(pr, {})[1:] if f.node in lost_nodes and f.node not in {x.node for x in out}]
    if not out:
        bws = [pr.busbw for pr in first.values() if pr.busbw is not None]
        out.append(passed(f"{len(first)} pair(s) passed all_reduce with the right sum; busbw min "
                          f"{min(bws) if bws else 0:.3g} GB/s", **details))
    return out


# ---------------------------------------------------------------- mode all: the whole selection, then isolation

ALL_PREFIX = "smoke-all"
# A rank's own setup broke (blamed without a collective): the local rules above and HCCL's table
# (hccl_ifname, port_in_use, hccl_env); not GENERIC, which is local only for want of a better guess.
LOCAL_KINDS = frozenset({"no_torch", "no_python", "port_in_use", "ifname", "npu", "cuda", "visible_devices",
                         "hccl_ifname", "hccl_env"})


def all_probe_name(round_no: int, group: int, node: str) -> str:
    return SEP.join((ALL_PREFIX, str(round_no), str(group), node))


def policy_of(params: Mapping[str, Any]) -> isolate.Policy:
    frac = params.get("slow_fraction")
    floor = params.get("min_busbw_gbps")
    return isolate.Policy(slow_fraction=None if frac is None else float(frac),
                          floor=None if floor is None else float(floor),
                          fanout=max(2, int(params.get("fanout") or 2)),
                          max_rounds=max(1, min(int(params.get("max_rounds") or 12), POLICY.plan_rounds)))


def _per_device(ctx: ClusterContext) -> bool:
    return str(ctx.params.get("ranks_per_node") or "node") == "devices"


def _ranks_of(ctx: ClusterContext, node: str) -> int:
    return max(1, int(getattr(ctx.nodes[node], "devices", 0) or 1)) if _per_device(ctx) else 1


def _group_ranks(ctx: ClusterContext, members: tuple[str, ...]) -> dict[str, list[int]]:
    """node -> its global ranks in this group (rank 0 on the first member)."""
    out, r = {}, 0
    for n in members:
        k = _ranks_of(ctx, n)
        out[n] = list(range(r, r + k))
        r += k
    return out


def _round_port(ctx: ClusterContext, rank0: str, round_no: int) -> int:
    """Each round one port further along the range, so a store of the round before (TIME_WAIT)
    never meets the next; the groups of one round have distinct rank-0 nodes, so they share it."""
    if ctx.params.get("port"):
        return int(ctx.params["port"]) + round_no - 1
    busy = _listening_ports(ctx, rank0)
    free = [p for p in _port_candidates(ctx.params.get("port_range") or DEFAULTS["port_range"]) if p not in busy]
    if not free:
        raise ValueError(f"no free port in smoke.allreduce port_range {ctx.params.get('port_range')} on {rank0}")
    return free[(round_no - 1) % len(free)]


@dataclass(frozen=True)
class GroupRun:
    """One group's collective in one round, as the isolation sees it, with its ranks for the report."""

    round: int
    members: tuple[str, ...]
    control: bool
    ranks: tuple[RankResult, ...]
    duration_s: float
    lost: tuple[str, ...] = ()  # nodes whose result never came back (connection lost): the outcome is unknown

    def result(self) -> isolate.Result:
        if self.lost:
            return isolate.Result(self.members, True, kind="connection_lost", control=self.control, unknown=True)
        failed = [r for r in self.ranks if not r.ok]
        local = tuple(dict.fromkeys(r.node for r in failed if r.diagnosis is not None and r.diagnosis.kind in LOCAL_KINDS))
        kinds = [r.diagnosis.kind for r in failed if r.diagnosis is not None]
        kind = next((k for k in ("wrong_sum", "hang") if k in kinds), kinds[0] if kinds else "")
        if local:
            kind = next(r.diagnosis.kind for r in failed if r.node in local and r.diagnosis is not None)
        bws = [r.busbw for r in self.ranks if r.busbw is not None]
        return isolate.Result(self.members, bool(failed), min(bws) if bws and not failed else None, kind, local,
                              self.control)


def _lost(out: CommandOutput | None) -> bool:
    """No exit status came back and the node did not hang (its remote timeout would say so): the
    control host lost the connection or the run was cut. Nothing about the node follows from it."""
    if out is None:
        return True
    return out.rc is None and not out.timed_out and not (out.error or "").startswith("no output for")


def all_history(ctx: ClusterContext, nodes: list[str]) -> list[list[GroupRun]]:
    """Replay the isolation over ctx.planned: round r's groups are next_round of the rounds before
    (the same pure function plan() used), its outcomes the ranks' lines under its probe names."""
    policy = policy_of(ctx.params)
    runs: list[list[GroupRun]] = []
    while True:
        groups = isolate.next_round(nodes, [[g.result() for g in rnd] for rnd in runs], policy)
        r = len(runs) + 1
        if not any(all_probe_name(r, gi, n) in (ctx.planned.get(n) or {}) for gi, (m, _) in enumerate(groups) for n in m):
            return runs
        rnd = []
        for gi, (members, control) in enumerate(groups):
            ranks, took, lost = [], 0.0, []
            for node, rs in _group_ranks(ctx, members).items():
                out = (ctx.planned.get(node) or {}).get(all_probe_name(r, gi, node))
                took = max(took, out.duration_s if out is not None else 0.0)
                ranks += [parse_rank(node, rank, out) for rank in rs]
                if _lost(out):
                    lost.append(node)
            rnd.append(GroupRun(r, members, control, tuple(ranks), took, tuple(lost)))
        runs.append(rnd)


def world_problem(ctx: ClusterContext, nodes: list[str]) -> str | None:
    """Why the whole selection cannot be checked exactly: its ranks' fp32 sum would pass 2**24
    (allreduce_worker.MAX_EXACT_WORLD ranks), where a healthy collective could read as a wrong sum."""
    world = sum(_ranks_of(ctx, n) for n in nodes)
    if world <= worker.MAX_EXACT_WORLD:
        return None
    return (f"smoke.allreduce mode all: {len(nodes)} nodes make {world} ranks, past the {worker.MAX_EXACT_WORLD} "
            f"whose fp32 sum of the known pattern is exact (a healthy collective could read as a wrong sum); "
            f"not run: select fewer nodes with `nodes:`" + (" or use ranks_per_node: node" if _per_device(ctx) else ""))


def _launch_env(ctx: ClusterContext, node: str) -> dict[str, str]:
    """The node's launch environment as env.comm read it (USES), else the inventory's `env`."""
    facts = _facts(ctx, node, "env.comm")
    return dict(getattr(facts, "env", None) or {}) or dict(getattr(ctx.nodes[node], "env", {}) or {})


def _some(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 4 else f"{', '.join(names[:3])} and {len(names) - 3} more"


def hccl_notes(ctx: ClusterContext, nodes: list[str]) -> list[str]:
    """What the Ascend nodes' launch environments change about this run: the job's own HCCL_BUFFSIZE
    under the message (the figure is then of several passes), HCCL_CONNECT_TIMEOUT past a round's
    watchdog (a dead peer then reads as a hang, before HCCL's EI0006 could name it)."""
    size = float(ctx.params.get("size_mib") or 64)
    watchdog = float(ctx.params.get("rendezvous_timeout_s") or 60) + float(ctx.params.get("run_timeout_s") or 120)
    small: dict[int, list[str]] = {}
    late: dict[float, list[str]] = {}
    tables: list[str] = []
    for n in nodes:
        if _backend(ctx, n) != "ascend":
            continue
        env = _launch_env(ctx, n)
        if env.get("RANK_TABLE_FILE"):
            tables.append(n)
        raise_to, mb = worker.hccl_buffsize(size, env)
        if raise_to is None and mb is not None and mb < size + 1:
            small.setdefault(mb, []).append(n)
        try:
            t = float(str(env.get("HCCL_CONNECT_TIMEOUT") or "").strip())
        except ValueError:
            continue
        if t > watchdog:
            late.setdefault(t, []).append(n)
    notes = [f"the job's HCCL_BUFFSIZE {mb} MB on {_some(ns)} is under the {size:g} MiB message: HCCL reduces it "
             f"in several passes, and the busbw is of that (kept: it is the job's setting)" for mb, ns in small.items()]
    notes += [f"HCCL_CONNECT_TIMEOUT {t:g} s on {_some(ns)} is past this check's watchdog of {watchdog:g} s "
              f"(rendezvous_timeout_s + run_timeout_s): a dead peer reads as a hang here, before HCCL's EI0006 "
              f"would name it; raise run_timeout_s above {t - float(ctx.params.get('rendezvous_timeout_s') or 60):g} "
              f"for HCCL's own diagnosis" for t, ns in late.items()]
    if tables:
        notes.append(f"RANK_TABLE_FILE is set on {_some(tables)}: this check's ranks run without it (torch_npu "
                     f"would build the communicator from the table, whose ranks are the whole job's, not this "
                     f"check's groups); hccl.ranktable checks the table against the cluster")
    return notes


def _spent(runs: list[list[GroupRun]]) -> float:
    """Seconds the rounds so far took (a round lasts as long as its slowest group)."""
    return sum(max((g.duration_s for g in rnd), default=0.0) for rnd in runs)


def _over_budget(ctx: ClusterContext, runs: list[list[GroupRun]]) -> bool:
    """budget_s: no new round once the rounds so far and the next round's timeout would pass it."""
    budget = float(ctx.params.get("budget_s") or DEFAULTS["budget_s"])
    return bool(runs) and _spent(runs) + probe_timeout(ctx.params) > budget


def stop_reason(ctx: ClusterContext, nodes: list[str], runs: list[list[GroupRun]]) -> str | None:
    """Why the isolation ended with groups still to run (max_rounds or budget_s); None when it was over."""
    history = [[g.result() for g in rnd] for rnd in runs]
    policy = policy_of(ctx.params)
    unbounded = dataclasses.replace(policy, max_rounds=len(runs) + 1)
    if not runs or not isolate.next_round(nodes, history, unbounded):
        return None
    if len(runs) >= policy.max_rounds:
        return f"max_rounds {policy.max_rounds} reached"
    if _over_budget(ctx, runs):
        return (f"budget_s {float(ctx.params.get('budget_s') or DEFAULTS['budget_s']):g} reached (the rounds took "
                f"{_spent(runs):.0f} s, a next round may take {probe_timeout(ctx.params):.0f} s)")
    return None


def _plan_all(ctx: ClusterContext, nodes: list[str]) -> dict[str, dict[str, Probe]]:
    if world_problem(ctx, nodes):
        return {}
    runs = all_history(ctx, nodes)
    timeout = probe_timeout(ctx.params)
    if _over_budget(ctx, runs):
        return {}
    groups = isolate.next_round(nodes, [[g.result() for g in rnd] for rnd in runs], policy_of(ctx.params))
    r = len(runs) + 1
    plan: dict[str, dict[str, Probe]] = {}
    for gi, (members, _) in enumerate(groups):
        addr, _ = comm_address(ctx, members[0])
        port = _round_port(ctx, members[0], r)
        ranks = _group_ranks(ctx, members)
        world = sum(len(v) for v in ranks.values())
        per_node = _per_device(ctx)
        for node, rs in ranks.items():
            local = [(rank, i) for i, rank in enumerate(rs)] if per_node else [(rank, None) for rank in rs]
            text = rank_command(ctx.nodes[node], rs[0], world, addr, port, ctx.params,
                                local=local if len(local) > 1 or per_node else None)
            plan.setdefault(node, {})[all_probe_name(r, gi, node)] = cmd(text, timeout=timeout)
    return plan


WHY_TEXT = {"wrong_sum": "wrong all_reduce result", "hang": "hung", "slow": "slow",
            # a rank's own setup (LOCAL_KINDS), and what a failed rank's diagnosis can be otherwise
            "no_torch": "no torch in its python", "no_python": "its python not runnable", "port_in_use": "port in use",
            "ifname": "socket interface not found", "npu": "torch_npu or NPUs unusable", "cuda": "CUDA unusable",
            "visible_devices": "fewer visible devices than the inventory says",
            "hccl_ifname": "HCCL_SOCKET_IFNAME names no NIC", "hccl_env": "HCCL environment invalid",
            "hccl_socket_timeout": "HCCL socket timeout", "hccl_transport": "HCCL transport error", "hccl": "HCCL error",
            "gloo_mesh": "Gloo could not connect the ranks", "store_unreachable": "rendezvous store unreachable",
            "peer_wait": "waited on a peer", "peer_gone": "a peer went away", "backend_mismatch": "ranks on different backends",
            "no_result": "no result", "error": "failed"}


def why_text(kind: str | None) -> str:
    """A failure kind in words (never a raw id like no_torch in a report)."""
    return WHY_TEXT.get(kind or "", (kind or "failed").replace("_", " "))


def _group_row(g: GroupRun, graded: isolate.Graded) -> dict[str, Any]:
    row: dict[str, Any] = {"round": g.round, "members": list(g.members), "outcome": graded.outcome,
                           "busbw_gbps": graded.result.busbw, "expected_gbps": graded.expected}
    if g.control:
        row["control"] = True
    if graded.result.failed:
        row["kind"] = graded.result.kind
        first = next((r for r in g.ranks if not r.ok), None)
        if first is not None:
            row["error"] = f"rank {first.rank} on {first.node}: {first.error or 'no result'}"[:300]
    return row


def _evidence_text(c: isolate.Culprit, slow_fraction: float | None) -> str:
    parts = []
    for g in c.evidence:
        others = [m for m in g.result.members if m != c.node]
        cleared = set(others) <= set(c.partners)
        who = (f"beside proven-good {', '.join(others)}" if cleared and len(others) <= 2
               else f"in a group of {len(g.result.members)}" + (", the others proven good" if cleared else ""))
        fig = ""
        if g.outcome == isolate.SLOW and g.result.busbw is not None:
            fig = f": busbw {g.result.busbw:.3g} GB/s"
            if g.expected is not None:
                fig += f" against the round's median {g.expected:.3g}"
        elif g.outcome == isolate.FAIL:
            fig = f": {why_text(g.result.kind)}"
        parts.append(f"round {g.round} {who}{fig}")
    return "; ".join(parts)


def _culprit_finding(c: isolate.Culprit, runs: list[list[GroupRun]], policy: isolate.Policy) -> Finding:
    mine = [(g, r) for rnd in runs for g in rnd if c.node in g.members for r in g.ranks if r.node == c.node]
    failed_rank = next((r for g, r in reversed(mine) if not r.ok), None)
    diag = (failed_rank.diagnosis if failed_rank is not None else None) or GENERIC
    details: dict[str, Any] = {"why": c.why, "kind": c.kind, "partners": list(c.partners),
                               "evidence": [{"round": g.round, "members": list(g.result.members), "outcome": g.outcome,
                                             "busbw_gbps": g.result.busbw, "expected_gbps": g.expected,
                                             "kind": g.result.kind} for g in c.evidence]}
    if failed_rank is not None:
        details["rank"] = _rank_detail(failed_rank)
    if c.why == "local":
        r = failed_rank
        return Finding(Status.FAIL, f"its rank could not start, so it was blamed without a collective: "
                       f"{(r.error if r else None) or c.kind}"[:400], details, diag.remediation, node=c.node)
    if c.why == "slow":
        conf = c.confirming
        bw = sorted(g.result.busbw for g in conf if g.result.busbw is not None)
        exp = sorted(g.expected for g in conf if g.expected is not None)
        details.update(measured_gbps=bw[len(bw) // 2] if bw else None, expected_gbps=exp[len(exp) // 2] if exp else None)
        frac = f" by more than {policy.slow_fraction:.0%}" if policy.slow_fraction is not None else ""
        text = (f"slow: busbw {details['measured_gbps'] or 0:.3g} GB/s beside proven-good nodes, expected "
                f"{details['expected_gbps'] or 0:.3g} GB/s (the round's median; under it{frac} in "
                f"{len(conf)} tests): {_evidence_text(c, policy.slow_fraction)}")
        return Finding(Status.FAIL, text[:600], details, R_SLOW, node=c.node)
    what = why_text(c.kind)
    text = f"{what} in every collective it joined: {_evidence_text(c, policy.slow_fraction)}"
    if failed_rank is not None and failed_rank.error:
        text += f"; its rank: {failed_rank.error}"
    remedy = R_SUM if c.kind == "wrong_sum" else R_HANG if c.kind == "hang" else diag.remediation
    return Finding(Status.FAIL, text[:600], details, remedy, node=c.node)


def _whole_metrics(g: GroupRun) -> list[dict[str, Any]]:
    labels = {"nodes": str(len(g.members)), "ranks": str(len(g.ranks)),
              "backend": str(g.ranks[0].record.get("backend") or "") if g.ranks else ""}
    out = []
    for name, key, unit in (("busbw", "busbw_gbps", "GB/s"), ("algbw", "algbw_gbps", "GB/s"),
                            ("allreduce_latency", "latency_ms", "ms"), ("allreduce_time", "time_ms", "ms")):
        vals = [v for v in (_num(r.record.get(key)) for r in g.ranks) if v is not None]
        if vals:
            out.append(Metric(name, min(vals) if unit == "GB/s" else max(vals), unit, labels).to_dict())
    return out


def _span(vals: list[float]) -> str:
    """'0.9-1.2', or one figure where the lowest and highest read alike."""
    lo, hi = f"{min(vals):.3g}", f"{max(vals):.3g}"
    return lo if lo == hi else f"{lo}-{hi}"


def evaluate_all(ctx: ClusterContext, nodes: list[str]) -> list[Finding]:
    too_big = world_problem(ctx, nodes)
    if too_big:
        return [Finding(Status.ERROR, too_big, {"nodes": len(nodes), "max_ranks": worker.MAX_EXACT_WORLD})]
    runs = all_history(ctx, nodes)
    if not runs:
        return [Finding(Status.ERROR, "no rank ran (the run was cut off, or the plan did not reach the nodes)")]
    policy = policy_of(ctx.params)
    history = [[g.result() for g in rnd] for rnd in runs]
    v = isolate.verdict(nodes, history, policy)
    graded = isolate.graded(history, policy)
    flat = [g for rnd in runs for g in rnd]
    whole, whole_graded = runs[0][0], graded[0]
    details: dict[str, Any] = {"nodes": len(nodes), "ranks": len(whole.ranks), "rounds": len(runs),
                               "groups": [_group_row(g, gr) for g, gr in zip(flat, graded)],
                               "good": v.good, "culprits": list(v.culprits), "unresolved": v.unresolved}
    rec = next((r.record for r in whole.ranks if r.record.get("backend")), {})
    head = f"all_reduce over {len(nodes)} nodes ({len(whole.ranks)} ranks"
    if rec:
        head += f", {rec.get('backend')}"
    if rec.get("size_bytes"):
        head += f", {int(rec['size_bytes']) / (1 << 20):g} MiB"
    head += ")"
    if not whole.result().failed:
        details["metrics"] = _whole_metrics(whole)
    notes = hccl_notes(ctx, nodes)
    if notes:
        details["notes"] = notes
    note = "".join(f"; note: {x}" for x in notes)
    out: list[Finding] = [_culprit_finding(c, runs, policy) for c in v.culprits.values()]
    stopped = stop_reason(ctx, nodes, runs)
    if stopped:
        details["stopped"] = stopped
    for n in v.unresolved:
        groups = {"groups": [_group_row(g, gr) for g, gr in zip(flat, graded) if n in g.members]}
        if n in v.unjudged:  # nothing points at it: its groups were explained by a culprit, or lost
            out.append(Finding(Status.ERROR, f"not judged within {len(runs)} round(s): its groups failed because of "
                               f"another node, or their outcome was lost with a connection; run again",
                               groups, R_MISSING, node=n))
            continue
        why = (f"the isolation stopped ({stopped}) before it was cleared or convicted" if stopped else
               "no round could split them further (no proven-good node to test it beside)")
        out.append(Finding(Status.FAIL, f"suspect, not isolated within {len(runs)} round(s): it was in failing or slow "
                           f"groups; {why}", groups, R_WAIT, node=n))
    bad_whole = whole_graded.outcome != isolate.OK
    if not out and not v.unexplained:
        bws = [g.result.busbw for g in graded[1:] if g.result.busbw is not None]
        text = f"{head}: sum correct" + (f", busbw {whole.result().busbw:.3g} GB/s" if whole.result().busbw else "")
        if rec.get("latency_ms") is not None:
            text += f", latency {max(_num(r.record.get('latency_ms')) or 0 for r in whole.ranks):.3g} ms"
        if len(runs) > 1:
            text += (f"; {len(runs) - 1} more round(s) of groups, no node slow or failing"
                     + (f" (busbw {_span(bws)} GB/s)" if bws else ""))
        return [passed(text + note, **details)]
    lead = ((why_text(whole_graded.result.kind) if whole_graded.result.kind in ("wrong_sum", "hang") else "failed")
            if whole_graded.result.failed
            else "was slow" if bad_whole else "had the right sum")
    names = ", ".join(f"{c.node} ({why_text(c.kind)})" for c in v.culprits.values())
    text = f"{head} {lead}; isolation in {len(runs)} round(s): "
    text += f"culprit(s) {names}" if names else "no culprit isolated"
    if v.unresolved:
        text += f"; not isolated: {', '.join(v.unresolved)}"
    if stopped:
        text += f"; stopped: {stopped}"
    if v.unexplained:
        details["unexplained"] = [{"round": g.round, "members": list(g.result.members), "outcome": g.outcome}
                                  for g in v.unexplained]
        text += (f"; {len(v.unexplained)} failing group(s) with no culprit (every subset passed: an intermittent "
                 "fault, or one between nodes of different halves)")
    lost = [g for g in flat if g.lost]
    if lost:
        details["lost"] = [{"round": g.round, "nodes": list(g.lost)} for g in lost]
        text += (f"; {len(lost)} group(s) without an outcome (the connection to "
                 f"{', '.join(sorted({n for g in lost for n in g.lost}))} was lost mid-round; run again)")
    text += f"; {len(v.good)} node(s) proven good" + note
    remedy = out[0].remediation if out else R_HANG
    return [Finding(Status.FAIL, text[:1200], details, remedy or "see the per-node results")] + out
