"""Bring a simulated cluster up, change its nodes, tear it down.

`Cluster.up(spec)` builds every node (state, tree, keys, network, sshd), writes the inventory,
applies the spec's faults and returns a handle; `Cluster.attach(dir)` re-opens a running one (the
CLI's `down`/`status`, another process); `down()` removes exactly what the record lists.
"""
from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from . import keys, logins, netns, procs, record, sshd
from . import slurm as sim_slurm
from .faults import FAULTS, apply_fault
from .inventory import known_hosts_line, write_inventory
from .procs import SimError
from .spec import SimSpec, load_spec
from .state import build_state, device_count, device_ip_count, set_path
from .tree import write_tree

HOST_MOUNTPOINTS = ("/usr/local/Ascend", "/usr/local/sbin")
LOOPBACK_DEVICE_NET = ipaddress.ip_network("127.19.0.0/16")
SYS_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class SimNode:
    """Where a node is and how to reach it."""

    name: str
    index: int
    host: str
    port: int
    namespace: str | None  # None in loopback mode
    dir: Path
    ascend_home: str        # as the node's login shell sees it
    devices: int


def resolve_mode(mode: str) -> str:
    if mode not in ("netns", "loopback", "auto"):
        raise SimError(f"unknown mode {mode!r} (netns, loopback or auto)")
    ok, why = netns.available()
    if mode == "netns" and not ok:
        raise SimError(f"netns mode unavailable: {why}")
    if mode == "auto":
        return "netns" if ok else "loopback"
    return mode


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _banner(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


HOST_DIR_REGISTRY = "/tmp/.preflight-sim-host-dirs"


def _registry():
    """The host-dir registry, read-write: root rmdirs what it lists, so a file another user
    planted at this fixed /tmp name (or a link there) is refused (safefile.open_private)."""
    from ..safefile import open_private
    return os.fdopen(open_private(HOST_DIR_REGISTRY), "r+", encoding="utf-8")


def _remove_host_dirs() -> None:
    """Remove the empty host mountpoints simulators created, once no simulated node is left.
    /run/sshd stays: by then the host's own sshd may rely on it."""
    if os.geteuid() != 0 or not os.path.exists(HOST_DIR_REGISTRY):
        return
    with netns.NetLock():
        if any(ns.startswith("pfs-") for ns in netns.list_namespaces()):
            return  # another cluster's mount namespaces still use them
        with _registry() as fh:
            paths = [ln.strip() for ln in fh if ln.strip()]
        keep = []
        for path in dict.fromkeys(paths):
            if path == "/run/sshd":
                continue
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                keep.append(path)  # not empty: someone put something there; leave it alone
        with _registry() as fh:
            fh.seek(0)
            fh.truncate()
            fh.write("".join(p + "\n" for p in keep))


class Cluster:
    """A running simulated cluster, backed by the record in its directory."""

    def __init__(self, directory: Path, rec: dict[str, Any]):
        self.dir = directory
        self.rec = rec

    # ---------------------------------------------------------------- paths and nodes
    @property
    def mode(self) -> str:
        return self.rec["mode"]

    @property
    def inventory_path(self) -> Path:
        return self.dir / "inventory.yaml"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def client_key(self) -> Path:
        return self.dir / "keys" / "client_ed25519"

    @property
    def nodes(self) -> list[SimNode]:
        return list(self._by_name().values())

    def _by_name(self) -> dict[str, SimNode]:
        if len(getattr(self, "_nodes", {})) != len(self.rec["nodes"]):
            self._nodes = {n["name"]: SimNode(name=n["name"], index=n["index"], host=n["host"], port=n["port"],
                                              namespace=n.get("namespace"), dir=Path(n["dir"]),
                                              ascend_home=n["ascend_home"], devices=n["devices"])
                           for n in self.rec["nodes"]}
        return self._nodes

    def node(self, name: str) -> SimNode:
        try:
            return self._by_name()[name]
        except KeyError:
            raise SimError(f"no node named {name!r}") from None

    # ---------------------------------------------------------------- bring-up
    @classmethod
    def up(cls, spec: "str | os.PathLike[str] | dict[str, Any] | SimSpec", dir: "str | os.PathLike[str] | None" = None,
           mode: str = "auto", ready_timeout: float = 60.0, slurm: bool | None = None) -> "Cluster":
        """slurm=True starts real Slurm whatever the spec says (`sim up --slurm`)."""
        sp = load_spec(spec)
        if slurm is not None:
            sp = replace(sp, slurm=slurm)
        directory = record.directory(dir, create=True)  # 0700, ours: never a link at a fixed /tmp name
        mode = resolve_mode(mode)
        cls.down_dir(directory)  # a leftover of a crashed run, if any
        rec = record.empty(directory, mode)
        rec["cluster"] = sp.cluster
        record.save(directory, rec)
        c = cls(directory, rec)
        try:
            c._build(sp, ready_timeout)
        except BaseException:
            c.down()
            raise
        return c

    @classmethod
    def attach(cls, dir: "str | os.PathLike[str] | None" = None) -> "Cluster":
        directory = record.directory(dir)
        rec = record.load(directory)
        if not rec or rec.get("corrupt") or rec.get("status") != "up":
            raise SimError(f"no simulated cluster is up in {directory}")
        return cls(directory, rec)

    def _save(self) -> None:
        record.save(self.dir, self.rec)

    def _build(self, sp: SimSpec, ready_timeout: float) -> None:
        d, rec = self.dir, self.rec
        tag = rec["tag"]
        nm = netns.names(tag)
        client_pub = keys.ensure(self.client_key, "preflight-sim-client")
        auth = d / "authorized_keys"
        auth.write_text(client_pub + " preflight-sim-client\n", encoding="utf-8")
        netns_mode = self.mode == "netns"
        if not os.path.exists(sshd.SSHD):
            raise SimError(f"{sshd.SSHD} not found: install openssh-server (apt-get install -y openssh-server)")
        if os.geteuid() == 0 and not Path("/run/sshd").exists():
            self._make_host_dir("/run/sshd")  # sshd's privilege-separation dir (root only)
        if netns_mode:
            with netns.NetLock():  # held until our bridges own the subnets
                sp = self._choose_network(sp)
                self._build_network(sp, d, nm, client_pub, auth, ready_timeout)
        else:
            self._build_network(sp, d, nm, client_pub, auth, ready_timeout)
        self._start_sshds([n.name for n in self.nodes])
        self._wait_ready(self.nodes, ready_timeout)
        self._write_inventory(sp)
        if sp.slurm:
            sim_slurm.start(self, ready_timeout)
        rec["status"] = "up"
        self._save()
        for fault in sp.faults:
            params = {k: v for k, v in fault.items() if k not in ("node", "fault")}
            self.inject(fault["node"], fault["fault"], **params)

    def _choose_network(self, sp: SimSpec) -> SimSpec:
        if sp.subnet is None:
            devices = sum(device_ip_count(n) for n in sp.nodes)
            net = netns.free_test_subnets(len(sp.nodes), devices)
            sp = replace(sp, subnet=ipaddress.ip_network(net["subnet"]),
                         device_subnet=ipaddress.ip_network(net["device_subnet"]))
        self._check_subnet_free(sp)
        return sp

    def _build_network(self, sp: SimSpec, d: Path, nm: dict[str, str], client_pub: str, auth: Path,
                       ready_timeout: float) -> None:
        rec = self.rec
        netns_mode = self.mode == "netns"
        ports = [22] * len(sp.nodes) if netns_mode else _free_ports(len(sp.nodes))
        dev_net = sp.device_subnet if netns_mode else LOOPBACK_DEVICE_NET
        dev_mask = str(dev_net.netmask)
        offset = 0
        known, plan = [], []
        for ns_spec, port in zip(sp.nodes, ports):
            name = ns_spec.name
            node_dir = d / "nodes" / name
            if node_dir.exists():
                shutil.rmtree(node_dir)
            (node_dir / "ssh").mkdir(parents=True)
            count = device_count(ns_spec)
            n_ips = device_ip_count(ns_spec)
            dev_ips = [str(dev_net.network_address + offset + 1 + i) for i in range(n_ips)]
            offset += n_ips
            host = str(sp.subnet.network_address + 1 + ns_spec.index) if netns_mode else "127.0.0.1"  # type: ignore[union-attr]
            asc_home = "/usr/local/Ascend" if netns_mode else str(node_dir / "ascend")
            state = build_state(ns_spec, host, dev_ips, dev_mask, netns.HOST_IFACE if netns_mode else "lo",
                                netns.DEVICE_IFACE if netns_mode else "lo")
            write_tree(node_dir, state, asc_home)
            if ns_spec.hide_tools and not netns_mode:
                raise SimError(f"{name}: hide_tools needs netns mode (root and ip netns)")
            if ns_spec.login_user:
                if not netns_mode:
                    raise SimError(f"{name}: login_user needs netns mode (root and ip netns)")
                try:
                    logins.write_etc(node_dir, name, ns_spec.login_user, ns_spec.sudo, list(ns_spec.groups))
                except ValueError as exc:
                    raise SimError(f"{name}: {exc}") from None
                logins.own_device_marks(node_dir)
                os.chown(node_dir / "ckpt", logins.LOGIN_UID, logins.LOGIN_UID)  # the user's checkpoints
                logins.open_path_for_logins(d)
            (node_dir / "baseline.json").write_text(json.dumps(state, sort_keys=True), encoding="utf-8")
            pub = keys.generate(node_dir / "ssh" / "ssh_host_ed25519_key", f"root@{name}")
            known.append(known_hosts_line(host, port, pub))
            path_env = None if netns_mode else f"{node_dir / 'bin'}:{SYS_PATH}"
            if ns_spec.login_user:  # the tools sit in /usr/local/sbin, on a non-root user's PATH too
                path_env = SYS_PATH
            sshd.write_config(node_dir, host, port, auth, path_env)
            entry = {"name": name, "index": ns_spec.index, "host": host, "port": port, "dir": str(node_dir),
                     "ascend_home": asc_home, "devices": count, "namespace": None, "backend": ns_spec.backend,
                     "login": ({"user": ns_spec.login_user, "sudo": ns_spec.sudo, "become": ns_spec.become}
                               if ns_spec.login_user else None), "hide_tools": list(ns_spec.hide_tools)}
            if netns_mode:
                (node_dir / "etcov").mkdir()
                entry.update(namespace=f"{nm['ns_prefix']}{name}", veth_host=f"{nm['veth_host']}{ns_spec.index}",
                             veth_dev=f"{nm['veth_dev']}{ns_spec.index}",
                             host_cidr=f"{host}/{sp.subnet.prefixlen}",
                             device_cidrs=[f"{ip}/{dev_net.prefixlen}" for ip in dev_ips],
                             roce=[(r["netdev"], r["peer"]) for r in state["roce_ports"]])
            plan.append(entry)
            rec["nodes"].append({k: v for k, v in entry.items() if k not in ("host_cidr", "device_cidrs")})
        self.known_hosts.write_text("\n".join(known) + "\n", encoding="utf-8")
        rec["device_prefixlen"] = dev_net.prefixlen
        if netns_mode:
            for mp in HOST_MOUNTPOINTS:
                if not Path(mp).exists():
                    self._make_host_dir(mp)
            for sub in ("data", "ckpt"):
                (d / "mnt" / sub).mkdir(parents=True, exist_ok=True)
            rec["namespaces"] = [p["namespace"] for p in plan]
            rec["links"] = [nm["host_bridge"], nm["device_bridge"]] + [p[k] for p in plan for k in ("veth_host", "veth_dev")]
            rec["subnet"], rec["device_subnet"] = str(sp.subnet), str(sp.device_subnet)
            self._save()  # before creating anything: a crash from here on is cleanable
            netns.create(nm["host_bridge"], nm["device_bridge"],
                         f"{sp.subnet.network_address + 1}/{sp.subnet.prefixlen}", plan)  # type: ignore[union-attr]
        self._save()

    def _check_subnet_free(self, sp: SimSpec) -> None:
        for iface, net in netns.used_networks():
            if net.overlaps(sp.subnet) or net.overlaps(sp.device_subnet):
                raise SimError(f"subnet {net} is already in use on {iface} (another simulated "
                               f"cluster?); give the spec another network.subnet")

    def _make_host_dir(self, path: str) -> None:
        """Create an (empty) host directory we need, and remember that a simulator made it: the
        shared registry lets whichever cluster goes down last remove it."""
        with netns.NetLock():
            Path(path).mkdir(parents=True)
            with _registry() as fh:
                fh.seek(0, os.SEEK_END)
                fh.write(path + "\n")
        self.rec["host_dirs"].append(path)
        self._save()

    def _write_inventory(self, sp: SimSpec) -> None:
        nodes = self.nodes
        netns_mode = self.mode == "netns"
        first = nodes[0]
        counts = {n.devices for n in nodes}
        defaults: dict[str, Any] = {
            "user": "root" if netns_mode else (psutil.Process().username() or "root"),
            "port": 22,
            "identity_file": str(self.client_key),
            "known_hosts": str(self.known_hosts),
            "host_key_policy": "strict",
            "connect_timeout": 10,
            "backend": "ascend",
        }
        if len(counts) == 1:
            defaults["devices"] = counts.pop()
        defaults["ascend_home"] = "/usr/local/Ascend"
        iface = netns.HOST_IFACE if netns_mode else "lo"
        defaults["env"] = {"GLOO_SOCKET_IFNAME": iface, "HCCL_SOCKET_IFNAME": iface,
                           "MASTER_ADDR": first.host, "MASTER_PORT": "29500"}
        if netns_mode:  # the launch environment sources the toolkit, as a real launcher does
            defaults["env_files"] = ["/usr/local/Ascend/ascend-toolkit/set_env.sh"]
        if netns_mode:
            defaults["paths"] = {"data": [str(self.dir / "mnt" / "data")], "checkpoint": str(self.dir / "mnt" / "ckpt")}
        entries = []
        for n in nodes:
            e: dict[str, Any] = {"name": n.name, "host": n.host}
            if n.port != 22:
                e["port"] = n.port
            if "devices" not in defaults:
                e["devices"] = n.devices
            if not netns_mode:
                e["ascend_home"] = n.ascend_home
                e["env_files"] = [f"{n.ascend_home}/ascend-toolkit/set_env.sh"]
                e["paths"] = {"data": [str(n.dir / "data")], "checkpoint": str(n.dir / "ckpt")}
            if self._backend(n.name) == "nvidia":
                e["backend"] = "nvidia"
                e["env"] = {"NCCL_SOCKET_IFNAME": iface}
            else:
                e["env"] = {"HCCL_IF_IP": n.host}
            login = next(r for r in self.rec["nodes"] if r["name"] == n.name).get("login")
            if login:
                e["user"] = login["user"]
                if login["become"]:
                    e["become"] = "sudo"
            entries.append(e)
        write_inventory(self.inventory_path, sp.cluster, defaults, entries)

    def _backend(self, name: str) -> str:
        return next((e.get("backend", "ascend") for e in self.rec["nodes"] if e["name"] == name), "ascend")

    # ---------------------------------------------------------------- processes
    def _procs(self, node: str | None = None, what: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.rec["procs"] if (node is None or r["node"] == node)
                and (what is None or r["what"] == what)]

    def node_binds(self, n: SimNode) -> list[tuple[Path, str]]:
        """What a node's mount namespace shows on the real paths (sshd's and slurmd's alike)."""
        return [(n.dir / "ascend", "/usr/local/Ascend"), (n.dir / "bin", "/usr/local/sbin"),
                (n.dir / "data", str(self.dir / "mnt" / "data")),
                (n.dir / "ckpt", str(self.dir / "mnt" / "ckpt"))]

    # ---------------------------------------------------------------- slurm (sim/slurm.py)
    @property
    def has_slurm(self) -> bool:
        return "slurm" in self.rec

    def slurm_env(self) -> dict[str, str]:
        """os.environ plus SLURM_CONF naming this cluster's slurm.conf (for srun, sbatch, scontrol)."""
        if not self.has_slurm:
            raise SimError("this simulated cluster runs no Slurm (spec key slurm: true)")
        return sim_slurm.env(self)

    def _start_sshds(self, names: list[str]) -> None:
        started = []
        for name in names:
            n = self.node(name)
            cfg = n.dir / "ssh" / "sshd_config"
            pidfile = n.dir / "ssh" / "sshd.pid"
            if pidfile.exists():
                pidfile.unlink()
            if n.namespace:
                binds = self.node_binds(n)
                etc_files = n.dir / logins.ETC_DIR
                entry = next(e for e in self.rec["nodes"] if e["name"] == name)
                argv = sshd.netns_argv(n.namespace, n.dir, n.name, cfg, binds,
                                       etc_files if etc_files.is_dir() else None, tuple(entry.get("hide_tools", ())))
                # recorded for the reader: they live in the node's mount namespace only and end with it
                entry["mounts"] = [[str(src), dst] for src, dst in binds] + [
                    ["tmpfs", str(n.dir / "etcov")], ["overlay(/etc + node etc/hccn.conf)", "/etc"]]
            else:
                argv = sshd.loopback_argv(n.dir, cfg)
            started.append((n, procs.spawn(argv, n.dir / "ssh" / "start.log"), pidfile))
        errors = []
        for n, p, pidfile in started:
            try:
                rc = p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = -9
            deadline = time.monotonic() + 10
            while rc == 0 and not pidfile.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            pid = None
            if rc == 0 and pidfile.exists():
                try:
                    pid = int(pidfile.read_text().split()[0])
                except (ValueError, IndexError):
                    time.sleep(0.05)
                    pid = int(pidfile.read_text().split()[0])
            if pid is None:
                log = (n.dir / "ssh" / "start.log").read_text(errors="replace")[-300:]
                log += (n.dir / "ssh" / "sshd.log").read_text(errors="replace")[-300:] if (n.dir / "ssh" / "sshd.log").exists() else ""
                errors.append(f"{n.name}: sshd did not start (exit {rc}): {' '.join(log.split())}")
                continue
            self.rec["procs"].append(procs.describe(pid, "sshd", n.name))
        self._save()
        if errors:
            raise SimError("; ".join(errors[:3]))

    def _wait_ready(self, nodes: list[SimNode], timeout: float) -> None:
        pending = list(nodes)
        deadline = time.monotonic() + timeout
        with ThreadPoolExecutor(max_workers=32) as pool:
            while pending and time.monotonic() < deadline:
                ok = list(pool.map(lambda n: _banner(n.host, n.port), pending))
                pending = [n for n, good in zip(pending, ok) if not good]
                if pending:
                    time.sleep(0.05)
        if pending:
            raise SimError(f"sshd not answering on {', '.join(n.name for n in pending[:5])} after {timeout:.0f}s")

    def _spawn_listener(self, n: SimNode, what: str, host: str, port: int) -> None:
        argv = [sys.executable, "-c", sshd.LISTENER, host, str(port)]
        if n.namespace:
            argv = ["ip", "netns", "exec", n.namespace] + argv
        p = procs.spawn(argv, n.dir / "ssh" / "listener.log")
        self.rec["procs"].append(procs.describe(p.pid, what, n.name) | {"port": port})
        self._save()
        probe_host = n.host if (n.namespace or host != "0.0.0.0") else "127.0.0.1"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _listening(probe_host, port):
            if p.poll() is not None:
                raise SimError(f"{n.name}: could not hold port {port}: "
                               f"{(n.dir / 'ssh' / 'listener.log').read_text(errors='replace')[-200:]}")
            time.sleep(0.02)

    def _stop(self, recs: list[dict[str, Any]]) -> None:
        extra = []
        for r in recs:
            if r["what"] == "sshd" and procs.alive(r):
                try:
                    extra += [procs.describe(ch.pid, "session", r["node"]) for ch in psutil.Process(r["pid"]).children(True)]
                except psutil.Error:
                    pass
        procs.stop(list(recs) + extra)
        ids = {id(r) for r in recs}
        self.rec["procs"] = [r for r in self.rec["procs"] if id(r) not in ids]
        self._save()

    # ---------------------------------------------------------------- state and faults
    def state(self, node: str) -> dict[str, Any]:
        return json.loads((self.node(node).dir / "state.json").read_text(encoding="utf-8"))

    def set_state(self, node: str, key: str, value: Any) -> None:
        """Change one state value by dotted path (`devices.3.link`) and make it real."""
        st = self.state(node)
        try:
            set_path(st, key, value)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise SimError(f"{node}: cannot set {key!r}: {exc}") from None
        self._apply(node, st)

    def inject(self, node: str, fault: str, **params: Any) -> None:
        """Apply a named fault (see the preflight.sim docstring) to one node."""
        if fault in FAULTS and FAULTS[fault][3] and self.mode != "netns":
            raise SimError(f"fault {fault} needs netns mode")
        st = self.state(node)
        try:
            apply_fault(st, fault, params)
        except (ValueError, KeyError) as exc:
            raise SimError(f"{node}: {exc}") from None
        self._apply(node, st)

    def reset(self, node: str | None = None) -> None:
        """Back to the healthy state the node came up in (spec faults included are undone too)."""
        for n in ([self.node(node)] if node else self.nodes):
            st = json.loads((n.dir / "baseline.json").read_text(encoding="utf-8"))
            self._apply(n.name, st)

    def _apply(self, name: str, st: dict[str, Any]) -> None:
        n = self.node(name)
        write_tree(n.dir, st, n.ascend_home)
        # the link_drop watcher: stopped (its rules with it) before the network is made to match
        want_drop = st["net"].get("link_drop") if n.namespace else None
        watchers = [r for r in self._procs(name, "link_drop") if procs.alive(r)]
        if [r for r in watchers if r.get("params") != want_drop]:
            self._stop(watchers)
            watchers = []
        if n.namespace:
            applied = self.rec["applied_net"].get(name)
            baseline = {"down_addrs": [], "drop": [], "iface_down": False, "roce_down": []}
            if st["net"] != (applied or baseline):
                netns.apply_net(n.namespace, st, self.rec["device_prefixlen"])
                self.rec["applied_net"][name] = st["net"]
                self._save()
        if want_drop and not watchers:
            argv = ["ip", "netns", "exec", n.namespace, sys.executable, "-c", netns.LINK_DROP_WATCHER,
                    str(want_drop["after"]), str(want_drop["duration"])]
            pw = procs.spawn(argv, n.dir / "link_drop.log")
            self.rec["procs"].append(procs.describe(pw.pid, "link_drop", n.name) | {"params": want_drop})
            self._save()
        # listeners (ports held by a stray process)
        running = {r["port"]: r for r in self._procs(name, "listener") if procs.alive(r)}
        stale = [r for p, r in running.items() if p not in st["listeners"]]
        if stale:
            self._stop(stale)
        for port in st["listeners"]:
            if port not in running:
                self._spawn_listener(n, "listener", "0.0.0.0", port)
        # sshd: up | down | silent
        want = st["sshd"]
        sshd_recs = [r for r in self._procs(name, "sshd") if procs.alive(r)]
        silent = [r for r in self._procs(name, "silent") if procs.alive(r)]
        if want != "silent" and silent:
            self._stop(silent)
        if want != "up" and sshd_recs:
            self._stop(sshd_recs)
        if want == "up" and not sshd_recs:
            self.rec["procs"] = [r for r in self.rec["procs"] if not (r["node"] == name and r["what"] == "sshd")]
            self._start_sshds([name])
            self._wait_ready([n], 20)
        if want == "silent" and not silent:
            self._spawn_listener(n, "silent", n.host, n.port)

    def stop_sshd(self, node: str) -> None:
        self.inject(node, "sshd_down")

    def start_sshd(self, node: str) -> None:
        self.set_state(node, "sshd", "up")

    def sshd_pid(self, node: str) -> int | None:
        live = [r for r in self._procs(node, "sshd") if procs.alive(r)]
        return live[0]["pid"] if live else None

    def node_processes(self, node: str) -> list[tuple[int, str]]:
        """(pid, command line) of every process running in the node: in its network namespace
        (netns mode), or under its sshd (loopback). For tests that check nothing was left behind."""
        n = self.node(node)
        if n.namespace:
            pids = netns.ns_pids(n.namespace)
        else:
            pid = self.sshd_pid(node)
            pids = [pid] + [c.pid for c in psutil.Process(pid).children(True)] if pid else []
            pids += [r["pid"] for r in self.rec["procs"] if r["node"] == node and r["what"] != "sshd" and procs.alive(r)]
        out = []
        for pid in pids:
            try:
                out.append((pid, " ".join(psutil.Process(pid).cmdline())))
            except psutil.Error:
                continue
        return out

    def pids(self) -> list[int]:
        return [r["pid"] for r in self.rec["procs"] if procs.alive(r)]

    def exec(self, node: str, cmd: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """Run `sh -c cmd` inside the node (its network, mount and UTS namespaces when they exist)."""
        n = self.node(node)
        env = None
        if n.namespace:
            pid = self.sshd_pid(node)
            argv = (["nsenter", "-t", str(pid), "-m", "-u", "-n", "--", "sh", "-c", cmd] if pid
                    else ["ip", "netns", "exec", n.namespace, "sh", "-c", cmd])
        else:
            argv = ["sh", "-c", cmd]
            env = dict(os.environ, PATH=f"{n.dir / 'bin'}:{SYS_PATH}")
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)

    def status(self) -> dict[str, Any]:
        rows = []
        for n in self.nodes:
            st = self.state(n.name)
            rows.append({"name": n.name, "host": n.host, "port": n.port, "namespace": n.namespace,
                         "sshd": st["sshd"], "sshd_pid": self.sshd_pid(n.name),
                         "answering": _banner(n.host, n.port, 0.5)})
        return {"dir": str(self.dir), "mode": self.mode, "cluster": self.rec.get("cluster"),
                "inventory": str(self.inventory_path), "nodes": rows}

    # ---------------------------------------------------------------- tear-down
    def down(self, purge: bool = False) -> None:
        Cluster.down_dir(self.dir, purge=purge)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    @staticmethod
    def down_dir(dir: "str | os.PathLike[str] | None" = None, purge: bool = False) -> bool:
        """Remove what the record in dir lists, plus anything named with this dir's prefix.
        Safe to call twice and on a crashed bring-up. Returns whether there was anything."""
        directory = record.directory(dir)
        rec = record.load(directory)
        found = bool(rec)
        tag = record.tag_for(directory)
        nm = netns.names(tag)
        if rec and not rec.get("corrupt"):
            recs = rec.get("procs", [])
            extra = []
            for r in recs:
                if r["what"] == "sshd" and procs.alive(r):
                    try:
                        extra += [procs.describe(ch.pid, "session", r["node"])
                                  for ch in psutil.Process(r["pid"]).children(True)]
                    except psutil.Error:
                        pass
            left = procs.stop(recs + extra)
            if left:
                raise SimError(f"could not stop PIDs {[r['pid'] for r in left]}")
        if os.geteuid() == 0 and shutil.which("ip"):
            namespaces = set(rec.get("namespaces", []) if rec else [])
            namespaces |= {ns for ns in netns.list_namespaces() if ns.startswith(nm["ns_prefix"])}
            links = set(rec.get("links", []) if rec else [])
            links |= {ln for ln in netns.list_links() if ln.startswith(f"pfs{tag}")}
            found = found or bool(namespaces or links)
            netns.destroy(sorted(namespaces), sorted(links))
        # Leftover processes that still reference this cluster's node trees (a crashed run's
        # sshd, a hung npu-smi call orphaned in loopback mode): their argv names the dir.
        marker = str(directory / "nodes") + "/"
        stray = []
        for p in psutil.process_iter(["cmdline"]):
            try:
                if p.pid != os.getpid() and any(marker in a for a in (p.info["cmdline"] or [])):
                    stray.append(p.pid)
            except psutil.Error:
                continue
        if stray:
            procs.kill_pids(stray)
            found = True
        _remove_host_dirs()
        for name in ("nodes", "mnt", "slurm"):
            shutil.rmtree(directory / name, ignore_errors=True)
        for name in ("inventory.yaml", "known_hosts", "authorized_keys", record.RECORD):
            try:
                (directory / name).unlink()
            except FileNotFoundError:
                pass
        if purge:
            shutil.rmtree(directory, ignore_errors=True)
        return found
