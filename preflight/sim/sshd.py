"""One real OpenSSH sshd per simulated node: its config, and the command line that starts it.

Netns mode starts sshd as `ip netns exec NS unshare --mount --uts --propagation private sh -c ...`:
the script bind-mounts the node's tree at the real Ascend paths, overlays /etc (so /etc/hccn.conf
is the node's own, or absent), sets the hostname and execs sshd. The mounts live only in that
mount namespace and vanish with its last process, so the host is never touched beyond the empty
mountpoints recorded in the cluster record.
"""
from __future__ import annotations

import shlex
from pathlib import Path

SSHD = "/usr/sbin/sshd"
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


def netns_argv(ns: str, node_dir: Path, hostname: str, cfg: Path,
               binds: list[tuple[Path, str]]) -> list[str]:
    """The command that starts a node's sshd inside its network, mount and UTS namespaces."""
    q = shlex.quote
    etcov = node_dir / "etcov"
    script = ["set -e"]
    script += [f"mount --bind {q(str(src))} {q(dst)}" for src, dst in binds]
    script += [
        f"mount -t tmpfs -o size=1m,mode=0755 pfs-etc {q(str(etcov))}",
        f"mkdir {q(str(etcov / 'u'))} {q(str(etcov / 'w'))}",
        f"ln -s {q(str(node_dir / 'etc' / 'hccn.conf'))} {q(str(etcov / 'u' / 'hccn.conf'))}",
        f"mount -t overlay pfs-etc -o lowerdir=/etc,upperdir={q(str(etcov / 'u'))},workdir={q(str(etcov / 'w'))} /etc",
        f"hostname {q(hostname)}",
        # what a tuned node has: HCCL's default port range reserved (net sysctls are per netns)
        "echo 60000-60015 > /proc/sys/net/ipv4/ip_local_reserved_ports || true",
        f"exec {SSHD} -f {q(str(cfg))} -E {q(str(node_dir / 'ssh' / 'sshd.log'))}",
    ]
    return ["ip", "netns", "exec", ns, "unshare", "--mount", "--uts", "--propagation", "private",
            "sh", "-c", "\n".join(script)]


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
