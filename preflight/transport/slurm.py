"""Nodes reached through Slurm (`run --via slurm`): ONE srun step carries the node driver to every node.

Why: on clusters where the control host may not SSH into compute nodes (or has too many), Slurm's
own daemons are the way in, and one `srun --nodes=N --ntasks-per-node=1 --label` costs the client
one process for all N nodes (one srun per node cost 3x SSH's client CPU at 128 nodes). The program
each task runs and the line protocol are batch.step_program's; this module is the client side:

- Before the step, `sinfo -N` says which nodes Slurm can launch on: a node it does not know, or that
  is offline (down, drained, failed...), gets its own unreachable state and reason, and the step
  is started without it (srun refuses a whole step for one such node in --nodelist). If srun still
  refuses before any task answered (a node went down meanwhile), sinfo is asked again and the step
  retried once without the newly offline nodes; a node left over is unreachable with srun's words.
- srun's stdout is demultiplexed by its task label into one frame stream per node (each task's
  first line names its SLURM_PROCID and SLURMD_NODENAME); each node keeps its own session, so the
  runner's deadlines, caps, timeouts and cancel work per node exactly as over SSH. A task's word
  for its node is verified: srun -v says which node it launched each task on (its own layout, from
  slurmctld), and a task whose hello names another node is refused, so one node cannot report
  under another's name.
- stdin lines are written by one writer thread (never blocking a node's session); a session that
  gives up on a round sends its node `.` (its probe is killed there); closing the transport closes
  srun's stdin, every driver ends, and srun is terminated if it does not exit by itself.
"""
from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time
from binascii import Error as Base64Error
from base64 import b64decode
from typing import Sequence

from ..model import CommandOutput, NodeStateKind
from ..node import Node
from ..nodeset import expand
from ..slurm.commands import SlurmError, node_states
from . import ConnectError, jobbatch, unfinished
from .batch import DEFAULT_CAP, STEP_ABORT, STEP_HELLO, ProbeSpec, new_nonce, step_program, step_round
from .stream import CANCELLED, POLL_S, Budget, collect

LAUNCH_SLACK_S = 30.0  # beyond the node's connect_timeout: srun's allocation and launch of a large step
EXIT_WAIT_S = 10.0  # after stdin's EOF, how long srun gets to end the step before it is terminated
_LABEL = re.compile(rb"^\s*(\d+): ?(.*)$", re.S)
# srun -v's line for each node of the step (src/api/step_launch.c, 22.05: "launching %ps on host %s,
# %u tasks: %s"): the tasks Slurm put on that node, the client's own knowledge, not the task's word
_LAYOUT = re.compile(r"srun: launching \S+ on host (?P<node>\S+), \d+ tasks?: (?P<tasks>[\d,\-]+)\s*$")
# srun's own lines that say a node's task can send no more (src/srun, Slurm 22.05): a task that
# ended, a launch refused by that node's slurmd, a node slurmctld declared failed (a hostlist).
_NODE_ERRORS = (re.compile(r"srun: error: (?P<nodes>[^\s:]+): tasks? [\d,\-]+: (?P<why>.+)"),
                re.compile(r"srun: error: Task launch for \S+ failed on node (?P<nodes>\S+): (?P<why>.+)"),
                re.compile(r"srun: error: (?P<why>Node failure) on (?P<nodes>\S+)"))


def srun_argv(names: Sequence[str], immediate: int) -> list[str]:
    """The one step: a task per node, labelled output, broadcast stdin; a task that ends (or a
    node that fails) never ends the others (--kill-on-bad-exit=0, --wait=0, --no-kill)."""
    return ["srun", "-v", "--label", "--input=all", f"--nodes={len(names)}", f"--ntasks={len(names)}",
            "--ntasks-per-node=1", f"--nodelist={','.join(names)}", "--kill-on-bad-exit=0", "--wait=0",
            "--no-kill", f"--immediate={immediate}", "--job-name=preflight", "/bin/sh", "-c", step_program()]


def _hostlist(text: str) -> list[str]:
    try:
        return expand(text)
    except ValueError:  # nodeset.RangeError: not a hostlist after all
        return [text]


class _Sink:
    """What a node's session reads: decoded frame bytes from its task, b"" once it can send no more."""

    def __init__(self) -> None:
        self.q: queue.Queue[bytes] = queue.Queue()
        self.closed = False

    def read(self) -> bytes | None:
        try:  # what arrived before the task ended is read first
            return self.q.get_nowait() if self.closed else self.q.get(timeout=POLL_S)
        except queue.Empty:
            return b"" if self.closed else None


class SrunStep:
    """The srun process for every launchable node, its reader and writer threads and the demux."""

    def __init__(self, nodes: Sequence[Node]):
        """Asks sinfo which nodes Slurm can launch on; SlurmError (exit 5) when Slurm cannot be asked."""
        self.nodes = {n.name: n for n in nodes}
        self.refused: dict[str, str] = {}  # node -> why Slurm cannot launch there (its own state)
        self.aborted = threading.Event()  # the run was cut: stop waiting for the launch
        self.proc: subprocess.Popen | None = None
        self.tasks: dict[int, str] = {}  # task id -> node name (from each task's first line)
        self.hello: dict[str, int] = {}  # node name -> task id
        self.layout: dict[int, str] = {}  # task id -> the node srun launched it on (srun -v)
        self.claims: dict[int, str] = {}  # task id -> the node its hello names
        self.sinks: dict[str, _Sink] = {}
        self.lost: dict[str, str] = {}  # node -> why its task can send no more (srun's words)
        self.errors: list[str] = []  # srun's own stderr lines, for a launch that failed
        self.out_q: queue.Queue[bytes | None] = queue.Queue()
        self.cond = threading.Condition()
        self.ended = False  # srun's stdout reached EOF
        self._started = False
        self._start_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.launch = self._launchable(list(self.nodes))

    # ---------------------------------------------------------------- launch
    def ensure_started(self) -> None:
        with self._start_lock:
            if self._started:
                return
            self._started = True
            self._launch(self.launch)

    def _launchable(self, names: list[str]) -> list[str]:
        """The names Slurm can launch on; the others get their reason in `refused`."""
        states = node_states(names)
        ok = []
        for n in names:
            s = states.get(n)
            if s is None:
                self.refused[n] = f"Slurm does not know node {n} (sinfo -N does not list it): " \
                                  "with --via slurm inventory names must be Slurm node names"
            elif s.offline:  # (a `*` alone is not refused: a node just resumed shows idle* for a second)
                self.refused[n] = f"Slurm cannot launch on {n}: it is {s.state}" + \
                                  (f" (reason: {s.reason})" if s.reason else "")
            else:
                ok.append(n)
        return ok

    def _launch(self, names: list[str]) -> None:
        if not names:
            self.ended = True
            return
        immediate = int(max(self.nodes[n].connect_timeout for n in names)) + 1
        for attempt in (1, 2):
            self._spawn(names, immediate)
            if self._wait_first_hello(names):
                return
            # srun ended before any task answered: a node went offline after sinfo, or Slurm refused
            try:
                retry = self._launchable(names) if attempt == 1 and not self.aborted.is_set() else names
            except SlurmError as exc:
                self.errors.append(str(exc))
                retry = names
            if attempt == 2 or retry == names or not retry:
                why = self._srun_words()
                for n in names:
                    if n not in self.refused:
                        self.refused[n] = f"srun could not launch the step: {why}"
                return
            names = retry

    def _spawn(self, names: list[str], immediate: int) -> None:
        self.out_q.put(None)  # a writer of an earlier attempt ends
        self.errors, self.ended = [], False
        with self.cond:  # srun's words about a node in an earlier attempt are not this attempt's
            self.lost.clear()
            self.layout.clear()
            self.claims.clear()
        self.proc = subprocess.Popen(srun_argv(names, immediate), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self.out_q = queue.Queue()
        self._threads = [threading.Thread(target=self._guarded, args=(f, self.proc), daemon=True,
                                          name=f"srun-{f.__name__}")
                         for f in (self._read_stdout, self._read_stderr, self._write_stdin)]
        for t in self._threads:
            t.start()

    def _wait_first_hello(self, names: list[str]) -> bool:
        wait_s = max(self.nodes[n].connect_timeout for n in names) + LAUNCH_SLACK_S
        limit = time.monotonic() + wait_s
        with self.cond:
            while not self.hello and not self.ended and time.monotonic() < limit and not self.aborted.is_set():
                self.cond.wait(POLL_S)
            if self.hello:
                return True
        if not self.ended:  # nothing within the launch time: end it, say why
            self._terminate()
            self.errors.append(f"no task started within {wait_s:.0f}s")
        for t in self._threads[:2]:
            t.join(timeout=5)
        return False

    def _srun_words(self) -> str:
        said = [e for e in self.errors if "error" in e.lower()] or self.errors
        return " ".join(" ".join(said[-2:]).split())[:300] or f"srun exited ({self.proc.poll() if self.proc else '?'})"

    # ---------------------------------------------------------------- per node
    def wait_node(self, name: str, cancel: threading.Event) -> int:
        """The task id of node `name` once its driver answered; ConnectError when it cannot."""
        self.ensure_started()
        if name in self.refused:
            raise ConnectError(NodeStateKind.UNREACHABLE, self.refused[name])
        node = self.nodes[name]
        wait_s = node.connect_timeout + LAUNCH_SLACK_S
        limit = time.monotonic() + wait_s
        with self.cond:
            while name not in self.hello and not cancel.is_set() and not self.aborted.is_set():
                if name in self.lost or self.ended:
                    break
                if time.monotonic() >= limit:
                    raise ConnectError(NodeStateKind.UNREACHABLE,
                                       f"srun started no driver on {name} within {wait_s:.0f}s")
                self.cond.wait(POLL_S)
            if name in self.hello:
                return self.hello[name]
        if cancel.is_set() or self.aborted.is_set():
            raise ConnectError(NodeStateKind.TIMEOUT, CANCELLED)
        raise ConnectError(NodeStateKind.UNREACHABLE,
                           f"srun: {self.lost.get(name) or self._srun_words()} (the step did not run on {name})")

    def attach(self, name: str) -> _Sink:
        sink = _Sink()
        with self.cond:
            old = self.sinks.get(name)
            if old is not None:
                old.closed = True
            self.sinks[name] = sink
            if name in self.lost or self.ended:
                sink.closed = True
        return sink

    def send(self, task: int, payload: str) -> None:
        self.out_q.put(f"{task} {payload}\n".encode())

    def abort(self, task: int) -> None:
        self.send(task, STEP_ABORT)

    # ---------------------------------------------------------------- threads
    def _guarded(self, body, proc: subprocess.Popen) -> None:
        """A bug in a reader or the writer must not leave every node waiting for its idle limit: the
        step is ended and each session says why."""
        try:
            body(proc)
        except Exception as exc:  # noqa: BLE001
            self._lose(list(self.nodes), f"internal error in preflight's srun {body.__name__}: "
                                         f"{type(exc).__name__}: {exc}")
            self._terminate()

    def _read_stdout(self, proc: subprocess.Popen) -> None:
        buf = b""
        fd = proc.stdout.fileno()
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except OSError:
                data = b""
            if not data:
                break
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                self._route(line)
        with self.cond:
            self.ended = True
            for s in self.sinks.values():
                s.closed = True
            self.cond.notify_all()

    def _route(self, line: bytes) -> None:
        m = _LABEL.match(line)
        if m is None:
            return  # not a task's line (srun prints its own on stderr)
        task, text = int(m.group(1)), m.group(2)
        name = self.tasks.get(task)
        if name is None:
            if text.startswith(STEP_HELLO):
                parts = text[len(STEP_HELLO):].decode("utf-8", "replace").split()
                if len(parts) == 2 and parts[0] == str(task):
                    with self.cond:
                        self.claims.setdefault(task, parts[1])
                        self._verify(task)
            return
        if text.startswith(b"@@PF:"):
            data = text + b"\n"
        else:
            try:
                data = b64decode(text, validate=True)
            except (Base64Error, ValueError):
                return  # not ours: noise
        sink = self.sinks.get(name)
        if sink is not None and not sink.closed:
            sink.q.put(data)

    def _verify(self, task: int) -> None:
        """(under cond) Map a task to its node once srun's layout and the task's hello both said
        where it runs, and only when they agree."""
        node, claim = self.layout.get(task), self.claims.get(task)
        if node is None or claim is None or node not in self.nodes:
            return
        if claim != node:
            self.lost.setdefault(node, f"its task {task} reported itself as {claim[:64]!r}: the node's identity "
                                       "does not match srun's layout, so nothing it sends is taken")
            sink = self.sinks.get(node)
            if sink is not None:
                sink.closed = True
        elif node not in self.hello:
            self.tasks[task], self.hello[node] = node, task
        self.cond.notify_all()

    def _read_stderr(self, proc: subprocess.Popen) -> None:
        for raw in proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            layout = _LAYOUT.match(line)
            if layout is not None:
                with self.cond:
                    for task in _hostlist(f"t[{layout['tasks']}]"):
                        self.layout.setdefault(int(task[1:]), layout["node"])
                        self._verify(int(task[1:]))
                continue
            m = _LABEL.match(raw.rstrip(b"\n"))
            if m is not None:  # a task's own stderr (the driver's "mktemp failed")
                name = self.tasks.get(int(m.group(1)))
                said = m.group(2).decode("utf-8", "replace")[:200]
                if name is not None:
                    with self.cond:
                        self.lost.setdefault(name, said)
                else:  # before its hello line (mktemp, mkfifo): kept as srun's words, which name the task's node
                    self.errors.append(f"task {int(m.group(1))} error: {said}")
                    self.errors = self.errors[-20:]
                continue
            self.errors.append(line)
            self.errors = self.errors[-20:]
            for pattern in _NODE_ERRORS:
                m = pattern.match(line)
                if m is not None:
                    self._lose(_hostlist(m.group("nodes")), line.removeprefix("srun: error: "))
                    break

    def _lose(self, names: list[str], why: str) -> None:
        """Those nodes' tasks can send no more: their sessions see EOF, with srun's words."""
        with self.cond:
            for name in names:
                if name in self.nodes:
                    self.lost.setdefault(name, why)
                    sink = self.sinks.get(name)
                    if sink is not None:
                        sink.closed = True
            self.cond.notify_all()

    def _write_stdin(self, proc: subprocess.Popen) -> None:
        out_q = self.out_q
        fd = proc.stdin.fileno()
        while True:
            data = out_q.get()
            if data is None:
                break
            try:
                while data:
                    data = data[os.write(fd, data):]
            except OSError:
                break
        try:
            proc.stdin.close()
        except OSError:
            pass

    # ---------------------------------------------------------------- end
    def close(self) -> None:
        proc = self.proc
        if proc is None:
            return
        self.out_q.put(None)  # stdin EOF: every driver kills what still runs and ends
        try:
            proc.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            self._terminate()
        for t in self._threads:
            t.join(timeout=2)

    def _terminate(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)  # srun cancels the step: slurmstepd kills every task's processes
        try:
            proc.wait(timeout=EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class SrunSession:
    """One node's share of the step: the runner's session for it (rounds, timeouts, cancel)."""

    def __init__(self, step: SrunStep, node: Node, task: int, cap: int = DEFAULT_CAP):
        self.step, self.node, self.task, self.cap = step, node, task, cap
        self.connected = "reached through srun (one step for every node); SSH not used"
        self.sink = step.attach(node.name)
        self._lock = threading.Lock()
        self.budget = Budget()  # what this node may still send in this run

    def run(self, probes: list[ProbeSpec], cancel: threading.Event) -> dict[str, CommandOutput]:
        """Every probe's output by key; job-side probes travel as one runtime call per container
        (preflight.transport.jobbatch), as over SSH: the step carries the batch, not its members."""
        return jobbatch.run_split(probes, self.cap, lambda sent: self._run(sent, cancel))

    def _run(self, probes: list[ProbeSpec], cancel: threading.Event) -> dict[str, CommandOutput]:
        if not probes:
            return {}
        with self._lock:
            nonce = new_nonce()
            self.step.send(self.task, step_round(probes, nonce))
            done, why = collect(self.sink, nonce, probes, cancel, self.cap, self.budget)
            if why:
                lost = self.step.lost.get(self.node.name)
                if lost and why != CANCELLED:
                    why = f"{why}: srun: {lost}"
                self.step.abort(self.task)  # its probe is killed on the node, the rest of the round skipped
                return unfinished(probes, done, why)
            return done

    def close(self) -> None:
        if not self.sink.closed:
            self.sink.closed = True
            self.step.abort(self.task)


class SrunTransport:
    """connect() per node as the runner asks; the step for every node starts with the first."""

    def __init__(self, nodes: Sequence[Node]):
        self.step = SrunStep(nodes)

    def abort(self) -> None:
        """The run was cut (deadline, Ctrl-C): nodes still waiting for the launch stop waiting."""
        self.step.aborted.set()

    def connect(self, node: Node, cancel: threading.Event) -> SrunSession:
        if node.name not in self.step.nodes:
            raise ConnectError(NodeStateKind.UNREACHABLE, f"{node.name} is not in the srun step")
        return SrunSession(self.step, node, self.step.wait_node(node.name, cancel))

    def close(self) -> None:
        self.step.close()
