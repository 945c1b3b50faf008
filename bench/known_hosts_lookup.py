"""Bench: a hashed known_hosts (HashKnownHosts yes) of N lines: load once, then one lookup per node.

Why: every node's host-key check looks its name up; a hashed line can only be matched by
computing HMAC-SHA1(salt, name) with that line's own salt, so a lookup costs one HMAC per hashed
line. Prints the load time and the CPU time per lookup (median of the nodes looked up).

    python3 bench/known_hosts_lookup.py [LINES] [NODES]
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import statistics
import sys
import tempfile
import time

from preflight.transport.hostkeys import KnownHosts

KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"  # an ed25519 public key


def hashed(name: str) -> str:
    salt = os.urandom(20)
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def main(lines: int = 100_000, nodes: int = 20) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "known_hosts")
        with open(path, "w") as f:
            for i in range(lines):
                f.write(f"{hashed(f'10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}')} ssh-ed25519 {KEY}\n")
        KnownHosts.forget_all()
        t0 = time.process_time()
        kh = KnownHosts.get(path)
        load = time.process_time() - t0
        per = []
        for i in range(nodes):
            t0 = time.process_time()
            found = kh.lookup(f"10.0.{i >> 8 & 255}.{i & 255}")
            per.append(time.process_time() - t0)
            assert "ssh-ed25519" in found, "a hashed line was not matched"
        import resource
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{lines} hashed lines: load {load:.2f} s CPU; lookup {statistics.median(per) * 1000:.1f} ms CPU "
              f"a node (median of {nodes}, min {min(per) * 1000:.1f}); peak RSS {rss:.0f} MB")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
