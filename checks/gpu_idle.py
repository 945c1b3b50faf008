"""gpu.idle: no compute process holds a GPU, and no GPU memory is held by a process not listed.

What it checks: the process table of `nvidia-smi` lists no process (any row fails, naming GPU,
PID, type, name and memory; inside a container processes of other containers are not listed);
a GPU whose memory in use is above `max_memory_used_pct` (5%) of its total while no process is
listed on it warns: memory held from another container, or a process that exited uncleanly.

Why it matters: a leftover rank keeps its GPU memory and its NCCL communicators; the new job's
rank on that GPU runs out of memory (`CUDA error: out of memory`) or hangs at init.

How to fix: stop the process (`kill <pid>`; `nvidia-smi --query-compute-apps=pid,used_memory
--format=csv` lists them; `docker ps` / `kubectl get pods` for a container's); when no process is
listed but memory is in use, find the holder with `fuser -v /dev/nvidia*` or reset the GPU
(`nvidia-smi -r -i N`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from preflight.checkapi import Policy, Probe, cmd, CommandOutput, Finding, Metric, Status, passed, skipped
from preflight.checkhelpers import graded
from preflight.nvidia import nvidia_smi, probes as nv

ID = "gpu.idle"
SCOPE = "node"
POLICY = Policy(
    backend="nvidia",
    gate=True,
    on_busy="report",  # its process table decides whether a node is busy (busy() below)
)
# What to do with a fail/warn (preflight/actions.py).
ACTIONS = {
    "processes": ("restart_process", "a leftover job on the GPUs: stop it"),
    "memory_held": ("reset_device", "GPU memory held with no process: a dead context, reset the GPU"),
    "": ("monitor", "nvidia-smi gave no table: see gpu.health"),
}
DEFAULTS = {"max_memory_used_pct": 5.0}


@dataclass(frozen=True)
class Facts:
    unavailable: str | None  # why there is no table (gpu.health reports it)
    table: nvidia_smi.Table | None = None


def probes(node, params) -> dict[str, Probe]:
    return {nv.SMI_PROBE: cmd(nv.NVIDIA_SMI)}


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    out = outputs.get(nv.SMI_PROBE)
    if out is None or not out.ok:
        why = "timed out" if out is not None and out.timed_out else f"exit code {out.rc if out else None}"
        return Facts(f"nvidia-smi gave no table ({why}); see gpu.health")
    return Facts(None, nvidia_smi.parse_table(out.stdout))


def busy(facts: Facts) -> int:
    """How many processes of a job run here (0: idle): the table was read and lists them."""
    return len(facts.table.processes) if isinstance(facts, Facts) and facts.table is not None else 0


def evaluate(facts: Facts, params, node) -> list[Finding]:
    if facts.unavailable or facts.table is None:
        return [skipped(facts.unavailable or "no table")]
    t = facts.table
    metrics = [Metric("gpu_memory_used", g.memory_used_mib or 0, "MB", {"device": str(g.index)}).to_dict() for g in t.gpus]
    if t.processes:
        rows = [{"device": p.gpu, "pid": p.pid, "type": p.type, "name": p.name, "memory_mib": p.memory_mib}
                for p in t.processes]
        text = "; ".join(f"GPU {r['device']}: pid {r['pid']} {r['name']} ({r['type']}) {r['memory_mib']} MiB" for r in rows)
        pids = " ".join(sorted({str(r["pid"]) for r in rows}))
        return [Finding(Status.FAIL, f"{len(rows)} process(es) on GPUs, expected none: {text}", {
            "failed_devices": sorted({r["device"] for r in rows}), "processes": rows, "devices": rows, "metrics": metrics,
        }, remediation=f"Stop the leftover job: `kill {pids}` (inside a container find it with `docker ps` / "
                       f"`kubectl get pods -o wide`), then re-run preflight", action=graded(ACTIONS, "processes"))]
    limit = params["max_memory_used_pct"]
    held = [(g, 100.0 * g.memory_used_mib / g.memory_total_mib) for g in t.gpus
            if g.memory_used_mib is not None and g.memory_total_mib]
    held = [(g, pct) for g, pct in held if pct > limit]
    if held:
        return [Finding(Status.WARN, "; ".join(
            f"GPU {g.index} memory {pct:.0f}% in use with no process listed, expected at most {limit:g}%" for g, pct in held), {
            "failed_devices": [g.index for g, _ in held], "metrics": metrics,
            "devices": [{"device": g.index, "bus_id": g.bus_id, "memory_used_mib": g.memory_used_mib,
                         "memory_total_mib": g.memory_total_mib} for g, _ in held],
        }, remediation="Find the holder (`fuser -v /dev/nvidia*`, `docker ps`) and stop it, or reset the GPU "
                       "(`nvidia-smi -r -i <index>`)", action=graded(ACTIONS, "memory_held"))]
    return [passed(f"{len(t.gpus)} GPUs idle: no process, memory use at most {limit:g}%", metrics=metrics)]
