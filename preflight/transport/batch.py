"""One framed batch per node: the remote driver script and the parser of its output stream.

All of a node's probes travel in one exec. Each runs under a remote `timeout` (closing an SSH
channel does not kill what runs behind it), its stdout and stderr go to files on the node, and
the driver prints a header line `@@PF:<nonce> <idx> <rc> <t0_us> <t1_us> <out_len> <err_len>`
followed by exactly those many bytes. Lengths make the frame immune to whatever a probe prints;
the random nonce keeps a probe from forging a header. A watcher reads the channel's stdin: when
the client goes away (Ctrl-C, deadline, dropped connection) stdin reaches EOF and the watcher kills
the running probe, so nothing is left behind on the node.
"""
from __future__ import annotations

import re
import secrets
import shlex
import time
from dataclasses import dataclass
from typing import Iterator

from ..model import CommandOutput

DEFAULT_CAP = 1 << 20  # bytes kept per stream; the rest is dropped on the node
KILL_GRACE_S = 2
TRUNCATED_MARK = "\n[... truncated by preflight: {n} bytes in all ...]\n"


@dataclass(frozen=True)
class ProbeSpec:
    key: str
    cmd: str
    timeout: float


# Per probe the driver forks timeout + sh (the probe), one stat and one cat; under bash the clock is
# the EPOCHREALTIME variable, elsewhere `date` (two more forks). On 128 busy nodes that matters.
_DRIVER = r"""
exec 3<&0 </dev/null
d=$(mktemp -d "${TMPDIR:-/tmp}/.preflight.XXXXXX") || { echo "preflight: mktemp failed" >&2; exit 97; }
trap 'rm -rf "$d"' EXIT
trap 'p=$(cat "$d/pid" 2>/dev/null); [ -n "$p" ] && kill -TERM "$p" 2>/dev/null; rm -rf "$d"; exit 143' TERM HUP INT
( while read -r _l; do :; done; p=$(cat "$d/pid" 2>/dev/null); [ -n "$p" ] && kill -TERM "$p" 2>/dev/null; kill -TERM $$ 2>/dev/null ) <&3 &
w=$!
ulimit -f {fsize} 2>/dev/null
if [ -n "${BASH_VERSION:-}" ] && [ -n "${EPOCHREALTIME:-}" ]; then
  now() { t=${EPOCHREALTIME/[.,]/}; }
else
  now() { t=$(date +%s%6N 2>/dev/null); }
fi
pf() {
  i=$1; now; s=$t
  timeout -k {grace} "$2" sh -c "$3" >"$d/o" 2>"$d/e" </dev/null 3<&- &
  echo $! >"$d/pid"
  wait $!
  rc=$?
  : >"$d/pid"
  now
  set -- $(stat -c %s "$d/o" "$d/e" 2>/dev/null || { wc -c <"$d/o"; wc -c <"$d/e"; })
  printf '\n@@PF:{nonce} %s %s %s %s %s %s\n' "$i" "$rc" "$s" "$t" "$1" "$2"
  if [ "$1" -le {cap} ] && [ "$2" -le {cap} ]; then cat "$d/o" "$d/e"; else head -c {cap} "$d/o"; head -c {cap} "$d/e"; fi
}
"""


def driver_script(probes: list[ProbeSpec], nonce: str, cap: int = DEFAULT_CAP) -> str:
    """The POSIX sh text for one batch; every probe command is passed as one quoted argument."""
    head = (_DRIVER.replace("{nonce}", nonce).replace("{cap}", str(cap))
            .replace("{grace}", str(KILL_GRACE_S)).replace("{fsize}", str(max(cap * 64 // 512, 2048))))
    body = [f"pf {i} {int(max(1, p.timeout))} {shlex.quote(p.cmd)}" for i, p in enumerate(probes)]
    return head + "\n".join(body) + "\nkill $w 2>/dev/null\n"


def remote_command(script: str) -> str:
    """What the login shell runs, whatever it is: the script under bash when there is one (its
    clock is a variable, not a process), else /bin/sh."""
    return (f"s={shlex.quote(script)}; if [ -x /bin/bash ]; then exec /bin/bash --norc --noprofile -c \"$s\"; fi; "
            f"exec /bin/sh -c \"$s\"")


def new_nonce() -> str:
    return secrets.token_hex(8)


def _int(value: bytes, default: int = 0) -> int:
    try:
        return int(value)
    except ValueError:
        return default


_HEADER = re.compile(rb"\n@@PF:(\S+) (\d+) (\d+) (\S*) (\S*) (\d+) (\d+)\n")


def _find_header(buf: bytes, nonce: bytes):
    """The first header carrying our nonce (one compiled pattern for every batch)."""
    pos = 0
    while (m := _HEADER.search(buf, pos)) is not None:
        if m.group(1) == nonce:
            return m
        pos = m.start() + 1
    return None


class FrameParser:
    """Incremental parser: feed() raw bytes, get (index, CommandOutput) for every finished probe."""

    def __init__(self, nonce: str, probes: list[ProbeSpec], cap: int = DEFAULT_CAP):
        self.probes = probes
        self.cap = cap
        self._nonce = nonce.encode()
        self._buf = b""
        self._pending: tuple | None = None
        self.noise = b""  # what the login shell printed outside frames (e.g. .bashrc chatter)

    def feed(self, data: bytes) -> Iterator[tuple[int, CommandOutput]]:
        self._buf += data
        while True:
            if self._pending is None:
                m = _find_header(self._buf, self._nonce)
                if not m:
                    keep = max(0, len(self._buf) - 256)  # a header may be split across reads
                    self.noise = (self.noise + self._buf[:keep])[-4096:]
                    self._buf = self._buf[keep:]
                    return
                self.noise = (self.noise + self._buf[: m.start()])[-4096:]
                self._pending = m.groups()[1:]
                self._buf = self._buf[m.end():]
            idx, rc, t0, t1, olen, elen = self._pending
            o, e = min(_int(olen), self.cap), min(_int(elen), self.cap)
            if len(self._buf) < o + e:
                return
            out, err = self._buf[:o], self._buf[o: o + e]
            self._buf = self._buf[o + e:]
            self._pending = None
            i = _int(idx)
            if i < len(self.probes):
                yield i, self._output(self.probes[i], _int(rc), t0, t1, out, err, _int(olen), _int(elen))

    def _output(self, probe: ProbeSpec, rc: int, t0: bytes, t1: bytes, out: bytes, err: bytes,
                olen: int, elen: int) -> CommandOutput:
        duration = max(0.0, (_int(t1) - _int(t0)) / 1e6) if t0.isdigit() and t1.isdigit() else 0.0
        timed_out = rc == 124 or (rc == 137 and duration >= probe.timeout - 0.5)
        error = None
        if timed_out:
            error = f"timed out after {probe.timeout:g}s"
        elif 128 < rc < 160:  # sh reports death by signal N as 128+N (ambiguous with `exit 13x`)
            error = f"killed by signal {rc - 128}"
        return CommandOutput(
            stdout=_text(out, olen, self.cap), stderr=_text(err, elen, self.cap), rc=rc,
            duration_s=duration, timed_out=timed_out, truncated=olen > self.cap or elen > self.cap,
            error=error, node_started_at=_int(t0) / 1e6 if t0.isdigit() else None, received_at=time.time())


def _text(data: bytes, total: int, cap: int) -> str:
    """Decode defensively: vendor tools and broken locales print anything."""
    text = data.decode("utf-8", errors="replace")
    return text + TRUNCATED_MARK.format(n=total) if total > cap else text
