#!/usr/bin/env python3
"""What paramiko itself costs the client, without preflight: the floor under the per-node figure
of `bench/client_cpu.py` (docs/PERFORMANCE_HISTORY.md, third pass).

One simulated node (real sshd in a network namespace). `--conns` connections, one after the
other (no contention, no parsing), each doing what preflight does for a node: TCP with
TCP_NODELAY, curve25519 key exchange with AES-GCM, Ed25519 key auth, host key checked, one exec,
read to EOF, close. The command differs per mode:

* `none`: prints nothing (connection floor: handshake, auth, channel, close);
* `one`: 27 frames of 1 KB sent in one write (one SSH data packet);
* `many`: the same 27 frames as 27 writes 10 ms apart (27 data packets: what the driver sent
  before frames were held, docs/PERFORMANCE_HISTORY.md).

Reported: client CPU (user+sys of this process: every paramiko thread) per connection for each
mode, medians of `--repeat` rounds, and per data packet ((many - one) / 26).

Usage: sudo python3 bench/paramiko_floor.py --conns 20 --repeat 3
"""
from __future__ import annotations

import argparse
import resource
import shutil
import socket
import statistics
import sys
import tempfile
from pathlib import Path

import paramiko

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from fanout import sim  # noqa: E402
from preflight.inventory import load  # noqa: E402
from preflight.transport.ssh import _gcm_first  # noqa: E402

FRAME = "x" * 1000
COMMANDS = {
    "none": "sleep 0.27; true",
    "one": f"sleep 0.27; for i in $(seq 27); do echo {FRAME}; done >/tmp/.pf-floor.$$; cat /tmp/.pf-floor.$$; rm -f /tmp/.pf-floor.$$",
    "many": f"for i in $(seq 27); do printf '%s\\n' {FRAME}; sleep 0.01; done",
}


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def connection(node, key: paramiko.PKey, known: paramiko.HostKeys, command: str) -> int:
    """One node's worth of paramiko: the packets of data it read."""
    sock = socket.create_connection((node.host, node.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t = paramiko.Transport(sock)
    try:
        opts = t.get_security_options()
        opts.ciphers = _gcm_first(opts.ciphers)
        t.start_client(timeout=20)
        name = node.host if node.port == 22 else f"[{node.host}]:{node.port}"
        if not known.check(name, t.get_remote_server_key()):
            raise SystemExit(f"host key mismatch for {name}")
        t.auth_publickey(node.user or "root", key)
        chan = t.open_session()
        chan.exec_command(command)
        reads = 0
        while chan.recv(65536):
            reads += 1
        return reads
    finally:
        t.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conns", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="preflight-floor-")
    sim_dir = str(Path(folder) / "sim")
    spec = Path(folder) / "spec.yaml"
    spec.write_text("cluster: floor\nnodes: 1\n")
    sim("up", str(spec), sim_dir=sim_dir)
    try:
        node = load(str(Path(sim_dir) / "inventory.yaml")).nodes[0]
        key = paramiko.Ed25519Key.from_private_key_file(node.identity_file)
        known = paramiko.HostKeys(node.known_hosts)
        connection(node, key, known, "true")  # warm-up: imports, ARP, page cache
        per: dict[str, list[float]] = {m: [] for m in COMMANDS}
        reads: dict[str, int] = {}
        for _ in range(args.repeat):
            for mode, command in COMMANDS.items():
                c0 = cpu()
                reads[mode] = sum(connection(node, key, known, command) for _ in range(args.conns))
                per[mode].append((cpu() - c0) / args.conns * 1000)
    finally:
        sim("down", sim_dir=sim_dir)
        shutil.rmtree(folder, ignore_errors=True)
    med = {m: statistics.median(v) for m, v in per.items()}
    print("| mode | data reads / connection | client CPU / connection (ms) |")
    print("|---|---:|---:|")
    for mode in COMMANDS:
        print(f"| {mode} | {reads[mode] / args.conns:.1f} | {med[mode]:.2f} |")
    print(f"per data packet: {(med['many'] - med['one']) / 26:.3f} ms; paramiko {paramiko.__version__}")


if __name__ == "__main__":
    main()
