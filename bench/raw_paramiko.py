#!/usr/bin/env python3
"""The baseline: the minimum a paramiko tool must do to send one batch per node (no parsing,
no checks): 64 threads, a socket with TCP_NODELAY, key auth, one exec, read until EOF.
Usage: raw_paramiko.py INVENTORY BATCHES.json  (BATCHES: {node: shell text})"""
from __future__ import annotations

import json
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import paramiko

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from preflight.inventory import load  # noqa: E402


def one(node, batch: str, key: paramiko.PKey, known: paramiko.HostKeys) -> int:
    sock = socket.create_connection((node.host, node.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t = paramiko.Transport(sock)
    t.start_client(timeout=20)
    name = node.host if node.port == 22 else f"[{node.host}]:{node.port}"
    if not known.check(name, t.get_remote_server_key()):
        raise SystemExit(f"host key mismatch for {name}")
    t.auth_publickey(node.user or "root", key)
    chan = t.open_session()
    chan.exec_command(batch)
    n = 0
    while True:
        data = chan.recv(65536)
        if not data:
            break
        n += len(data)
    while chan.recv_stderr_ready():
        chan.recv_stderr(65536)
    chan.recv_exit_status()
    t.close()
    return n


def main() -> None:
    inv = load(sys.argv[1])
    batches = json.loads(Path(sys.argv[2]).read_text())
    key = paramiko.PKey.from_path(inv.nodes[0].identity_file)
    known = paramiko.HostKeys(inv.nodes[0].known_hosts)
    with ThreadPoolExecutor(64) as pool:
        sizes = list(pool.map(lambda n: one(n, batches[n.name], key, known), inv.nodes))
    print(sum(sizes))


if __name__ == "__main__":
    main()
