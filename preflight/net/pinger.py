"""One multi-target ICMP pinger per node (the node's python3), with the bounded `ping` loop as fallback.

Why: a `ping` process per pair costs ~2.3 ms of CPU (fork, exec, socket setup); at 128 nodes that
is 16,256 processes, ~38 s of CPU on a 2-core machine where all simulated nodes share the cores.
One Python process per node sends every echo request from one socket and reads the replies with
`select`: ~30 ms of CPU per node whatever the number of targets.

The socket is an ICMP datagram socket where `net.ipv4.ping_group_range` lets the login user open
one, else a raw socket (root / CAP_NET_RAW). When neither opens, or python3 is missing, the script
exits 3 (or the shell 127) *before printing anything* and the shell runs `ping.mesh_script` instead.
The output has mesh_script's shape (`@@preflight-ping <label> <ip> rc=<0|1>` then iputils-style
`N packets transmitted, M received, X% packet loss` and `rtt min/avg/max/mdev = ...` lines), so one
parser reads both.
"""
from __future__ import annotations

from typing import Sequence

from ..checkapi import Shell, sh
from .ping import mesh_script

NO_SOCKET = 3

PINGER = r'''
import os, select, socket, struct, sys, time
count, interval, wait = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
targets = [a.split("=", 1) for a in sys.argv[4:]]
def opensock(fam):
    proto = socket.IPPROTO_ICMP if fam == socket.AF_INET else socket.IPPROTO_ICMPV6
    for kind in (socket.SOCK_DGRAM, socket.SOCK_RAW):
        try:
            s = socket.socket(fam, kind, proto); s.setblocking(False); return s, kind
        except OSError:
            pass
    sys.exit(3)
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b)); s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
fams = {t[1]: (socket.AF_INET6 if ":" in t[1] else socket.AF_INET) for t in targets}
socks = {f: opensock(f) for f in set(fams.values())}
ident, n = os.getpid() & 0xffff, len(targets)
sent, rtts, errs = {}, [[] for _ in targets], [""] * n
def send(rnd):
    for i, (_, ip) in enumerate(targets):
        fam = fams[ip]; s, kind = socks[fam]; seq = (rnd * n + i) & 0xffff
        typ = 8 if fam == socket.AF_INET else 128
        pkt = struct.pack("!BBHHH", typ, 0, 0, ident, seq) + b"preflight-mesh.."
        if fam == socket.AF_INET and kind == socket.SOCK_RAW:
            pkt = pkt[:2] + struct.pack("!H", csum(pkt)) + pkt[4:]
        try:
            s.sendto(pkt, (ip, 0)); sent[seq] = (i, time.monotonic())
        except OSError as e:
            errs[i] = "sendto: " + e.strerror
def drain(until):
    by_sock = {s: (f, k) for f, (s, k) in socks.items()}
    while True:
        left = until - time.monotonic()
        if left <= 0 or (not sent and rnd_done[0]): return
        r, _, _ = select.select(list(by_sock), [], [], left)
        for s in r:
            try:
                data, addr = s.recvfrom(2048)
            except OSError:
                continue
            fam, kind = by_sock[s]
            if fam == socket.AF_INET and kind == socket.SOCK_RAW:
                data = data[(data[0] & 15) * 4:]
            if len(data) < 8: continue
            typ, _, _, rid, seq = struct.unpack("!BBHHH", data[:8])
            if typ not in (0, 129) or (kind == socket.SOCK_RAW and rid != ident) or seq not in sent: continue
            i, t0 = sent.pop(seq)
            if addr[0] == targets[i][1] or fam == socket.AF_INET6:
                rtts[i].append((time.monotonic() - t0) * 1000)
rnd_done = [False]
for rnd in range(count):
    send(rnd)
    drain(time.monotonic() + (interval if rnd < count - 1 else 0))
rnd_done[0] = True
drain(time.monotonic() + wait)
out = []
for i, (label, ip) in enumerate(targets):
    got = rtts[i]; loss = 100.0 * (count - len(got)) / count
    out.append("@@preflight-ping %s %s rc=%d" % (label, ip, 0 if got else 1))
    if errs[i]: out.append("ping: " + errs[i])
    out.append("%d packets transmitted, %d received, %g%% packet loss" % (count, len(got), loss))
    if got:
        avg = sum(got) / len(got); mdev = (sum((x - avg) ** 2 for x in got) / len(got)) ** 0.5
        out.append("rtt min/avg/max/mdev = %.3f/%.3f/%.3f/%.3f ms" % (min(got), avg, max(got), mdev))
sys.stdout.write("\n".join(out) + "\n")
'''


def mesh_command(targets: Sequence[tuple[str, str]], count: int, parallel: int, interval: float = 0.2,
                 python: str = "python3", wait: float = 1.0) -> Shell:
    """The pinger, falling back to the bounded `ping` loop when it cannot run (rc 3 or 127)."""
    return sh("{py} -c {src} {count} {interval} {wait} {targets} 2>/dev/null; r=$?; "
              "if [ $r -eq {no_socket} ] || [ $r -eq 127 ]; then {fallback:raw}; else exit $r; fi",
              py=python, src=PINGER, count=int(count), interval=f"{interval:g}", wait=f"{wait:g}",
              targets=[f"{label}={ip}" for label, ip in targets], no_socket=NO_SOCKET,
              fallback=mesh_script(targets, count, parallel, interval))