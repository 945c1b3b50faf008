"""How a probe is wrapped on the node: as whom it runs (root, a group that stands in for root,
`sudo -n` as the node's become user) and where (the host, or the job's container through its
runtime). Decided here, beside ProbeSpec, the form the driver (batch.py) applies: the one place
privilege and container wrapping are decided, from the probe, its check's policy and the node."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..checkapi import Probe
from ..checkhelpers import first_line
from ..container import RUNTIME_GROUP, START_SLACK_S, job_command, job_prefix
from ..model import CommandOutput
from ..node import Node
from .batch import ProbeSpec


@dataclass(frozen=True)
class Asks:
    """What a check's Policy says of its probes (privilege, privilege_group, where):
    they need root, a member of `group` needs none, they look into the job's container."""

    root: bool = False
    group: str = ""
    job: bool = False


def spec(probe: Probe, node: Node, asks: Asks | None, key: str = "") -> ProbeSpec:
    """The probe as the driver takes it. The Probe's own `root` and `job` win over the check's;
    a root probe runs under `sudo -n` as the node's become_user where the node has `become: sudo`.
    A job-side probe on a node with a container runs through the runtime, which needs root (docker:
    its group), under the probe's timeout inside and the runtime's start-up slack outside."""
    root = probe.root if probe.root is not None else (asks is not None and asks.root)
    job = probe.job if probe.job is not None else (asks is not None and asks.job)
    timeout = probe.timeout or node.probe_timeout
    c = node.container
    if job and c is not None:
        group = RUNTIME_GROUP[c.runtime] or ""
        return ProbeSpec(key, job_command(c, probe.cmd, timeout), timeout + START_SLACK_S, root=True, group=group,
                         become=_become(node, True), job=True, inner=probe.cmd, inner_timeout=timeout,
                         runtime=job_prefix(c))
    group = asks.group if (root and asks is not None) else ""
    return ProbeSpec(key, probe.cmd, timeout, root=root, group=group, become=_become(node, root))


def _become(node: Node, root: bool) -> str:
    return node.become_user if (root and node.become == "sudo") else ""


def merge(a: ProbeSpec, b: ProbeSpec) -> ProbeSpec:
    """One command asked for by several checks runs once: the longest timeout, root when any of
    them needs it, and a group exemption when one states it (it is a fact about the command)."""
    root = a.root or b.root
    timeout, group = max(a.timeout, b.timeout), (a.group or b.group) if root else ""
    become = (a.become or b.become) if root else ""
    if (timeout, root, group, become) == (a.timeout, a.root, a.group, a.become):
        return a  # the usual case (every hccn.* check asks the same npu-smi table): nothing to change
    return replace(a, timeout=timeout, root=root, group=group, become=become)


RUNTIME_ERROR_RC = 125  # docker and podman: the runtime itself failed (no such container, image absent)
# ...and what else the runtime (not the probe) says: podman exec into a stopped container exits 255
# ("Error: can only create exec sessions on running containers"); docker's daemon errors begin so,
# and its client without a daemon exits 1 with "Cannot connect to the Docker daemon at unix://...".
RUNTIME_ERROR_WORDS = ("Error: can only create exec sessions", "Error response from daemon:",
                       "Cannot connect to the Docker daemon")
RUNTIME_MISSING_RC = 127  # the node's shell: no such command (`sh: 1: docker: not found`)


def runtime_refused(out: CommandOutput, node: Node) -> CommandOutput:
    """A job-side probe the runtime could not start (exit 125): not the probe's answer, so it is
    marked not run, in the runtime's words, naming the container."""
    c = node.container
    if c is None or out.denied or out.rc is None or out.rc == 0:
        return out
    missing = out.rc == RUNTIME_MISSING_RC and f"{c.runtime}: " in out.stderr and "not found" in out.stderr
    if out.rc != RUNTIME_ERROR_RC and not out.stderr.startswith(RUNTIME_ERROR_WORDS) and not missing:
        return out
    why = f"{c.runtime} could not run the probe in {c.label} on {node.name}: {first_line(out.stderr, 240)}"
    return replace(out, error=why, denied=why)
