"""One framed batch per node: the remote driver script and the parser of its output stream.

All of a node's probes travel in one exec. Each runs under a remote `timeout` (closing an SSH
channel does not kill what runs behind it), its stdout and stderr go to files on the node, and
the driver prints, per probe::

    @@PF:<nonce>:B <idx> <rc> <t0_us> <t1_us>\n  <stdout>  @@PF:<nonce>:E\n  <stderr>  @@PF:<nonce>:Z\n

with one `head -q -c CAP+1` over the two output files and two marker files, so each stream is
capped on the node (a longer one arrives as CAP+1 bytes and is marked truncated); the frame is
sent by one `cat` (one write, so one SSH packet where it fits, not five). Over SSH under bash,
frames that finish within HOLD_S of each other leave in one write (a packet costs the client far
more than its bytes); none waits longer than that, whatever the next probe does. A probe costs
four processes: timeout, its shell, head, cat. The random nonce keeps a probe from forging a
marker (it cannot know it).

One driver serves a node for the whole run: after a round it prints `@@PF:<nonce>:R` and waits for
more `pf` lines on its stdin, ended by `@@PF:<nonce>:GO` (follow-ups, cluster plans), so a node pays
its login shell's start-up (.bashrc: 100+ ms with conda or pyenv) once. A watcher reads the
channel's stdin and relays it to the driver through a FIFO: when
the client goes away (Ctrl-C, deadline, dropped connection) stdin reaches EOF and the watcher kills
the running probe, so nothing is left behind on the node.
"""
from __future__ import annotations

import base64
import gzip
import re
import secrets
import shlex
import time
from dataclasses import dataclass
from typing import Iterator

from ..model import CommandOutput, direct_init
from .clean import clean, suspect

DEFAULT_CAP = 1 << 20  # bytes kept per stream; the rest is dropped on the node
KILL_GRACE_S = 2
TRUNCATED_MARK = "\n[... truncated by preflight: more than {cap} bytes ...]\n"


@direct_init  # a batch builds one a probe
@dataclass(frozen=True)
class ProbeSpec:
    """One command for the driver. `root`: it needs root; `group`: a member of that group needs no
    root for it (npu-smi and HwHiAiUser); `become`: the user `sudo -n` runs it as when the login
    user lacks the privilege (the node's become_user), "" when the node has no become."""

    key: str
    cmd: str
    timeout: float
    root: bool = False
    group: str = ""
    become: str = ""
    job: bool = False  # to run in the job's container (preflight.container): `cmd` is its one-probe form
    inner: str = ""  # job: the probe as it runs inside the container
    inner_timeout: float = 0.0  # job: its own timeout there
    runtime: str = ""  # job: host shell text that runs an argv in the container (container.job_prefix)
    cap: int = 0  # bytes kept per stream when not the batch's cap (a job batch carries many probes)

    @property
    def mode(self) -> str:
        """How the driver's `pf` takes it: `-` as the login user, else `r,<group>,<become user>`."""
        return f"r,{self.group},{self.become}" if self.root else "-"


# Frame rc tokens for a probe the driver did not run (a probe cannot forge them: no nonce).
NOT_RUN_NEEDS_ROOT, NOT_RUN_SUDO_REFUSED = b"N", b"S"
NEEDS_ROOT = "needs root: set become: sudo, or run as root"
SUDO_REFUSED = "sudo -n refused: {words}"


# The driver in three parts: the prelude (temporary directory, traps), the stdin watcher (one per
# transport: SSH relays its channel, srun filters the step's broadcast stdin), and the body (pf).
_PRELUDE = r"""
exec 3<&0 </dev/null
d=$(mktemp -d "${TMPDIR:-/tmp}/.preflight.XXXXXX") || { echo "preflight: mktemp failed" >&2; exit 97; }
trap 'rm -rf "$d"' EXIT
w=
trap 'p=$(cat "$d/pid" 2>/dev/null); [ -n "$p" ] && { kill -TERM "$p" 2>/dev/null; wait "$p"; }; [ -n "$w" ] && { kill "$w" 2>/dev/null; wait "$w"; }; rm -rf "$d"; exit 143' TERM HUP INT
mkfifo "$d/q" || { echo "preflight: mkfifo failed" >&2; exit 97; }
"""
_WATCH = r"""( while IFS= read -r l; do printf '%s\n' "$l"; done; : >"$d/gone"; p=$(cat "$d/pid" 2>/dev/null); [ -n "$p" ] && { kill -TERM "$p" 2>/dev/null; kill -TERM $$ 2>/dev/null; } ) <&3 >"$d/q" &
"""
_BODY = r"""w=$!
exec 4<"$d/q" 3<&-
ulimit -f {fsize} 2>/dev/null
printf '@@PF:{nonce}:E\n' >"$d/e1"; printf '@@PF:{nonce}:Z\n' >"$d/z1"
if [ -n "${BASH_VERSION:-}" ] && [ -n "${EPOCHREALTIME:-}" ]; then
  now() { t=${EPOCHREALTIME/[.,]/}; }
else
  now() { t=$(date +%s%6N 2>/dev/null); }
fi
# How a probe of mode $1 runs: how= (as the login user), sudo, or N / S (not run; see ProbeSpec).
# Who the login user is (id -u, id -Gn) and whether sudo -n works are asked once, when first needed
# (never taken from the login environment).
uid= grs= sudo_ok=
priv() {
  how=; [ "$1" = - ] && return
  m=${1#r,}; g=${m%%,*}; u=${m#*,}
  [ -n "$uid" ] || uid=$(id -u)
  [ "$uid" = 0 ] && [ "${u:-root}" = root ] && return
  if [ -n "$g" ]; then
    [ -n "$grs" ] || grs=" $(id -Gn 2>/dev/null) "
    case $grs in *" $g "*) return ;; esac
  fi
  [ -n "$u" ] || { how=N; return; }
  if [ -z "$sudo_ok" ]; then
    sudo -n -u "$u" -- /bin/sh -c : >"$d/se" 2>&1 </dev/null 4<&- && sudo_ok=y || sudo_ok=n
  fi
  if [ "$sudo_ok" = y ]; then how=sudo; else how=S; cp "$d/se" "$d/e"; fi
}
{frame}
pf() {
  [ -e "$d/gone" ] && exit 0  # the client went away between two probes: start nothing more
  [ -e "$d/abort" ] && return  # (srun) the client gave up on this round: skip the rest of it
  priv "$3"
  now; s=$t
  case $how in
    N|S)
      [ "$how" = N ] && : >"$d/e"
      : >"$d/o"; now
      frame "$1" "$how" "$5"
      return ;;
    sudo) printf '%s\n' "$4" >"$d/c"
      timeout -k {grace} "$2" sudo -n -u "$u" -- /bin/sh -c 'c=$(cat); exec </dev/null; eval "$c"' <"$d/c" >"$d/o" 2>"$d/e" 4<&- 5<&- & ;;
    *) printf '%s\n' "$4" >"$d/c"
      timeout -k {grace} "$2" sh "$d/c" >"$d/o" 2>"$d/e" </dev/null 4<&- 5<&- & ;;
  esac
  echo $! >"$d/pid"
  settle $!
  wait $!
  rc=$?
  : >"$d/pid"
  now
  frame "$1" "$rc" "$5"
}
"""
# A probe's text reaches its shell through a file in the driver's own 0700 directory (printf is a
# builtin: no process, no argv), never as an argument: an argument is in /proc/PID/cmdline, which
# every user of the node can read, and the launch environment's probe carries the inventory's env
# values (tokens). Under sudo the file is the shell's stdin, read into a variable and run by eval
# (the target user may not be able to open the directory).
# How a frame leaves the node (`{frame}` above), per transport: `frame` sends or holds the probe's
# frame, `settle` runs while the next probe does, `flush` sends what is held. $3: the probe's own
# cap + 1, if it has one. The frame is assembled in a file and sent by one write: written piece by
# piece (printf, then head's four files) it left in several SSH packets.
_FRAME = r"""frame() {
  { printf '@@PF:{nonce}:B %s %s %s %s\n' "$1" "$2" "$s" "$t"; head -q -c "${3:-{cap1}}" "$d/o" "$d/e1" "$d/e" "$d/z1"; } >"$d/f"
  cat "$d/f"
}
settle() { :; }
flush() { :; }
"""
# Over SSH (docs/PERFORMANCE_HISTORY.md, third pass): every SSH packet costs the client about 0.3 ms of CPU in
# paramiko, whatever its size, so frames that finish close together leave in one write. A finished
# frame is held at most HOLD_S: `settle` watches the next probe (builtins only: `kill -0` and a
# timed `read` on a FIFO nobody writes, so no process per tick) and sends what is held once that
# probe has run past the hold, so a probe that hangs never holds back the ones before it. A send
# starts with `@@PF:<nonce>:T <node clock, us>`: the parser takes the hold off each frame's arrival
# time, so env.consistency's clock offset stays the transit time, not the hold. Holding needs
# bash's clock ($EPOCHREALTIME) and `read -t`; under another sh each frame leaves at once.
_FRAME_HELD = r"""tick=
if [ -n "${EPOCHREALTIME:-}" ] && mkfifo "$d/t" 2>/dev/null && exec 5<>"$d/t"; then tick={tick}; fi
hs=
flush() {
  if [ -z "$tick" ]; then [ -s "$d/h" ] && cat "$d/h"
  elif [ -s "$d/h" ]; then now; { printf '@@PF:{nonce}:T %s\n' "$t"; cat "$d/h"; } >"$d/f"; cat "$d/f"; fi
  : >"$d/h"; hs=
}
frame() {
  { printf '@@PF:{nonce}:B %s %s %s %s\n' "$1" "$2" "$s" "$t"; head -q -c "${3:-{cap1}}" "$d/o" "$d/e1" "$d/e" "$d/z1"; } >>"$d/h"
  [ -n "$hs" ] || hs=$t
  [ -n "$tick" ] && [ $((t - hs)) -lt {hold_us} ] || flush
}
settle() {
  [ -n "$hs" ] || return 0
  while kill -0 "$1" 2>/dev/null; do
    now; [ $((t - hs)) -lt {hold_us} ] || { flush; return 0; }
    read -t "$tick" -u 5 _
  done
}
"""
HOLD_S = 0.2  # the longest a finished probe's frame waits for the ones after it
TICK_S = 0.004  # how often `settle` looks whether the running probe has ended
# A driver for one round only (inside the job's container): end the watcher, then the driver.
# Every child is waited for (the trap above too): in a container whose PID 1 is `sleep infinity`
# (a common way to keep a job's container up) an orphan is never reaped and stays a zombie.
_ONCE = 'flush\nkill "$w" 2>/dev/null; wait "$w"\nexit 0\n'
# After the first round: wait for the next one on the FIFO; EOF (client gone) ends the driver.
_LOOP = r"""
while :; do
  printf '@@PF:{nonce}:R\n' >>"$d/h"; flush
  : >"$d/next"; go=
  while IFS= read -r l <&4; do
    case $l in "@@PF:{nonce}:GO") go=1; break ;; esac
    printf '%s\n' "$l" >>"$d/next"
  done
  [ -n "$go" ] || exit 0
  . "$d/next"
done
"""


def _fill(text: str, cap: int, frame: str = _FRAME, fsize: int | None = None) -> str:
    return (text.replace("{frame}", frame).replace("{cap1}", str(max(cap + 1, 64)))  # markers fit
            .replace("{grace}", str(KILL_GRACE_S)).replace("{tick}", str(TICK_S))
            .replace("{hold_us}", str(int(HOLD_S * 1e6)))
            .replace("{fsize}", str(max((fsize or cap) * 64 // 512, 2048))))


def _pf_lines(probes: list[ProbeSpec]) -> str:
    return "\n".join(f"pf {i} {int(max(1, p.timeout))} {shlex.quote(p.mode)} {shlex.quote(p.cmd)}"
                      + (f" {p.cap + 1}" if p.cap else "") for i, p in enumerate(probes))


def driver_script(probes: list[ProbeSpec], nonce: str, cap: int = DEFAULT_CAP, once: bool = False) -> str:
    """The POSIX sh text that starts a node's driver with its first round of probes (`once`: and
    ends it after them, leaving nothing behind: the job's container runs one per round)."""
    fsize = max(cap, *(p.cap for p in probes)) if probes else cap
    # inside the job's container (`once`) the frames go to the host-side probe's file, not a packet
    # each: held there, a hang in the container would take the finished frames with it
    head = _fill(_PRELUDE + _WATCH + _BODY, cap, frame=_FRAME if once else _FRAME_HELD,
                 fsize=fsize).replace("{nonce}", nonce)
    return head + _pf_lines(probes) + "\n" + (_ONCE if once else _LOOP.replace("{nonce}", nonce))


def round_script(probes: list[ProbeSpec], nonce: str) -> str:
    """A further round for a running driver, written to its stdin."""
    return _pf_lines(probes) + f"\n@@PF:{nonce}:GO\n"


def remote_command(script: str) -> tuple[str, bytes]:
    """(command, stdin): what the login shell runs, whatever it is, and the bytes to send it first.
    The command reads the driver from its stdin (`head -c` reads exactly its length, leaving the
    rounds that follow for the driver) and runs it with eval, under bash when there is one (its
    clock is a variable, not a process), else /bin/sh. The driver is never an argument: its first
    round carries the launch environment's probe, with the inventory's env values, and a process's
    arguments are readable by every user of the node."""
    data = script.encode()
    run = shlex.quote(f'eval "$(head -c {len(data)})"')
    return f"if [ -x /bin/bash ]; then exec /bin/bash --norc --noprofile -c {run}; fi; exec /bin/sh -c {run}", data


# `run --via slurm`: one srun step carries this program to every node (docs/SLURM.md §6). Its stdin
# is srun's, broadcast to every task: a line `<task id> <payload>` is for that task alone (grep keeps
# the node's own lines, in blocks: `sed -u` would read a byte at a time). A payload is either a
# round, base64 of a gzipped script of `pf` lines (one line: no text in it can end or extend the round, so
# nothing another node reported can become a command here), or `.`: give up on the running round
# (kill its probe, skip its rest). stdin's EOF ends the program as it ends the SSH driver. Each round
# names its own nonce, so a frame from a round the client gave up on is noise to the next one.
# Output goes through srun --label, which splits lines at 1024 bytes and ends a partial line with a
# newline: so every probe's frame body is sent as base64 lines of 760 characters; `@@PF:` lines
# (begin, hello) are sent as they are.
_STEP_WATCH = r"""( grep --line-buffered "^$id " <&3 | while IFS= read -r l; do
  l=${l#* }
  if [ "$l" = . ]; then : >"$d/abort"; p=$(cat "$d/pid" 2>/dev/null); [ -n "$p" ] && kill -TERM "$p" 2>/dev/null
  else printf '%s\n' "$l"; fi
done; : >"$d/gone"; p=$(cat "$d/pid" 2>/dev/null); [ -n "$p" ] && { kill -TERM "$p" 2>/dev/null; kill -TERM $$ 2>/dev/null; } ) >"$d/q" &
"""
_STEP_ID = r"""case ${SLURM_PROCID:-} in ''|*[!0-9]*) echo "preflight: SLURM_PROCID is not set: not run by srun" >&2; exit 97 ;; esac
id=$SLURM_PROCID
"""
_STEP_LOOP = r"""printf '@@PF:H %s %s\n' "$id" "${SLURMD_NODENAME:-}"
while IFS= read -r l <&4; do
  rm -f "$d/abort"
  printf '%s\n' "$l" | base64 -d 2>/dev/null | gzip -dc >"$d/next" 2>/dev/null || continue
  . "$d/next"
done
"""
STEP_LINE = 760  # base64 characters a line: a multiple of 4 (each line decodes alone), under srun's 1024
_STEP_FRAME = r"""frame() {
  printf '@@PF:{nonce}:B %s %s %s %s\n' "$1" "$2" "$s" "$t"
  head -q -c "${3:-{cap1}}" "$d/o" "$d/e1" "$d/e" "$d/z1" | base64 -w {line}
}
settle() { :; }
""".replace("{line}", str(STEP_LINE))
STEP_HELLO = b"@@PF:H "
STEP_ABORT = "."


def step_program(cap: int = DEFAULT_CAP) -> str:
    """The POSIX sh program srun starts on every node of the step; rounds come by `step_round`."""
    body = _fill(_BODY, cap, frame=_STEP_FRAME).replace("{nonce}", "'\"$n\"'")
    return _STEP_ID + _PRELUDE + _STEP_WATCH + body + _STEP_LOOP


def step_round(probes: list[ProbeSpec], nonce: str) -> str:
    """One round for a task of the step: base64 of its gzipped script (set this round's nonce, then pf
    lines). gzip because every task reads every task's rounds: a ping mesh's round names every peer."""
    script = (f"n={nonce}; printf '@@PF:%s:E\\n' \"$n\" >\"$d/e1\"; printf '@@PF:%s:Z\\n' \"$n\" >\"$d/z1\"\n"
              + _pf_lines(probes) + "\n")
    return base64.b64encode(gzip.compress(script.encode(), compresslevel=6, mtime=0)).decode()


def new_nonce() -> str:
    return secrets.token_hex(8)


def _int(value: bytes, default: int = 0) -> int:
    try:
        return int(value)
    except ValueError:
        return default


_BEGIN = re.compile(rb"@@PF:(\S+?):(?:B (\d+) (\d+|N|S) (\S*) (\S*)|T (\d+))\n")  # a frame, or a send's time


class FrameParser:
    """Incremental parser: feed() raw bytes, get (index, CommandOutput) for every finished probe."""

    def __init__(self, nonce: str, probes: list[ProbeSpec], cap: int = DEFAULT_CAP):
        self.probes = probes
        self.cap = cap
        n = nonce.encode()
        self._nonce, self._sep, self._end = n, b"@@PF:" + n + b":E\n", b"@@PF:" + n + b":Z\n"
        self._buf = b""
        self._head: tuple | None = None  # (idx, rc, t0, t1) of the frame being read
        self._out: bytes | None = None
        self._from = 0  # where the next marker search starts (a 1 MiB stream arrives in many reads)
        self.noise = b""  # what the login shell printed outside frames (e.g. .bashrc chatter)
        self._sent_at = 0  # the node's clock (us) when the frames now arriving left it (a `T` line), 0: at once

    def feed(self, data: bytes) -> Iterator[tuple[int, CommandOutput]]:
        self._buf += data
        while True:
            if self._head is None and not self._begin():
                return
            if self._out is None:
                cut = self._find(self._sep)
                if cut < 0:
                    return
                self._out, self._buf = self._buf[:cut], self._buf[cut + len(self._sep):]
            cut = self._find(self._end)
            if cut < 0:
                return
            err, self._buf = self._buf[:cut], self._buf[cut + len(self._end):]
            (idx, rc, t0, t1), out = self._head, self._out
            self._head = self._out = None
            i = _int(idx)
            if i >= len(self.probes):
                continue
            if rc in (NOT_RUN_NEEDS_ROOT, NOT_RUN_SUDO_REFUSED):
                yield i, _not_run(rc, err, t0)
            else:
                yield i, self._output(self.probes[i], _int(rc), t0, t1, out, err)

    def _find(self, marker: bytes) -> int:
        cut = self._buf.find(marker, self._from)
        self._from = 0 if cut >= 0 else max(0, len(self._buf) - len(marker))
        return cut

    def _begin(self) -> bool:
        """Find the next begin line carrying our nonce; what precedes it is noise."""
        pos = 0
        while (m := _BEGIN.search(self._buf, pos)) is not None:
            if m.group(1) == self._nonce:
                self.noise = (self.noise + self._buf[: m.start()])[-4096:]
                if m.group(6) is not None:  # the frames after it were held on the node until then
                    self._sent_at, self._buf, pos = _int(m.group(6)), self._buf[m.end():], 0
                    continue
                self._head, self._buf = m.groups()[1:5], self._buf[m.end():]
                return True
            pos = m.start() + 1
        keep = max(0, len(self._buf) - 256)  # a begin line may be split across reads
        self.noise = (self.noise + self._buf[:keep])[-4096:]
        self._buf = self._buf[keep:]
        return False

    def _output(self, probe: ProbeSpec, rc: int, t0: bytes, t1: bytes, out: bytes, err: bytes) -> CommandOutput:
        duration = max(0.0, (_int(t1) - _int(t0)) / 1e6) if t0.isdigit() and t1.isdigit() else 0.0
        timed_out = rc == 124 or (rc == 137 and duration >= probe.timeout - 0.5)
        error = None
        if timed_out:
            error = f"timed out after {probe.timeout:g}s"
        elif 128 < rc < 160:  # sh reports death by signal N as 128+N (ambiguous with `exit 13x`)
            error = f"killed by signal {rc - 128}"
        cap = probe.cap or self.cap
        return CommandOutput(  # a job batch's stdout carries frames: kept byte for byte (surrogateescape)
            stdout=_text(out, cap, "surrogateescape" if probe.cap else "backslashreplace"), stderr=_text(err, cap), rc=rc,
            duration_s=duration, timed_out=timed_out, truncated=len(out) > cap or len(err) > cap,
            error=error, node_started_at=_int(t0) / 1e6 if t0.isdigit() else None,
            received_at=time.time() - self._held(t1))

    def _held(self, t1: bytes) -> float:
        """How long a frame waited on the node after its probe ended (seconds, node clock), so
        received_at is when it would have arrived sent at once."""
        if not self._sent_at or not t1.isdigit():
            return 0.0
        return max(0.0, (self._sent_at - _int(t1)) / 1e6)


def _not_run(token: bytes, err: bytes, t0: bytes) -> CommandOutput:
    """A probe the driver left unrun for want of privilege: no rc; `denied` says why, in sudo's
    own words when sudo -n refused."""
    if token == NOT_RUN_NEEDS_ROOT:
        why = NEEDS_ROOT
    else:
        words = " ".join(ln.strip() for ln in _text(err, 2000).splitlines() if ln.strip())[:300]
        why = SUDO_REFUSED.format(words=words or "no message")
    return CommandOutput(stderr=_text(err, 2000), rc=None, error=why, denied=why,
                         node_started_at=_int(t0) / 1e6 if t0.isdigit() else None, received_at=time.time())


def _text(data: bytes, cap: int, errors: str = "backslashreplace") -> str:
    """Decode defensively: vendor tools and broken locales print anything; a byte that is not UTF-8
    stays readable as `\\xNN` (never the U+FFFD that would lose it), so evidence shows what the
    node printed and every report format stays valid. Terminal escapes and
    stray control characters go here, the one place every probe's output passes (transport/clean.py);
    a job batch's frames (surrogateescape) are kept byte for byte: each probe in them is cleaned
    when they are unwrapped."""
    if len(data) > cap:  # the node sent cap+1 bytes: there was more
        data, mark = data[:cap], TRUNCATED_MARK.format(cap=cap)
    else:
        mark = ""
    text = data.decode("utf-8", errors=errors)
    if errors != "surrogateescape" and suspect(data):
        text = clean(text)
    return text + mark
