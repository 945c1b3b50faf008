"""A node's job-side probes of one round as ONE runtime call (preflight.container.batch_command).

Each job-side probe arrives as its own ProbeSpec (its one-probe `cmd` is what is recorded and
replayed); here those of one container become a single host probe that starts the framed driver
inside the container with all of them, so the runtime's start-up is paid once per node and round.
Inside, every probe keeps its own timeout and stream cap; the host probe's timeout is their sum
plus the runtime's start-up slack. Unwrapping gives every probe its own output: its frame from
the inner driver, or, when the runtime never started the driver (no such container, image absent,
sudo refused), the call's own answer, so the runner's refusal rules (wrapping.runtime_refused) read
it as they read a single call.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..container import INNER_KILL_S, START_SLACK_S, batch_command
from ..model import CommandOutput
from .batch import DEFAULT_CAP, FrameParser, ProbeSpec, driver_script, new_nonce

FRAME_SLACK = 512  # a frame's markers and header beyond its two capped streams


@dataclass(frozen=True)
class JobBatch:
    spec: ProbeSpec  # the one host probe
    nonce: str
    members: tuple[ProbeSpec, ...]  # as the inner driver runs them (inner command, own timeout)
    keys: tuple[str, ...]  # the callers' keys, in the same order


def split(probes: list[ProbeSpec], cap: int = DEFAULT_CAP) -> tuple[list[ProbeSpec], list[JobBatch]]:
    """(the probes to send to the node's driver, the job batches among them)."""
    plain: list[ProbeSpec] = []
    groups: dict[str, list[ProbeSpec]] = {}
    for p in probes:
        if p.job and p.runtime:
            groups.setdefault(p.runtime, []).append(p)
        else:
            plain.append(p)
    batches = []
    for i, (prefix, members) in enumerate(groups.items()):
        nonce = new_nonce()
        inner = tuple(ProbeSpec(key=str(j), cmd=m.inner, timeout=m.inner_timeout) for j, m in enumerate(members))
        # The members' own timeouts (as `inner` carries them): summed, the host call outlives them all.
        timeout = START_SLACK_S + sum(int(max(1, m.timeout)) + INNER_KILL_S + 1 for m in inner)
        first = members[0]  # one runtime, one privilege for all of them (wrapping.spec)
        spec = ProbeSpec(key=f"job{i}", cmd=batch_command(prefix, driver_script(list(inner), nonce, cap, once=True)),
                         timeout=timeout, root=first.root, group=first.group, become=first.become,
                         cap=len(inner) * (2 * cap + FRAME_SLACK) + 4096)
        batches.append(JobBatch(spec, nonce, inner, tuple(m.key for m in members)))
        plain.append(spec)
    return plain, batches


def run_split(probes: list[ProbeSpec], cap: int, run) -> dict[str, CommandOutput]:
    """Every probe's output by key through `run` (a session's own round: list of specs -> outputs),
    the job-side probes sent as one runtime call per container and unwrapped: what every
    transport's session does, so a node's job-side probes of a round cost one runtime start."""
    sent, batches = split(probes, cap)
    done = run(sent)
    for b in batches:
        done.update(unwrap(b, done.pop(b.spec.key, None), cap))
    return done


def unwrap(batch: JobBatch, out: CommandOutput | None, cap: int = DEFAULT_CAP) -> dict[str, CommandOutput]:
    """The job batch's one output -> each member's own, under the callers' keys."""
    got: dict[str, CommandOutput] = {}
    if out is not None and out.stdout:
        parser = FrameParser(batch.nonce, list(batch.members), cap)
        got = {batch.keys[i]: o for i, o in parser.feed(out.stdout.encode("utf-8", "surrogateescape"))}
    if out is None:
        out = CommandOutput(rc=None, error="the job's container batch did not run")
    started = bool(got)
    for key in batch.keys:
        if key in got:
            continue
        if not started:  # the runtime never started the driver: its own answer, for each probe
            got[key] = replace(out, stdout="")
        else:  # the driver started, then the call ended (its timeout, the client gone) before this probe
            got[key] = CommandOutput(rc=None, stderr=out.stderr, error=out.error or f"the job's container batch "
                                     f"ended (rc {out.rc}) before this probe finished", timed_out=out.timed_out)
    return got
