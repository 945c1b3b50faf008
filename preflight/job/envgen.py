"""The launch environment of every node, derived from what a run discovered there (`preflight env`).

Why derive instead of keeping two hand-written launch scripts (docs/MIGRATION.md §7): the communication
NIC, its address, the master's address on it, a free MASTER_PORT and the visible devices are facts
the checks already read on each node; a value written from them is right by construction, and when
a check they come from fails, no file is written at all (the caller refuses with the node and check).

Derived per node (docs/ENV.md for the variables):
  HCCL_IF_IP, HCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME   env.comm's communication interface and address
  MASTER_ADDR                                          the master's address on its communication NIC
  MASTER_PORT                                          free on the master (net.ports' listeners), outside
                                                       HCCL's host port range and the ephemeral range
  NNODES, NODE_RANK                                    the master is rank 0, then inventory order
  ASCEND_RT_VISIBLE_DEVICES                            npu.health's logical device ids, ascending
  job.hccl                                             HCCL_BUFFSIZE (MB), HCCL_CONNECT_TIMEOUT, ...
On NVIDIA nodes NCCL_SOCKET_IFNAME replaces the HCCL_* interface variables, and NCCL_IB_HCA names
the InfiniBand ports ib.link found Active/LinkUp (none found: not set, NCCL then picks for itself).
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping

from . import ENV_COMM, IB_LINK, NET_PORTS, NPU_HEALTH, check
from ..model import NodeStateKind, Report, Status
from ..registry import CONNECT_ID

# The checks whose facts the environment is derived from, in the order a refusal names them.
env_comm, net_ports, npu_health, ib_link = (check(c) for c in (ENV_COMM, NET_PORTS, NPU_HEALTH, IB_LINK))
DERIVED_FROM = (env_comm.ID, net_ports.ID, npu_health.ID, ib_link.ID)
MASTER_PORT_FIRST, MASTER_PORT_LAST = 29500, 29999  # torchrun's default, and where to look after it


class EnvRefused(Exception):
    """A check the environment derives from did not pass: (node, check, status, summary) per line."""

    def __init__(self, refusals: list["Refusal"]):
        super().__init__("; ".join(r.line() for r in refusals))
        self.refusals = refusals

    @property
    def incomplete(self) -> bool:
        """Only "could not tell" (unreachable, error): SPEC exit 3 rather than 1."""
        return all(r.status != Status.FAIL.value for r in self.refusals)


@dataclass(frozen=True)
class Refusal:
    node: str
    check: str
    status: str
    summary: str

    def line(self) -> str:
        return f"{self.node}: {self.check} {self.status}: {self.summary}"


@dataclass(frozen=True)
class NodeEnv:
    node: str
    host: str
    rank: int
    backend: str
    env: dict[str, str] = field(default_factory=dict)
    nproc_per_node: int = 0

    def sourceable(self, cluster: str | None) -> str:
        head = (f"# Launch environment of {self.node} (NODE_RANK {self.rank}) written by `preflight env`"
                f"{' for ' + cluster if cluster else ''}.\n# Derived from the nodes' own facts; source it "
                "before the launcher: . ./" + f"{self.node}.env\n")
        return head + "".join(f"export {k}={shlex.quote(v)}\n" for k, v in self.env.items())

    def torchrun(self, entry: str | None) -> str:
        """The launch line: every value one quoted word (an address or entry from a node or the
        inventory is data the operator pastes into a shell)."""
        words = ["env", *(f"{k}={v}" for k, v in self.env.items()), "torchrun", f"--nnodes={self.env['NNODES']}",
                 f"--node_rank={self.rank}", f"--nproc_per_node={self.nproc_per_node}",
                 f"--master_addr={self.env['MASTER_ADDR']}", f"--master_port={self.env['MASTER_PORT']}"]
        return shlex.join(words) + " " + (shlex.quote(entry) if entry else '"$TRAIN_SCRIPT"')

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "host": self.host, "rank": self.rank, "backend": self.backend,
                "nproc_per_node": self.nproc_per_node, "env": dict(self.env)}


def refusals(report: Report, checks: tuple[str, ...] = DERIVED_FROM) -> list[Refusal]:
    """Every node that was not reached, and every fail or error of a check the environment needs."""
    out = [Refusal(n.name, CONNECT_ID, "error", f"{n.state.value}: {n.error}")
           for n in report.nodes if n.state is not NodeStateKind.OK]
    down = {r.node for r in out}
    for r in report.results:
        if r.check in checks and r.node not in down and r.status in (Status.FAIL, Status.ERROR):
            out.append(Refusal(r.node or "cluster", r.check, r.status.value, r.summary))
    return out


def hccl_settings(job: Mapping[str, Any], validators: Mapping[str, Any], typos: Mapping[str, str],
                  params: Mapping[str, Any]) -> dict[str, str]:
    """job.hccl -> exported values, each checked by env.comm's own validator (HCCL_BUFFSIZE is MB)."""
    out = {}
    for name, value in (job.get("hccl") or {}).items():
        if name not in validators:
            hint = f" (did you mean {typos[name]}?)" if name in typos else ""
            raise ValueError(f"job.hccl: {name} is not an HCCL variable{hint}")
        text = str(value)
        check = validators[name]
        why = check(text, params) if check else None
        if why:
            raise ValueError(f"job.hccl: {name}={text!r}: {why}")
        out[name] = text
    return out


def master_port(wanted: int | None, listeners: list[int], hccl: list[tuple[int, int]],
                ephemeral: tuple[int, int] | None) -> tuple[int | None, str]:
    """The job's MASTER_PORT: `wanted` when it is usable, else the first usable port from 29500.
    Returns (port, why the wanted one was not usable or '')."""
    def problem(p: int) -> str:
        if p in listeners:
            return f"{p} is in use on the master"
        if any(lo <= p <= hi for lo, hi in hccl):
            return f"{p} is inside HCCL's host port range"
        if ephemeral and ephemeral[0] <= p <= ephemeral[1]:
            return f"{p} is inside the ephemeral range {ephemeral[0]}-{ephemeral[1]}"
        return ""
    if wanted is not None:
        why = problem(wanted)
        return (None, why) if why else (wanted, "")
    for p in range(MASTER_PORT_FIRST, MASTER_PORT_LAST + 1):
        if not problem(p):
            return p, ""
    return None, f"no free port in {MASTER_PORT_FIRST}-{MASTER_PORT_LAST}"


def ib_hca(ib: Any) -> str | None:
    """NCCL_IB_HCA from ib.link's facts: `=ca:port,...` of the InfiniBand ports that are Active/LinkUp
    (`=`: exact names, NCCL reads bare names as prefixes, so `mlx5_1` would also match `mlx5_10`)."""
    ports = [p.name for p in getattr(ib, "ports", ()) if p.up and p.link_layer == "InfiniBand"]
    return "=" + ",".join(ports) if ports else None


def visible(chips_ids: list[int], nproc: int | None) -> list[int]:
    ids = sorted(set(chips_ids))
    return ids[:nproc] if nproc else ids


def derive(inv, facts: Mapping[str, Mapping[str, Any]], report: Report) -> list[NodeEnv]:
    """Per-node environments from a finished run of DERIVED_FROM. Raises EnvRefused or ValueError."""
    refused = refusals(report)
    if refused:
        raise EnvRefused(refused)
    job = inv.job or {}
    hccl = hccl_settings(job, env_comm.VALIDATORS, env_comm.TYPOS, env_comm.DEFAULTS)
    nodes = list(inv.nodes)
    comm_facts = {n.name: facts[n.name][env_comm.ID] for n in nodes}
    master = next((n for n in nodes if comm_facts[n.name].is_master), nodes[0])
    order = [master] + [n for n in nodes if n is not master]
    backend_of = {n.name: ("nvidia" if n.backend == "nvidia" else "ascend") for n in nodes}
    m_comm = comm_facts[master.name].comm(backend_of[master.name])
    problems = [Refusal(n.name, env_comm.ID, "fail", "no usable communication interface with an address")
                for n in nodes if comm_facts[n.name].comm(backend_of[n.name]).ip is None]
    ports: net_ports.Facts = facts[master.name][net_ports.ID]
    params = master.check_params(net_ports.ID, net_ports.DEFAULTS)
    planned, _ = net_ports.ports_to_bind(ports, params, master)
    hccl_ranges = [(p.lo, p.hi) for p in planned if p.label.startswith("HCCL")]
    wanted = job.get("master_port")
    args = ([ls.port for ls in ports.listeners], hccl_ranges, ports.sysctl.ephemeral if ports.sysctl else None)
    port, why = master_port(wanted, *args)
    launch = comm_facts[master.name].env.get("MASTER_PORT", "").strip()
    if wanted is None and launch.isdigit():  # the launch environment's own port, when it is usable
        port = master_port(int(launch), *args)[0] or port
    if port is None:
        problems.append(Refusal(master.name, net_ports.ID, "fail", f"job.master_port {why}" if wanted else why))
    if problems:
        raise EnvRefused(problems)
    out = []
    for rank, n in enumerate(order):
        comm = comm_facts[n.name].comm(backend_of[n.name])
        env: dict[str, str] = {}
        if backend_of[n.name] == "nvidia":
            env["NCCL_SOCKET_IFNAME"] = f"={comm.iface}"  # exact name: NCCL reads a bare name as a prefix
            hca = ib_hca(facts[n.name].get(ib_link.ID))
            if hca:
                env["NCCL_IB_HCA"] = hca
        else:
            env.update(HCCL_IF_IP=comm.ip, HCCL_SOCKET_IFNAME=f"={comm.iface}")  # type: ignore[arg-type]
        env["GLOO_SOCKET_IFNAME"] = comm.iface  # type: ignore[assignment]
        env.update(MASTER_ADDR=m_comm.ip, MASTER_PORT=str(port), NNODES=str(len(order)), NODE_RANK=str(rank))  # type: ignore[arg-type]
        npu = facts[n.name].get(npu_health.ID)
        nproc = job.get("nproc_per_node")
        ids = visible([c.logical_id for c in npu.chips], nproc) if npu is not None and npu.chips else []
        if backend_of[n.name] == "ascend":
            if not ids or (nproc and len(ids) < nproc):
                raise EnvRefused([Refusal(n.name, npu_health.ID, "fail",
                                          f"{len(ids)} devices found, job.nproc_per_node is {nproc}")])
            env["ASCEND_RT_VISIBLE_DEVICES"] = ",".join(map(str, ids))
        if backend_of[n.name] == "ascend":
            env.update(hccl)
        out.append(NodeEnv(n.name, n.host, rank, backend_of[n.name], env, nproc or len(ids) or n.devices))
    return out


def run_and_derive(inv, transport, options) -> list[NodeEnv]:
    """Run the checks the environment derives from, then derive it (the runner keeps every node's facts)."""
    from ..runner import Runner

    r = Runner(inv, transport, options)
    report = r.run()
    facts = {name: run.facts for name, run in r.runs.items()}
    return derive(inv, facts, report)
