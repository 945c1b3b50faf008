"""env.comm: the launch environment selects a real, UP network interface for HCCL, Gloo and the rendezvous.

What it checks, in the node's launch environment (docs/SPEC.md §2.3: launch_shell, env_files, env):
- HCCL_IF_IP is an address of an UP, non-loopback interface of this node.
- HCCL_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME on NVIDIA) in their real syntax (`eth,enp` prefixes,
  `^` excludes, `=` exact names, `^=`) select at least one UP interface with an address;
  GLOO_SOCKET_IFNAME names existing UP interfaces exactly (Gloo has no `^`/`=` syntax: `^lo` there
  is an interface Gloo cannot find). When HCCL_IF_IP and an IFNAME are both set they agree.
- With none of them set on a host with several NICs, HCCL picks the first by name: a warning.
- MASTER_ADDR resolves on this node to a non-loopback address routed through the communication
  interface (or owned by this node: then this is the master node).
- On NVIDIA nodes: NCCL_IB_HCA (`mlx5`, `=mlx5_0:1,mlx5_1:1`, `^=mlx5_1`: NCCL's syntax) names HCAs
  and ports that exist and are Active/LinkUp (ibstat, ibstatus or /sys/class/infiniband, as ib.link
  reads them); NCCL_IB_DISABLE=1 while the node has Active InfiniBand ports warns (NCCL then runs
  over TCP sockets); NCCL_* names are real NCCL variables (typos get a hint, as for HCCL).
- HCCL_* names are real variables (HCCL_BUFFER_SIZE is a typo of HCCL_BUFFSIZE and does nothing);
  values are valid: HCCL_CONNECT_TIMEOUT 120-7200 s, HCCL_BUFFSIZE an integer number of MB,
  HCCL_IF_BASE_PORT 1024-65520, MASTER_PORT a port, ...

Why it matters: a wrong NIC is the most common multi-node launch failure on Ascend: HCCL link setup
fails or times out (EI0006), Gloo reports `connectFullMesh failed` or `Unable to find address for`,
c10d times out connecting to MASTER_ADDR (docs/FAILURES.md rows 4, 17-21).

How to fix: set HCCL_IF_IP to this node's address on the training network (`ip -br addr`), or
HCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME to that interface's name (`export GLOO_SOCKET_IFNAME=eth0`),
bring the interface up (`ip link set eth0 up`), spell the variables as documented.

Where the job runs in a container (`container:`), the launch environment is read inside it (the
image's ENV and the job's `-e` count); the interfaces, addresses and routes it is judged against
are the host's in host network mode, the container's own only when its `run_args` give another
network (docs/SPEC.md §2.10).

Other checks read `Facts`: `.env` (launch environment), `.interfaces`, `.comm(backend)` (the address
HCCL/NCCL will use), `.gloo_iface`, `.master_ips`, `.is_master`.
"""
from __future__ import annotations

import difflib
import functools
import ipaddress
import re
from dataclasses import dataclass, replace
from typing import Callable, Mapping

from preflight import launchenv, redact
from preflight.checkapi import Policy, CommandOutput, Finding, ParseError, Probe, Status, cmd
from preflight.checkhelpers import q, worst
from preflight.net import ifname, iproute, procnet
from preflight.net.iproute import Interface, Route
from preflight.nvidia import ibstat, probes as nv

ID = "env.comm"
SCOPE = "node"
POLICY = Policy(gate=True)
# What to do with a fail/warn (preflight/actions.py): interface and address variables are configuration.
ACTIONS = {"": ("fix_config", "HCCL/Gloo interface and MASTER_ADDR variables (docs/FAILURES.md rows 17-21)")}
DEFAULTS: dict = {
    "warn_implicit_nic": True,  # warn when HCCL would pick a NIC by name order on a multi-NIC host
    "buffsize_max_mb": 65536,  # HCCL_BUFFSIZE above this is almost surely bytes, not MB
}
IP_PROBE, MASTER_PROBE = "ip_addr", "master_addr"
ROUTE_MARK = "@@preflight-route"
IP_REMEDY = ("make /sys/class/net and /proc/net readable on the node (they are where `ip` is not installed), "
             "or install iproute2 (apt-get install iproute2 / yum install iproute)")
# Variables shown in details (values of secret-looking names are redacted anyway).
SHOWN = re.compile(r"^(HCCL_|NCCL_|GLOO_|MASTER_|ASCEND_RT_VISIBLE_DEVICES$|WORLD_SIZE$|NODE_RANK$|NNODES$|RANK$)")


@dataclass(frozen=True)
class Comm:
    """What a library will use on this node: the interface, its address, and why."""
    ip: str | None
    iface: str | None
    source: str  # HCCL_IF_IP | HCCL_SOCKET_IFNAME | NCCL_SOCKET_IFNAME | default


@dataclass(frozen=True)
class Facts:
    env: dict[str, str]
    interfaces: tuple[Interface, ...] = ()
    ip_error: str | None = None  # neither `ip` nor /sys/class/net + /proc/net readable: interfaces unknown
    net_source: str = ""  # where interfaces and routes came from: ip -j addr | ip addr | /sys/class/net + /proc/net
    master_addr: str | None = None
    master_ips: tuple[str, ...] = ()
    master_route: Route | None = None
    master_error: str | None = None
    family: str = "inet"
    ib_ports: tuple | None = None  # NVIDIA nodes: RDMA ports (preflight.nvidia.ibstat.Port); None: not read
    ib_source: str = ""

    @functools.cached_property  # asked by env.comm, net.ports and env.consistency for every node: worked out once
    def is_master(self) -> bool:
        """Owns a (non-loopback) resolved MASTER_ADDR on an UP interface (SPEC's master node)."""
        for ip in self.master_ips:
            owner = iproute.owner(self.interfaces, ip)
            if owner and owner.up and not ipaddress.ip_address(ip).is_loopback:
                return True
        return False

    def comm(self, backend: str = "ascend") -> Comm:
        """The communication address of this node: HCCL_IF_IP, else the first usable interface the
        IFNAME selects, else HCCL's default order (NCCL's on NVIDIA). Worked out once a backend:
        several rules and checks ask it of every node (the facts are frozen, so it cannot change)."""
        memo = self._comm_by_backend
        if backend not in memo:
            memo[backend] = self._comm(backend)
        return memo[backend]

    @functools.cached_property  # as is_master: kept beside the fields, not compared, not in asdict()
    def _comm_by_backend(self) -> dict[str, Comm]:
        return {}

    def _comm(self, backend: str) -> Comm:
        if backend != "nvidia" and self.env.get("HCCL_IF_IP"):
            owner = iproute.owner(self.interfaces, self.env["HCCL_IF_IP"].strip())
            return Comm(self.env["HCCL_IF_IP"].strip(), owner.name if owner else None, "HCCL_IF_IP")
        var = "NCCL_SOCKET_IFNAME" if backend == "nvidia" else "HCCL_SOCKET_IFNAME"
        if self.env.get(var):
            picked = ifname.usable(ifname.select(ifname.parse_prefix_list(self.env[var]), self.interfaces), self.family)
            return _comm_of(picked, self.family, var)
        cands = ifname.hccl_default(self.interfaces, self.family)
        if backend == "nvidia":  # NCCL skips docker and lo by default
            cands = [i for i in cands if not i.loopback and not i.name.startswith("docker")]
        return _comm_of(cands, self.family, "default")

    @property
    def gloo_iface(self) -> str | None:
        names, _ = ifname.gloo_names(self.env.get("GLOO_SOCKET_IFNAME", ""))
        return names[0] if names else None

    def iface(self, name: str) -> Interface | None:
        return next((i for i in self.interfaces if i.name == name), None)


def _comm_of(picked: list[Interface], family: str, source: str) -> Comm:
    for i in picked:
        if i.addresses(family):
            return Comm(i.addresses(family)[0].ip, i.name, source)
    return Comm(None, None, source)


# ---- probes and parse -------------------------------------------------------------------------

def _own_network(node) -> bool:
    """The job has interfaces and routes of its own (a fresh run with a non-host network mode)."""
    c = getattr(node, "container", None)
    return c is not None and c.own_network


def probes(node, params) -> dict[str, Probe]:
    """Where each probe looks on a node with `container:` (SPEC §2.10): the launch environment is
    the job's (inside the container: its image's ENV, its env_files); interfaces, addresses and the
    RDMA ports are the network namespace's, so the host's in host network mode (the job's mode for
    HCCL; container.runtime warns about any other), and the container's own only where the job's
    `run_args` give it another network."""
    net = _own_network(node)
    extra = {nv.IB_PROBE: replace(cmd(nv.IB_PORTS), job=net)} if getattr(node, "backend", "auto") == "nvidia" else {}
    env = {k: replace(p, job=True) for k, p in launchenv.probe(node).items()}
    return {**env, IP_PROBE: replace(cmd(iproute.ADDR_CMD), job=net), **extra}


def followup(outputs, node, params) -> dict[str, Probe]:
    """MASTER_ADDR is known only once the launch environment is read: resolve it and ask the route."""
    try:
        env = launchenv.parse(outputs.get(launchenv.PROBE_NAME))
    except ParseError:
        return {}
    addr = env.get("MASTER_ADDR", "").strip()  # resolved and routed where the interfaces are read
    return {MASTER_PROBE: replace(master_probe(addr, _family(env)), job=_own_network(node))} if addr else {}


def master_probe(addr: str, family: str = "inet") -> Probe:
    """getent, then `ip route get` of the first address; where `ip` is not installed, the kernel's
    route tables (procnet.route_to reads them as `ip route get` would, main table only)."""
    db = "ahostsv6" if family == "inet6" or ":" in addr else "ahostsv4"
    return cmd("getent {db} {addr}; echo {mark} $?; a=$(getent {db} {addr} | awk 'NR==1{{print $1}}'); "
               "if command -v ip >/dev/null 2>&1; then LC_ALL=C ip route get \"$a\" 2>&1; "
               "else echo {pmark}; for f in {files}; do echo \"@@file $f\"; cat \"$f\" 2>/dev/null; done; fi",
               db=db, addr=addr, mark=ROUTE_MARK, pmark=iproute.PROCNET_MARK,
               files=["/proc/net/route", "/proc/net/ipv6_route"])


def _family(env: Mapping[str, str]) -> str:
    return "inet6" if env.get("HCCL_SOCKET_FAMILY", "").strip() == "AF_INET6" else "inet"


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    """A node's communication facts; the checks that need them (net.ports, env.consistency, the
    ping mesh, the smoke test) USE them, so they are read once a node."""
    launch, out = outputs.get(launchenv.PROBE_NAME), outputs.get(IP_PROBE)
    master_out, ib_out = outputs.get(MASTER_PROBE), outputs.get(nv.IB_PROBE)
    env = launchenv.parse(launch)
    ifs, ip_error, source = (), None, ""
    if out is None or out.rc == 127 or (out.rc != 0 and not out.stdout.strip()):
        ip_error = (f"neither `ip` nor /sys/class/net + /proc/net could be read on this node (rc "
                    f"{out.rc if out else None}): {(out.stderr if out else '').strip()[:200]}")
    else:
        ifs, source = iproute.read_addr(out)
    master = env.get("MASTER_ADDR", "").strip() or None
    ips, route, merr = _master(master_out, ifs) if master else ((), None, None)
    ib, ib_source = None, ""
    if ib_out is not None and ib_out.ok:
        ib_source, ports = ibstat.read_probe(ib_out.stdout)
        ib = tuple(ports)
    return Facts(env, ifs, ip_error, source, master, ips, route, merr, _family(env), ib, ib_source)


def _master(out: CommandOutput | None, ifs: tuple[Interface, ...]) -> tuple[tuple[str, ...], Route | None, str | None]:
    """`getent ahostsv4` lines (`10.0.0.1  STREAM host`), the route marker, then `ip route get`
    (or, without `ip`, the kernel's route tables)."""
    if out is None:
        return (), None, "MASTER_ADDR was not resolved (probe not run)"
    head, sep, tail = out.stdout.partition(ROUTE_MARK)
    if not sep:
        raise ParseError("MASTER_ADDR probe: output cut short", out.stdout or out.stderr)
    ips = tuple(dict.fromkeys(line.split()[0] for line in head.splitlines() if line.split()))
    if not ips:
        return (), None, "does not resolve (getent found no address)"
    route_text = tail.split("\n", 1)[1] if "\n" in tail else ""
    if route_text.startswith(iproute.PROCNET_MARK):
        route = procnet.route_to(ips[0], route_text, ifs)
        if route is None or route.kind != "unicast" and route.kind != "local":
            return ips, None, f"no route to {ips[0]} in /proc/net/route ({'unreachable' if route else 'no entry covers it'})"
        return ips, route, None
    if "RTNETLINK" in route_text or "unreachable" in route_text.lower() or not route_text.strip():
        return ips, None, f"no route: {route_text.strip()[:200] or 'ip route get printed nothing'}"
    return ips, iproute.parse_route_get(route_text), None


# ---- rules ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Problem:
    status: Status
    message: str
    remediation: str


def _ifs_summary(facts: Facts) -> str:
    parts = []
    for i in facts.interfaces:
        addrs = ",".join(a.ip for a in i.addresses(facts.family)) or "no address"
        parts.append(f"{i.name} ({i.state()}, {addrs})")
    return "; ".join(parts) or "none"


def _fail(msg: str, fix: str, status: Status = Status.FAIL) -> list[Problem]:
    return [Problem(status, msg, fix)]


def rule_if_ip(facts: Facts, params, node) -> list[Problem]:
    value = facts.env.get("HCCL_IF_IP", "").strip()
    if not value:
        return []
    fix = f"set HCCL_IF_IP to an UP address of {node.name} (see `ip -br addr`) in the inventory env"
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        return _fail(f"HCCL_IF_IP={value!r} is not an IP address", fix)
    owner = iproute.owner(facts.interfaces, value)
    if owner is None:
        return _fail(f"HCCL_IF_IP={value} is not an address of {node.name}; interfaces: {_ifs_summary(facts)}", fix)
    if ip.is_loopback or owner.loopback:
        return _fail(f"HCCL_IF_IP={value} is a loopback address: other nodes cannot reach it", fix)
    if not owner.up:
        return _fail(f"HCCL_IF_IP={value} is on {owner.name}, which is {owner.state()}, expected UP",
                     f"bring the interface up: `ip link set {q(owner.name)} up` (check the cable/switch port)")
    return []


def rule_prefix_ifname(var: str) -> Callable[[Facts, dict, object], list[Problem]]:
    def rule(facts: Facts, params, node) -> list[Problem]:
        value = facts.env.get(var, "")
        if not value.strip():
            return []
        spec = ifname.parse_prefix_list(value)
        fix = f"set {var} to the training NIC of {node.name} (e.g. `export {var}=eth0`; see `ip -br addr`)"
        if not spec.names:
            return _fail(f"{var}={value!r} names no interface", fix)
        picked = ifname.select(spec, facts.interfaces)
        good = [i for i in ifname.usable(picked, facts.family) if not i.loopback]
        if not good:
            seen = ", ".join(f"{i.name} ({i.state()})" for i in picked) or "no interface matches"
            return _fail(f"{var}={value} selects no UP non-loopback interface with an address ({seen}); "
                         f"interfaces: {_ifs_summary(facts)}", fix)
        return []
    return rule


def rule_gloo(facts: Facts, params, node) -> list[Problem]:
    value = facts.env.get("GLOO_SOCKET_IFNAME", "")
    if not value.strip():
        return []
    names, bad = ifname.gloo_names(value)
    fix = f"set GLOO_SOCKET_IFNAME to exact interface names of {node.name} (e.g. `export GLOO_SOCKET_IFNAME=eth0`)"
    if bad:
        return _fail(f"GLOO_SOCKET_IFNAME={value} uses NCCL-style syntax ({', '.join(bad)}); Gloo takes exact "
                     f"interface names only and fails with `Unable to find address for: {bad[0]}`", fix)
    problems = []
    for name in names:
        iface = facts.iface(name)
        if iface is None:
            problems += _fail(f"GLOO_SOCKET_IFNAME={value}: no interface {name} on {node.name}; "
                              f"interfaces: {_ifs_summary(facts)}", fix)
        elif not iface.up or not iface.addresses(facts.family):
            problems += _fail(f"GLOO_SOCKET_IFNAME={value}: {name} is {iface.state()} with "
                              f"{'no address' if not iface.addresses(facts.family) else 'an address'}, expected UP with an address",
                              f"bring {name} up and address it (`ip link set {q(name)} up`), or name another interface")
        elif iface.loopback:
            problems += _fail(f"GLOO_SOCKET_IFNAME={value}: {name} is loopback; other nodes cannot reach it", fix)
    return problems


def _network_of(facts: Facts, ip: str | None):
    owner = iproute.owner(facts.interfaces, ip) if ip else None
    for a in owner.addrs if owner else ():
        if a.ip == ip:
            return a.network
    return None


def rule_agree(facts: Facts, params, node) -> list[Problem]:
    """HCCL_IF_IP vs HCCL_SOCKET_IFNAME, and Gloo's NIC vs HCCL's: same interface or subnet."""
    problems = []
    if_ip = facts.env.get("HCCL_IF_IP", "").strip()
    if if_ip and facts.env.get("HCCL_SOCKET_IFNAME", "").strip():
        picked = ifname.select(ifname.parse_prefix_list(facts.env["HCCL_SOCKET_IFNAME"]), facts.interfaces)
        owner = iproute.owner(facts.interfaces, if_ip)
        if owner and owner.name not in {i.name for i in picked}:
            problems += _fail(
                f"HCCL_IF_IP={if_ip} is on {owner.name} but HCCL_SOCKET_IFNAME={facts.env['HCCL_SOCKET_IFNAME']} "
                f"selects {', '.join(i.name for i in picked) or 'nothing'}; HCCL_IF_IP wins, the two disagree",
                f"make them name the same NIC (`export HCCL_SOCKET_IFNAME={q(owner.name)}`) or unset one", Status.WARN)
    gloo = facts.gloo_iface
    comm = facts.comm(getattr(node, "backend", "ascend"))
    g = facts.iface(gloo) if gloo else None
    if g and g.up and comm.iface and comm.ip and g.name != comm.iface:
        net = _network_of(facts, comm.ip)
        if net is None or not any(ipaddress.ip_address(a.ip) in net for a in g.addresses(facts.family)):
            problems += _fail(
                f"GLOO_SOCKET_IFNAME={gloo} is not on the HCCL network ({comm.iface} {comm.ip}, {net})",
                f"point both at the training NIC: `export GLOO_SOCKET_IFNAME={q(comm.iface)}`", Status.WARN)
    return problems


def _hccl_unset(facts: Facts) -> bool:
    return not facts.env.get("HCCL_IF_IP", "").strip() and not facts.env.get("HCCL_SOCKET_IFNAME", "").strip()


def rule_implicit(facts: Facts, params, node) -> list[Problem]:
    if not params.get("warn_implicit_nic", True) or getattr(node, "backend", "ascend") == "nvidia" or not _hccl_unset(facts):
        return []
    real = [i for i in ifname.hccl_default(facts.interfaces, facts.family)
            if not i.loopback and not i.name.startswith("docker")]
    if len(real) < 2:
        return []
    return _fail(f"neither HCCL_IF_IP nor HCCL_SOCKET_IFNAME is set and {node.name} has {len(real)} NICs "
                 f"({', '.join(i.name for i in real)}): HCCL picks {real[0].name} by name order",
                 "set HCCL_SOCKET_IFNAME=<training NIC> (or HCCL_IF_IP) in the inventory env", Status.WARN)


def rule_nccl_on_ascend(facts: Facts, params, node) -> list[Problem]:
    """docs/MIGRATION.md: NCCL_SOCKET_IFNAME carried over from an NVIDIA script does nothing on Ascend."""
    if getattr(node, "backend", "auto") != "ascend" or not facts.env.get("NCCL_SOCKET_IFNAME", "").strip():
        return []
    if not _hccl_unset(facts):
        return []
    return _fail(f"NCCL_SOCKET_IFNAME={facts.env['NCCL_SOCKET_IFNAME']} has no effect on Ascend and "
                 "HCCL_SOCKET_IFNAME is unset", "set HCCL_SOCKET_IFNAME (same syntax) or HCCL_IF_IP instead",
                 Status.WARN)


def rule_master(facts: Facts, params, node) -> list[Problem]:
    addr = facts.master_addr
    if not addr:
        return []
    fix = "set MASTER_ADDR to the master node's address on the training network (not 127.x), resolvable on every node"
    if facts.master_error and not facts.master_ips:
        return _fail(f"MASTER_ADDR={addr} {facts.master_error} on {node.name}", fix)
    loop = [ip for ip in facts.master_ips if ipaddress.ip_address(ip).is_loopback]
    if loop and len(loop) == len(facts.master_ips):
        return _fail(f"MASTER_ADDR={addr} resolves to loopback {loop[0]} on {node.name}: other ranks cannot connect", fix)
    if facts.master_error:
        return _fail(f"MASTER_ADDR={addr} ({facts.master_ips[0]}) is not reachable from {node.name}: {facts.master_error}",
                     f"add a route to {facts.master_ips[0]} through the training NIC, or fix MASTER_ADDR")
    route, comm = facts.master_route, facts.comm(getattr(node, "backend", "ascend"))
    if route and route.kind == "local" or facts.is_master:
        return []
    if route and comm.iface and route.dev != comm.iface:
        return _fail(f"MASTER_ADDR={addr} ({facts.master_ips[0]}) is routed via {route.dev}"
                     f"{' gateway ' + route.via if route.via else ''}, not the communication interface "
                     f"{comm.iface} ({comm.ip})", "use the master's address on the training network as MASTER_ADDR, "
                     "or set HCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME to the NIC that reaches it", Status.WARN)
    return []


# ---- variable names and values -----------------------------------------------------------------

def _int_in(lo: int, hi: int, unit: str = "") -> Callable[[str, dict], str | None]:
    def check(value: str, params) -> str | None:
        v = value.strip()
        if not re.fullmatch(r"\d+", v):
            return f"not an integer{unit}"
        return None if lo <= int(v) <= hi else f"outside {lo}-{hi}{unit}"
    return check


def _one_of(*allowed: str) -> Callable[[str, dict], str | None]:
    return lambda value, params: None if value.strip() in allowed else f"expected one of {', '.join(allowed)}"


def _buffsize(value: str, params) -> str | None:
    v = value.strip()
    if not re.fullmatch(r"\d+", v) or int(v) < 1:
        return "expected an integer number of MB >= 1 (default 200)"
    if int(v) > params.get("buffsize_max_mb", 65536):
        return f"{v} MB is larger than device memory; the unit is MB, not bytes (200 means 200 MB)"
    return None


def _ip(value: str, params) -> str | None:
    try:
        ipaddress.ip_address(value.strip())
    except ValueError:
        return "not an IP address"
    return None


def _port_list(value: str, params) -> str | None:
    if value.strip() == "auto":
        return None
    from preflight.net.sockets import parse_port_list
    try:
        parse_port_list(value.replace('"', "").replace("[", "").replace("]", ""))
    except ValueError as exc:
        return str(exc)
    return None


def _algo(value: str, params) -> str | None:
    algo = r"(NA|ring|H-D_R|NHR|NHR_V1|NB|AHC|pipeline|pairwise)"
    level = rf"level[0-2]:{algo}"
    op = rf"((allgather|reducescatter|allreduce|broadcast|reduce|scatter|alltoall)=)?{level}(;{level})*"
    return None if re.fullmatch(rf"{op}(/{op})*", value.strip()) else "not HCCL_ALGO syntax (level0:NA;level1:<algo>)"


# name -> validator; the table is also the list of known names (typo detection compares against it).
VALIDATORS: dict[str, Callable[[str, dict], str | None] | None] = {
    "HCCL_IF_IP": _ip,
    "HCCL_SOCKET_IFNAME": None,
    "HCCL_SOCKET_FAMILY": _one_of("AF_INET", "AF_INET6"),
    "HCCL_IF_BASE_PORT": _int_in(1024, 65520),
    "HCCL_HOST_SOCKET_PORT_RANGE": _port_list,
    "HCCL_NPU_SOCKET_PORT_RANGE": _port_list,
    "HCCL_CONNECT_TIMEOUT": _int_in(120, 7200, " s"),
    "HCCL_EXEC_TIMEOUT": _int_in(0, 2147483647, " s"),
    "HCCL_BUFFSIZE": _buffsize,
    "HCCL_DETERMINISTIC": _one_of("0", "1", "2", "true", "false", "TRUE", "FALSE", "True", "False"),
    "HCCL_WHITELIST_DISABLE": _one_of("0", "1"),
    "HCCL_WHITELIST_FILE": None,
    "HCCL_INTRA_ROCE_ENABLE": _one_of("0", "1"),
    "HCCL_INTRA_PCIE_ENABLE": _one_of("0", "1"),
    "HCCL_ALGO": _algo,
    "HCCL_OP_EXPANSION_MODE": None, "HCCL_MIN_COMPUTE_CORE_NUM": None, "HCCL_RDMA_TC": None,
    "HCCL_RDMA_SL": None, "HCCL_RDMA_TIMEOUT": None, "HCCL_RDMA_RETRY_CNT": None, "HCCL_EVENT_TIMEOUT": None,
    "HCCL_ENTRY_LOG_ENABLE": None, "HCCL_DIAGNOSE_ENABLE": None, "HCCL_OP_BASE_FFTS_MODE_ENABLE": None,
    "HCCL_RDMA_PCIE_DIRECT_POST_NOSTRICT": None,
    "MASTER_PORT": _int_in(1, 65535),
    "MASTER_ADDR": None,
}
# Misspellings seen in the field whose distance alone would not tell (docs/MIGRATION.md: HCCL_BUFFER_SIZE).
TYPOS = {"HCCL_BUFFER_SIZE": "HCCL_BUFFSIZE", "HCCL_BUFF_SIZE": "HCCL_BUFFSIZE", "HCCL_IFIP": "HCCL_IF_IP"}


def rule_names(facts: Facts, params, node) -> list[Problem]:
    problems = []
    known = [k for k in VALIDATORS if k.startswith("HCCL_")]
    for name in sorted(k for k in facts.env if k.startswith("HCCL_") and k not in VALIDATORS):
        close = TYPOS.get(name) or next(iter(difflib.get_close_matches(name, known, n=1, cutoff=0.85)), None)
        if close:
            problems += _fail(f"{name} is not an HCCL variable (did you mean {close}?); HCCL ignores it",
                              f"rename it: `export {close}={_suggest(name, close, facts.env[name])}` and remove {name}",
                              Status.WARN)
    return problems


def _suggest(name: str, real: str, value: str) -> str:
    """HCCL_BUFFER_SIZE=209715200 (bytes, docs/MIGRATION.md) becomes HCCL_BUFFSIZE=200 (MB)."""
    v = value.strip()
    if real == "HCCL_BUFFSIZE" and v.isdigit() and int(v) >= 1 << 20:
        return str(int(v) >> 20)
    return q(v)


def rule_values(facts: Facts, params, node) -> list[Problem]:
    problems = []
    for name, check in VALIDATORS.items():
        if check is None or name not in facts.env:
            continue
        why = check(facts.env[name], params)
        if why:
            problems += _fail(f"{name}={facts.env[name]!r}: {why}", f"fix {name} in the inventory env (see docs/ENV.md / the CANN env reference)")
    return problems


# ---- NCCL (NVIDIA nodes) -------------------------------------------------------------------------
# The variables of NCCL's "Environment Variables" page (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html),
# the list NCCL_* names are compared against for typo hints.
NCCL_KNOWN = (
    "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY", "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD", "NCCL_IB_HCA",
    "NCCL_IB_DISABLE", "NCCL_IB_GID_INDEX", "NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT", "NCCL_IB_SL", "NCCL_IB_TC",
    "NCCL_IB_QPS_PER_CONNECTION", "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_IB_ROCE_VERSION_NUM",
    "NCCL_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE", "NCCL_IB_MERGE_VFS", "NCCL_IB_MERGE_NICS", "NCCL_NET", "NCCL_NET_PLUGIN",
    "NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_READ", "NCCL_NET_SHARED_BUFFERS", "NCCL_CROSS_NIC", "NCCL_TOPO_FILE",
    "NCCL_TOPO_DUMP_FILE", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE", "NCCL_BUFFSIZE",
    "NCCL_NTHREADS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS", "NCCL_ALGO", "NCCL_PROTO", "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_COLLNET_ENABLE", "NCCL_NVLS_ENABLE", "NCCL_LAUNCH_MODE",
    "NCCL_IGNORE_CPU_AFFINITY", "NCCL_CONF_FILE", "NCCL_CUMEM_ENABLE", "NCCL_NET_GDR_C2C",
    "NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT",  # read by older torch releases, not by NCCL
)


def _hca_tokens(value: str) -> tuple[bool, bool, list[tuple[str, int | None]]]:
    """NCCL_IB_HCA -> (exclude, exact, [(name, port or None)]): `^` excludes, `=` exact names,
    `:N` a port (NCCL's syntax)."""
    v = value.strip()
    exclude = v.startswith("^")
    v = v[1:] if exclude else v
    exact = v.startswith("=")
    v = v[1:] if exact else v
    out = []
    for tok in filter(None, (t.strip() for t in v.split(","))):
        name, _, port = tok.partition(":")
        out.append((name, int(port) if port.isdigit() else None))
    return exclude, exact, out


def _hca_match(p, name: str, port: int | None, exact: bool) -> bool:
    return (p.ca == name if exact else p.ca.startswith(name)) and (port is None or p.port == port)


def rule_nccl_ib_hca(facts: Facts, params, node) -> list[Problem]:
    value = facts.env.get("NCCL_IB_HCA", "")
    if not value.strip() or facts.ib_ports is None:
        return []
    ports = facts.ib_ports
    have = ", ".join(f"{p.name} {p.state}/{p.phys_state}" for p in ports) or "none"
    fix = f"set NCCL_IB_HCA to Active HCAs of {node.name} (`ibstat`; e.g. `=mlx5_0:1,mlx5_1:1`), or fix the port"
    if not ports:
        return _fail(f"NCCL_IB_HCA={value} but {node.name} has no RDMA device (no ibstat, ibstatus or "
                     f"/sys/class/infiniband)", "unset NCCL_IB_HCA on this node, or install the HCA driver (rdma-core)")
    exclude, exact, tokens = _hca_tokens(value)
    if exclude:
        left = [p for p in ports if not any(_hca_match(p, n, pt, exact) for n, pt in tokens)]
        if not any(p.up for p in left):
            return _fail(f"NCCL_IB_HCA={value} leaves no Active port on {node.name} (ports: {have})", fix)
        return []
    problems = []
    for name, port in tokens:
        matched = [p for p in ports if _hca_match(p, name, port, exact)]
        label = f"{name}:{port}" if port is not None else name
        if not matched:
            problems += _fail(f"NCCL_IB_HCA={value}: no HCA {label} on {node.name} (ports: {have})", fix)
        for p in matched:
            if not p.up:
                problems += _fail(f"NCCL_IB_HCA={value}: {p.name} is {p.state}/{p.phys_state}, expected Active/LinkUp",
                                  f"check the cable and switch port of {p.name} (`ibstat {q(p.ca)}`), or leave it out of NCCL_IB_HCA")
    return problems


def rule_nccl_ib_disable(facts: Facts, params, node) -> list[Problem]:
    if facts.env.get("NCCL_IB_DISABLE", "").strip() != "1" or not facts.ib_ports:
        return []
    ib = [p for p in facts.ib_ports if p.up and p.link_layer == "InfiniBand"]
    if not ib:
        return []
    return _fail(f"NCCL_IB_DISABLE=1 while {node.name} has {len(ib)} Active InfiniBand port(s) "
                 f"({', '.join(p.name for p in ib[:4])}{'...' if len(ib) > 4 else ''}): NCCL runs over TCP sockets instead",
                 "unset NCCL_IB_DISABLE (it is a debugging switch), or set NCCL_IB_HCA to the ports to use", Status.WARN)


def rule_nccl_names(facts: Facts, params, node) -> list[Problem]:
    problems = []
    for name in sorted(k for k in facts.env if k.startswith("NCCL_") and k not in NCCL_KNOWN):
        close = next(iter(difflib.get_close_matches(name, NCCL_KNOWN, n=1, cutoff=0.85)), None)
        if close:
            problems += _fail(f"{name} is not an NCCL variable (did you mean {close}?); NCCL ignores it",
                              f"rename it: `export {close}={q(facts.env[name].strip())}` and remove {name}", Status.WARN)
    return problems


RULES = (rule_if_ip, rule_prefix_ifname("HCCL_SOCKET_IFNAME"), rule_gloo, rule_agree, rule_implicit,
         rule_nccl_on_ascend, rule_master, rule_names, rule_values)
NVIDIA_RULES = (rule_prefix_ifname("NCCL_SOCKET_IFNAME"), rule_nccl_ib_hca, rule_nccl_ib_disable, rule_nccl_names)


def evaluate(facts: Facts, params, node) -> list[Finding]:
    # the shown names picked before redacting: the node's whole launch environment is dozens of names
    shown = redact.redacted({k: v for k, v in facts.env.items() if SHOWN.match(k)})
    if facts.ip_error:
        return [Finding(Status.FAIL, f"interfaces unknown: {facts.ip_error}", {"launch_env": shown}, IP_REMEDY)]
    rules = RULES + (NVIDIA_RULES if getattr(node, "backend", "auto") in ("nvidia", "auto") else ())
    problems = [p for rule in rules for p in rule(facts, params, node)]
    comm = facts.comm(getattr(node, "backend", "ascend"))
    details = {"launch_env": shown, "comm": {"ip": comm.ip, "iface": comm.iface, "source": comm.source},
               "interfaces": _ifs_summary(facts), "interfaces_source": facts.net_source, "master": facts.is_master,
               "master_ips": list(facts.master_ips)}
    if not problems:
        where = f"{comm.iface} {comm.ip} (from {comm.source})" if comm.ip else "no usable interface"
        read = f"; interfaces read from {facts.net_source} (no `ip` on the node)" if facts.net_source == procnet.SOURCE else ""
        return [Finding(Status.PASS, f"communication via {where}{read}", details)]
    details["problems"] = [{"status": p.status.value, "message": p.message, "remediation": p.remediation} for p in problems]
    status = worst(p.status for p in problems)
    top = [p for p in problems if p.status is status]
    summary = "; ".join(p.message for p in top) + (f" (+{len(problems) - len(top)} more)" if len(problems) > len(top) else "")
    return [Finding(status, summary, details, "; ".join(dict.fromkeys(p.remediation for p in top)))]
