"""Network namespaces, veths and bridges for netns mode, driven through `ip -batch`.

Layout: a host bridge in the root namespace carries the control end (first address of the
subnet) and one veth per node (`eth0` inside the node); a second, address-less bridge carries one
veth per node (`hccn0` inside) holding that node's device addresses. No default route anywhere in
a node, and only test ranges (198.18.0.0/15) are used, so traffic stays between our namespaces.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Iterable

from .procs import SimError, kill_pids, run

HOST_IFACE = "eth0"
DEVICE_IFACE = "hccn0"


def names(tag: str) -> dict[str, str]:
    return {"ns_prefix": f"pfs-{tag}-", "host_bridge": f"pfs{tag}h", "device_bridge": f"pfs{tag}d",
            "veth_host": f"pfs{tag}h", "veth_dev": f"pfs{tag}d"}


def available() -> tuple[bool, str]:
    """Whether netns mode can run here, and why not."""
    if os.geteuid() != 0:
        return False, "netns mode needs root"
    for tool in ("ip", "unshare", "nsenter"):
        if not shutil.which(tool):
            return False, f"{tool} not found"
    try:
        cp = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"ip netns: {exc}"
    if cp.returncode != 0:
        return False, f"ip netns list failed: {cp.stderr.strip()[:200]}"
    return True, ""


def used_networks() -> list[Any]:
    """IPv4 networks configured on any interface of the root namespace."""
    import ipaddress
    cp = run(["ip", "-o", "-4", "addr", "show"], check=False)
    nets = []
    for line in cp.stdout.splitlines():
        parts = line.split()
        if "inet" in parts:
            nets.append((parts[1], ipaddress.ip_interface(parts[parts.index("inet") + 1]).network))
    return nets


def free_test_subnets(nodes: int = 64, devices: int = 1024, first: bool = True) -> dict[str, str]:
    """A host subnet and a device subnet (at least /24, big enough) that no interface here uses
    yet, so clusters that coexist (several test sessions, a demo) never collide. `first` takes the
    lowest free blocks (stable addresses); otherwise a random one. Racy on its own: call it under
    NetLock, as Cluster.up does."""
    import ipaddress
    import random

    used = [net for _, net in used_networks()]

    def pick(base: str, need: int) -> str:
        plen = 24
        while plen > 16 and (1 << (32 - plen)) - 2 < need:
            plen -= 1
        blocks = list(ipaddress.ip_network(base).subnets(new_prefix=plen))
        start = 0 if first else random.randrange(len(blocks))
        for i in range(len(blocks)):
            b = blocks[(start + i) % len(blocks)]
            if not any(b.overlaps(u) for u in used):
                return str(b)
        raise SimError(f"no free test subnet for {need} addresses in {base} (other simulated clusters up?)")

    # Prefer the conventional halves (host in 198.18/16, devices in 198.19/16); fall back to any
    # free block of the test range when another cluster holds a whole half.
    try:
        host = pick("198.18.0.0/16", nodes + 2)
    except SimError:
        host = pick("198.18.0.0/15", nodes + 2)
    used.append(ipaddress.ip_network(host))
    try:
        dev = pick("198.19.0.0/16", devices)
    except SimError:
        dev = pick("198.18.0.0/15", devices)
    return {"subnet": host, "device_subnet": dev}


class NetLock:
    """Serialises 'is this subnet free?' + 'create it' (and the host-dir registry) across
    processes on this machine. Re-entrant within a process."""

    _depth = 0
    _fh = None

    def __init__(self, path: str = "/tmp/.preflight-sim-net.lock"):
        self.path = path

    def __enter__(self) -> "NetLock":
        import fcntl

        from ..safefile import open_private
        if NetLock._depth == 0:
            # a fixed name in /tmp: never through a link, never another user's file (open_private)
            NetLock._fh = os.fdopen(open_private(self.path), "a")
            fcntl.flock(NetLock._fh, fcntl.LOCK_EX)
        NetLock._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        NetLock._depth -= 1
        if NetLock._depth == 0 and NetLock._fh is not None:
            NetLock._fh.close()
            NetLock._fh = None


def list_namespaces() -> list[str]:
    cp = run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in cp.stdout.splitlines() if line.strip()]


def list_links() -> list[str]:
    cp = run(["ip", "-o", "link", "show"], check=False)
    out = []
    for line in cp.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) > 1:
            out.append(parts[1].strip().split("@")[0])
    return out


def ns_pids(ns: str) -> list[int]:
    cp = run(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in cp.stdout.split() if x.isdigit()]


def batch(lines: Iterable[str], ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    argv = ["ip"] + (["-n", ns] if ns else []) + ["-force", "-batch", "-"]
    return run(argv, input="\n".join(lines) + "\n", timeout=60, check=check)


def create(host_bridge: str, device_bridge: str, control_cidr: str,
           nodes: list[dict[str, Any]]) -> None:
    """nodes: dicts with namespace, veth_host, veth_dev, host_cidr, device_cidrs, and optionally roce:
    (netdev, peer) pairs, a veth made and kept inside the namespace (a GPU node's RoCE netdev)."""
    root = [f"link add {host_bridge} type bridge forward_delay 0",
            f"link set {host_bridge} up",
            f"addr add {control_cidr} dev {host_bridge}",
            f"link add {device_bridge} type bridge forward_delay 0",
            f"link set {device_bridge} up"]
    macs = [(_mac(0, k), _mac(1, k)) for k in range(len(nodes))]
    for n, (hmac, dmac) in zip(nodes, macs):
        root += [f"netns add {n['namespace']}",
                 f"link add {n['veth_host']} type veth peer name {HOST_IFACE} address {hmac} netns {n['namespace']}",
                 f"link add {n['veth_dev']} type veth peer name {DEVICE_IFACE} address {dmac} netns {n['namespace']}",
                 f"link set {n['veth_host']} master {host_bridge} up",
                 f"link set {n['veth_dev']} master {device_bridge} up"]
    batch(root)
    procs = []
    for n in nodes:
        lines = ["link set lo up", f"link set {HOST_IFACE} up", f"addr add {n['host_cidr']} dev {HOST_IFACE}",
                 f"link set {DEVICE_IFACE} up"]
        lines += [f"addr add {cidr} dev {DEVICE_IFACE}" for cidr in n["device_cidrs"]]
        for netdev, peer in n.get("roce", ()):
            lines += [f"link add {netdev} type veth peer name {peer}", f"link set {peer} up", f"link set {netdev} up"]
        lines += _static_neighbours(n, nodes, macs)
        p = subprocess.Popen(["ip", "-n", n["namespace"], "-batch", "-"], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        p.stdin.write("\n".join(lines) + "\n")  # type: ignore[union-attr]
        p.stdin.close()  # type: ignore[union-attr]
        procs.append((n, p))
    errors = []
    for n, p in procs:
        try:
            rc = p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = -1
        if rc != 0:
            errors.append(f"{n['namespace']}: {(p.stderr.read() if p.stderr else '').strip()[:200]}")
        if p.stderr:
            p.stderr.close()
    if errors:
        raise SimError("configuring node namespaces failed: " + "; ".join(errors[:3]))


def _mac(net: int, k: int) -> str:
    """Deterministic, locally administered: 02:50:46:<net>:<k high>:<k low>."""
    return f"02:50:46:{net:02x}:{(k >> 8) & 255:02x}:{k & 255:02x}"


def _static_neighbours(me: dict[str, Any], nodes: list[dict[str, Any]], macs: list[tuple[str, str]]) -> list[str]:
    """Permanent ARP entries for every other node. Without them a mesh where 32+ namespaces ARP for
    all their peers at once overflows the shared bridge's backlog on a 2-core machine and whole
    pairs fail for a reason no real cluster has (each real node has its own NIC and CPU)."""
    out = []
    for n, (hmac, dmac) in zip(nodes, macs):
        if n is me:
            continue
        out.append(f"neigh replace {n['host_cidr'].split('/')[0]} lladdr {hmac} dev {HOST_IFACE} nud permanent")
        out += [f"neigh replace {c.split('/')[0]} lladdr {dmac} dev {DEVICE_IFACE} nud permanent"
                for c in n["device_cidrs"]]
    return out


def destroy(namespaces: Iterable[str], links: Iterable[str]) -> None:
    """Kill whatever runs in our namespaces, delete them and our links. Safe when already gone."""
    present = set(list_namespaces())
    mine = [ns for ns in namespaces if ns in present]
    pids = [pid for ns in mine for pid in ns_pids(ns)]
    if pids:
        kill_pids(pids)
    if mine:
        batch([f"netns del {ns}" for ns in mine], check=False)
    have = set(list_links())
    gone = [link for link in links if link in have]
    if gone:
        batch([f"link del {link}" for link in gone], check=False)


def destroy_stale() -> list[str]:
    """Delete simulated clusters' namespaces that nothing runs in, and the bridges and veths whose
    cluster has no namespace left. A live cluster has its sshd in every namespace; one whose
    processes were killed (a session or a CI run ended mid-test) leaves namespaces, bridges and
    their permanent neighbour entries behind, which the next run's clusters then share the host
    with. A cluster still being brought up has namespaces before its sshd: run this when none is.
    Returns what was removed."""
    with NetLock():
        dead = [ns for ns in list_namespaces() if ns.startswith("pfs-") and not ns_pids(ns)]
        if dead:
            batch([f"netns del {ns}" for ns in dead], check=False)
        live_tags = {ns.split("-")[1] for ns in list_namespaces() if ns.startswith("pfs-") and ns.count("-") >= 2}
        links = [ln for ln in list_links() if ln.startswith("pfs") and ln[3:7] not in live_tags]
        if links:
            batch([f"link del {ln}" for ln in links], check=False)
    return dead + links


def apply_net(ns: str, state: dict[str, Any], plen: int) -> None:
    """Make the device network match state['net']: addresses, interface up/down, DROP rules, and a
    GPU node's RoCE netdevs up or down (`roce_down`)."""
    net = state["net"]
    lines = [f"link set {DEVICE_IFACE} {'down' if net['iface_down'] else 'up'}"]
    lines += [f"link set {r['netdev']} {'down' if r['netdev'] in net.get('roce_down', ()) else 'up'}"
              for r in state.get("roce_ports", ())]
    for d in state["devices"]:
        verb = "del" if d["id"] in net["down_addrs"] else "replace"
        lines.append(f"addr {verb} {d['ip']}/{plen} dev {DEVICE_IFACE}")
    batch(lines, ns=ns, check=False)
    _apply_shaping(ns, net.get("throttle"))
    rules = []
    if net.get("loss"):  # sshd's port spared: the node stays reachable while its traffic is lossy
        p = float(net["loss"]) / 100.0
        rules += [f"-A INPUT -i {HOST_IFACE} -p tcp ! --dport 22 -m statistic --mode random --probability {p:.4f} -j DROP"]
    for target in net["drop"]:
        if target == "all":
            rules += [f"-A INPUT -i {DEVICE_IFACE} -j DROP", f"-A OUTPUT -o {DEVICE_IFACE} -j DROP"]
        else:
            ip = next(d["ip"] for d in state["devices"] if d["id"] == target)
            rules += [f"-A INPUT -d {ip}/32 -j DROP", f"-A OUTPUT -s {ip}/32 -j DROP"]
    if rules or _has_iptables():
        if not _has_iptables():
            raise SimError("device_drop needs iptables in netns mode (apt-get install -y iptables)")
        table = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
        table += "".join(r + "\n" for r in rules) + "COMMIT\n"
        run(["ip", "netns", "exec", ns, "iptables-restore"], input=table)


IFB = "pfifb0"


def _apply_shaping(ns: str, throttle: dict[str, Any] | None) -> None:
    """tc tbf on the host link (egress), and through an ifb device for ingress. This kernel has
    tbf, htb, ingress/clsact, u32, mirred and ifb built in, and no netem: a rate limit is real
    here, added delay is not."""
    tc = ["ip", "netns", "exec", ns, "tc"]
    run(tc + ["qdisc", "del", "dev", HOST_IFACE, "root"], check=False)
    run(tc + ["qdisc", "del", "dev", HOST_IFACE, "ingress"], check=False)
    batch([f"link del {IFB}"], ns=ns, check=False)
    if not throttle:
        return
    rate = str(throttle["rate"])
    shape = ["tbf", "rate", rate, "burst", "64kb", "latency", "100ms"]
    run(tc + ["qdisc", "add", "dev", HOST_IFACE, "root"] + shape)
    if throttle.get("ingress"):
        batch([f"link add {IFB} type ifb", f"link set {IFB} up"], ns=ns)
        run(tc + ["qdisc", "add", "dev", HOST_IFACE, "handle", "ffff:", "ingress"])
        run(tc + ["filter", "add", "dev", HOST_IFACE, "parent", "ffff:", "protocol", "all", "u32", "match", "u32",
                  "0", "0", "action", "mirred", "egress", "redirect", "dev", IFB])
        run(tc + ["qdisc", "add", "dev", IFB, "root"] + shape)


def _has_iptables() -> bool:
    return shutil.which("iptables-restore") is not None


# The link_drop fault's watcher, run as root inside the node's namespace (`ip netns exec NS python
# -c LINK_DROP_WATCHER AFTER DURATION`). A process of this namespace whose command line names the
# smoke test's rank script is a rank; once it holds its first peer connection (an established TCP
# connection with both ports in the kernel's ephemeral range: Gloo's pair connections, made in
# init_process_group, never the rendezvous store's port-range port or SSH's 22), its collective is
# under way, and a window [then + AFTER, then + AFTER + DURATION) opens in which every packet on
# eth0 but SSH's is dropped. Outside the windows the link is whole; SIGTERM (sim reset) takes the
# rules away. The rank script's name is split in the source so that the watcher's own command line
# never matches a rank (tests look for leftover ranks by that name).
LINK_DROP_CHAIN = "PFLINKDROP"
LINK_DROP_WATCHER = r"""
import os, signal, subprocess, sys, time
after, duration = float(sys.argv[1]), float(sys.argv[2])
NAME = ("allreduce" + "_worker").encode()
CHAIN, IF = "%s", "%s"
me = os.readlink("/proc/self/ns/net")
lo, hi = (int(x) for x in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())

def ipt(*args):
    return subprocess.run(["iptables", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode

def link(down, why=""):
    for hook, way in (("INPUT", "-i"), ("OUTPUT", "-o")):
        while ipt("-D", hook, way, IF, "-j", CHAIN) == 0:
            pass
        if down:
            ipt("-I", hook, "1", way, IF, "-j", CHAIN)
    print(time.strftime("%%H:%%M:%%S"), "link", "down" if down else "up", why, flush=True)

def stop(*_):
    link(False, "(stopped)")
    ipt("-F", CHAIN)
    ipt("-X", CHAIN)
    sys.exit(0)

def ranks():
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            if os.readlink("/proc/%%s/ns/net" %% pid) == me and NAME in open("/proc/%%s/cmdline" %% pid, "rb").read():
                out.append(pid)
        except OSError:
            pass
    return out

def peer_connected(pid):
    try:
        inodes = {t[8:-1] for t in (os.readlink("/proc/%%s/fd/%%s" %% (pid, fd)) for fd in os.listdir("/proc/%%s/fd" %% pid))
                  if t.startswith("socket:[")}
    except OSError:
        return False
    for table in ("tcp", "tcp6"):
        try:
            rows = open("/proc/%%s/net/%%s" %% (pid, table)).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if len(f) > 9 and f[3] == "01" and f[9] in inodes:
                lp, rp = int(f[1].rsplit(":", 1)[1], 16), int(f[2].rsplit(":", 1)[1], 16)
                if lo <= lp <= hi and lo <= rp <= hi:
                    return True
    return False

signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
ipt("-N", CHAIN)
ipt("-F", CHAIN)
for rule in (["-p", "tcp", "--dport", "22", "-j", "RETURN"], ["-p", "tcp", "--sport", "22", "-j", "RETURN"], ["-j", "DROP"]):
    ipt("-A", CHAIN, *rule)
triggered, windows, down = set(), [], False
while True:
    now = time.monotonic()
    for pid in ranks():
        if pid not in triggered and peer_connected(pid):
            triggered.add(pid)
            windows.append((now + after, now + after + duration))
            print(time.strftime("%%H:%%M:%%S"), "rank", pid, "connected to its peers", flush=True)
    windows = [w for w in windows if w[1] > now]
    want = any(a <= now < b for a, b in windows)
    if want != down:
        link(want)
        down = want
    time.sleep(0.1)
""" % (LINK_DROP_CHAIN, HOST_IFACE)
