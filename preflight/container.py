"""The job's container: how a job-side probe reaches it (docs/SPEC.md §2.10).

A check declares where it looks (checkapi's WHERE: "host" or "job"). On a node whose inventory
names a `container:`, the runner turns each job-side probe into one runtime call, here and
nowhere else, so every check gets the same quoting, timeout and clean-up:

    <runtime> exec <name> timeout -k 2 <T> /bin/sh -c '<probe>'                     (name:)
    <runtime> run --rm --pull=never <run_args...> <image> timeout -k 2 <T> /bin/sh -c '<probe>'

The inner `timeout` ends the probe inside the container (killing the runtime's client would not:
an exec'd process outlives its client), `--rm` removes the fresh container when it exits, and the
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


@dataclass(frozen=True)
class Container:
    runtime: str = "docker"
    name: str | None = None      # a running container to exec into
    image: str | None = None     # or a fresh `run --rm` of this image
    run_args: tuple[str, ...] = ()  # with image: the job's own run arguments (devices, mounts)

    @property
    def label(self) -> str:
        return f"container {self.name}" if self.name else f"image {self.image}"


def job_command(c: Container, cmd: str, timeout: float) -> str:
    """The host command that runs `cmd` inside the job's container, bounded by `timeout` there."""
    q = shlex.quote
    inner = f"timeout -k {INNER_KILL_S} {int(max(1, timeout))} /bin/sh -c {q(cmd)}"
    if c.name:
        return f"{q(c.runtime)} exec {q(c.name)} {inner}"
    args = " ".join(q(a) for a in c.run_args)
    # --pull=never: an image that is not on the node is an error now, not a pull from the network
    return f"{q(c.runtime)} run --rm --pull=never {args + ' ' if args else ''}{q(c.image or '')} {inner}"
