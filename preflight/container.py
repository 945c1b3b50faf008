"""The job's container: how a job-side probe reaches it (docs/SPEC.md §2.10).

A check declares where it looks (its Policy's `where`: "host" or "job"). On a node whose inventory
names a `container:`, the runner marks each job-side probe for the runtime, here and nowhere
else, so every check gets the same quoting, timeout and clean-up. One probe, as recorded and
replayed (its identity):

    <runtime> exec -i <name> timeout -k 2 <T> /bin/sh -c '<probe>'                     (name:)
    <runtime> run --rm -i --pull=never <run_args...> <image> timeout -k 2 <T> /bin/sh -c '<probe>'

What runs (`batch_command`): all of a node's job-side probes of one round in ONE runtime call,
carried by the framed driver (preflight.transport.batch) started inside the container, so the
runtime's start-up (+0.3 s an exec, +0.7 s a `run --rm`) is paid once per node and round, not per
probe. The inner driver runs each probe under its own `timeout` (killing the runtime's client
would not end it: an exec'd process outlives its client), caps its streams as on the host, and
watches its stdin: the call's stdin is a FIFO held open by the host side, so when the client goes
away (deadline, Ctrl-C, lost connection) the container's stdin reaches EOF and the inner driver
kills the running probe and exits. `--rm` removes a fresh container when its driver exits. The
node's remote `timeout` around the whole call allows START_SLACK_S more for the runtime to start.
The runtime needs root (rootful podman, dockerd's socket) or, for docker, the docker group: the
core's privilege rules (become) apply to the call as to any probe that needs root.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass

RUNTIMES = ("docker", "podman")
RUNTIME_GROUP = {"docker": "docker", "podman": None}  # a group whose members may use the runtime
START_SLACK_S = 15.0
INNER_KILL_S = 2
HOST_NETWORK = "host"


@dataclass(frozen=True)
class Container:
    runtime: str = "docker"
    name: str | None = None      # a running container to exec into
    image: str | None = None     # or a fresh `run --rm` of this image
    run_args: tuple[str, ...] = ()  # with image: the job's own run arguments (devices, mounts)

    @property
    def label(self) -> str:
        return f"container {self.name}" if self.name else f"image {self.image}"

    @property
    def network(self) -> str | None:
        """The network mode `run_args` give (`--network X`, `--net=X`); None when they give none
        (a named container's mode is known only from `inspect`: container.runtime reads it)."""
        args = self.run_args
        for i, a in enumerate(args):
            for flag in ("--network", "--net"):
                if a == flag and i + 1 < len(args):
                    return args[i + 1]
                if a.startswith(flag + "="):
                    return a.split("=", 1)[1]
        return None

    @property
    def own_network(self) -> bool:
        """Whether the job sees network interfaces and routes of its own (a fresh run with a
        non-host network mode); then those facts are the container's, not the host's."""
        return self.image is not None and self.network not in (HOST_NETWORK, None)


def job_prefix(c: Container) -> str:
    """Host shell text that runs the argv after it inside the job's container, stdin attached."""
    q = shlex.quote
    if c.name:
        return f"{q(c.runtime)} exec -i {q(c.name)}"
    args = " ".join(q(a) for a in c.run_args)
    # --pull=never: an image that is not on the node is an error now, not a pull from the network
    return f"{q(c.runtime)} run --rm -i --pull=never {args + ' ' if args else ''}{q(c.image or '')}"


def job_command(c: Container, cmd: str, timeout: float) -> str:
    """One job-side probe as a host command, bounded by `timeout` inside the container: the
    probe's identity (recordings, replay); batches run it through `batch_command`."""
    inner = f"timeout -k {INNER_KILL_S} {int(max(1, timeout))} /bin/sh -c {shlex.quote(cmd)}"
    return f"{job_prefix(c)} {inner}"


def batch_command(prefix: str, script: str) -> str:
    """The host command that runs the driver `script` inside the container (`prefix`: job_prefix)
    with its stdin a FIFO this shell holds open: when the shell ends (its timeout, the client gone),
    the container's stdin reaches EOF and the driver inside kills what still runs. The driver goes
    through the FIFO too (printf is a builtin), never as an argument of the runtime: it carries the
    launch environment's values (batch.remote_command)."""
    from .transport.batch import remote_command
    q = shlex.quote
    boot, _ = remote_command(script)
    return "\n".join([
        'f=$(mktemp -d "${TMPDIR:-/tmp}/.preflight-job.XXXXXX") || exit 97',
        'mkfifo -m 600 "$f/in" || { rm -rf "$f"; exit 97; }',
        f'{prefix} /bin/sh -c {q(boot)} <"$f/in" & c=$!',
        'exec 6>"$f/in"; rm -rf "$f"',
        "trap 'exec 6>&-; kill -TERM \"$c\" 2>/dev/null; exit 143' TERM HUP INT",
        # a runtime that ends before reading it (no such container) must not kill this shell by SIGPIPE:
        # its own exit status is the answer
        f"trap '' PIPE; printf '%s' {q(script)} >&6 2>/dev/null; trap - PIPE",
        'wait "$c"',
    ])
