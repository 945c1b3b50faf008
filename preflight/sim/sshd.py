"""One real OpenSSH sshd per simulated node: its config, and the command line that starts it.

Netns mode starts sshd as `ip netns exec NS unshare --mount --uts --propagation private sh -c ...`:
the script bind-mounts the node's tree at the real Ascend paths, overlays /etc (so /etc/hccn.conf
is the node's own, or absent, and a node with a login user has its passwd, group, shadow, hosts and
sudoers.d: preflight.sim.logins), sets the hostname and execs sshd. The mounts live only in that
mount namespace and vanish with its last process, so the host is never touched beyond the empty
mountpoints recorded in the cluster record.
"""
from __future__ import annotations

import os
import shlex
from pathlib import Path

SSHD = "/usr/sbin/sshd"
SYSTEM_DIRS = ("/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")  # where a hidden tool is looked for
BIND_TARGETS = {"ascend": "/usr/local/Ascend", "bin": "/usr/local/sbin"}


def write_config(node_dir: Path, listen: str, port: int, authorized_keys: Path,
                 path_env: str | None = None) -> Path:
    ssh = node_dir / "ssh"
    lines = [
        f"ListenAddress {listen}",
        f"Port {port}",
        f"HostKey {ssh / 'ssh_host_ed25519_key'}",
        f"PidFile {ssh / 'sshd.pid'}",
        f"AuthorizedKeysFile {authorized_keys}",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "PermitRootLogin prohibit-password",
        "StrictModes no",
        "UseDNS no",
        "MaxStartups 200",
        "MaxSessions 50",
        "LoginGraceTime 30",
        "PrintMotd no",
        "PrintLastLog no",
        "X11Forwarding no",
        "AllowTcpForwarding yes",  # a node can serve as the ProxyJump host of the others (tests)
        "PermitUserEnvironment no",
        "LogLevel VERBOSE",  # one line per connection and per rejected key: tests count attempts
        "Subsystem sftp internal-sftp",
    ]
    if path_env:
        lines.append(f"SetEnv PATH={path_env}")
    cfg = ssh / "sshd_config"
    cfg.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return cfg


def node_script(node_dir: Path, hostname: str, binds: list[tuple[Path, str]], exec_line: str,
                etc_links: dict[str, Path] | None = None, etc_files: Path | None = None,
                hide: tuple[str, ...] = ()) -> str:
    """The shell that makes a fresh mount+UTS namespace look like the node (its tree on the
    real paths, its own /etc/hccn.conf, its host name), then execs the daemon. Shared by sshd and
    the simulated Slurm's slurmd, so both see the same node. `etc_links` adds files under the
    node's /etc (relative path -> target), e.g. slurm/slurm.conf, where a real node has them;
    `etc_files` is a folder copied into the node's /etc (its login user, sudoers: sim.logins).
    `hide` names commands the node does not have (hide_lines)."""
    q = shlex.quote
    etcov = node_dir / "etcov"
    script = ["set -e"]
    script += [f"mount --bind {q(str(src))} {q(dst)}" for src, dst in binds]
    script += [
        f"mount -t tmpfs -o size=1m,mode=0755 pfs-etc {q(str(etcov))}",
        f"mkdir {q(str(etcov / 'u'))} {q(str(etcov / 'w'))}",
        *([f"cp -a {q(str(etc_files))}/. {q(str(etcov / 'u'))}/"] if etc_files else []),  # login user, sudoers
        # podman on the node (preflight.sim.podman): `ip netns exec` gave it a fresh /sys without the
        # cgroup hierarchies; mount the host's again (the same hierarchies: cgroup_mounts)
        *(cgroup_mounts() if etc_files and (etc_files / "containers").is_dir() else []),
        f"ln -s {q(str(node_dir / 'etc' / 'hccn.conf'))} {q(str(etcov / 'u' / 'hccn.conf'))}",
        *hide_lines(etcov, hide),
    ]
    for rel, target in (etc_links or {}).items():
        link = etcov / "u" / rel
        script += [f"mkdir -p {q(str(link.parent))}", f"ln -s {q(str(target))} {q(str(link))}"]
    script += [
        f"mount -t overlay pfs-etc -o lowerdir=/etc,upperdir={q(str(etcov / 'u'))},workdir={q(str(etcov / 'w'))} /etc",
        f"hostname {q(hostname)}",
        # what a tuned node has: HCCL's default port range reserved (net sysctls are per netns)
        "echo 60000-60015 > /proc/sys/net/ipv4/ip_local_reserved_ports || true",
        exec_line,
    ]
    return "\n".join(script)


def hide_lines(etcov: Path, tools: tuple[str, ...]) -> list[str]:
    """Shell lines that make `tools` absent in this mount namespace, as on a node where they are not
    installed (no `ip` on the real H200 node): each system directory holding one gets an overlay
    whose upper layer has an overlayfs whiteout (a 0/0 character device) of that name. Every path
    to the tool is gone, not only PATH's: `command -v ip` fails and /sbin/ip does not exist."""
    q = shlex.quote
    dirs: dict[str, list[str]] = {}
    for tool in tools:
        for d in SYSTEM_DIRS:
            if os.path.lexists(os.path.join(d, tool)):
                dirs.setdefault(os.path.realpath(d), []).append(tool)
    lines = []
    for i, (d, names) in enumerate(sorted(dirs.items())):
        up, work = etcov / f"hide{i}u", etcov / f"hide{i}w"
        lines.append(f"mkdir {q(str(up))} {q(str(work))}")
        lines += [f"mknod {q(str(up / t))} c 0 0" for t in dict.fromkeys(names)]
        lines.append(f"mount -t overlay pfs-hide -o lowerdir={q(d)},upperdir={q(str(up))},workdir={q(str(work))} {q(d)}")
    return lines


def netns_argv(ns: str, node_dir: Path, hostname: str, cfg: Path,
               binds: list[tuple[Path, str]], etc_files: Path | None = None, hide: tuple[str, ...] = ()) -> list[str]:
    """The command that starts a node's sshd inside its network, mount and UTS namespaces."""
    q = shlex.quote
    script = node_script(node_dir, hostname, binds,
                         f"exec {SSHD} -f {q(str(cfg))} -E {q(str(node_dir / 'ssh' / 'sshd.log'))}",
                         etc_files=etc_files, hide=hide)
    return ["ip", "netns", "exec", ns, "unshare", "--mount", "--uts", "--propagation", "private",
            "sh", "-c", script]


def cgroup_mounts() -> list[str]:
    """Shell lines that mount this host's cgroup hierarchies again under /sys/fs/cgroup (a v1
    hierarchy mounted with the same controllers is the same hierarchy), as /proc/self/mounts lists them."""
    q = shlex.quote
    lines = ["mount -t tmpfs -o mode=0755 cgroup /sys/fs/cgroup"]
    with open("/proc/self/mounts", encoding="utf-8") as fh:
        for row in fh:
            dev, path, fstype, opts, *_ = row.split()
            if fstype in ("cgroup", "cgroup2") and path.startswith("/sys/fs/cgroup/"):
                keep = ",".join(o for o in opts.split(",") if o not in ("rw", "relatime", "nosuid", "nodev", "noexec"))
                lines.append(f"mkdir -p {q(path)} && mount -t {fstype} {'-o ' + q(keep) if keep else ''} {q(dev)} {q(path)}")
    return lines


def loopback_argv(node_dir: Path, cfg: Path) -> list[str]:
    return [SSHD, "-f", str(cfg), "-E", str(node_dir / "ssh" / "sshd.log")]


LISTENER = (
    "import socket,sys\n"
    "s=socket.socket(socket.AF_INET,socket.SOCK_STREAM)\n"
    "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
    "s.bind((sys.argv[1],int(sys.argv[2])));s.listen(128)\n"
    "held=[]\n"
    "while True:\n"
    " c,_=s.accept();held.append(c)\n"
)
"""A process that holds a port: accepts connections and never says a word (also the no-banner node)."""
