"""gpu.topology: the node's GPUs are NVLink-connected the way the node is built, with no link down.

What it checks: `nvidia-smi topo -m` (the GPU-to-GPU matrix) and `nvidia-smi nvlink -s` (each
GPU's links), with the NVSwitch fabric state of `nvidia-smi -q` telling an NVSwitch system
(HGX/DGX: a Fabric State other than N/A) from a direct-NVLink or PCIe-only one.
On an NVSwitch system every GPU pair must be NV# at the width most pairs have (NV18 on H100): a
pair that is SYS/NODE/PHB/PXB/PIX or narrower fails, naming the GPU it comes from, and so does a
GPU with fewer active links in `nvlink -s` than the others (`Link 3: <inactive>`). Without
NVSwitch the design may be partial (a bridged pair, a DGX-1 cube mesh), so the check compares GPUs
with each other: a GPU with fewer NVLink peers, fewer bonded links or fewer active links than the
node's best warns. A node with no NVLink at all (PCIe only) is skipped: nothing to judge.
A node where every NVLink is down looks PCIe-only here unless it has NVSwitch (gpu.health's fabric
state covers that case too).

Why it matters: NCCL builds its intra-node rings and trees over NVLink; a GPU whose links are down
drags every collective of the node onto PCIe (an all-reduce several times slower) or, on NVSwitch
systems, makes CUDA peer access fail at init (`peer access is not supported between these two
devices`, NCCL `unhandled cuda error`).

How to fix: `nvidia-smi nvlink -s -i N` and `nvidia-smi nvlink -e -i N` (error counters) for the
GPU named; on NVSwitch systems check nvidia-fabricmanager (`systemctl status
nvidia-fabricmanager`); reset the GPU (`nvidia-smi -r -i N`) or reboot the node; links that stay
inactive need a hardware ticket (on PCIe cards, reseat the NVLink bridge).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping

from preflight.checkapi import Policy, Finding, Metric, ParseError, Probe, CommandOutput, Status, cmd, passed, sh, skipped
from preflight.checkhelpers import graded, first_line
from preflight.nvidia import probes as nv, smi_xml, topology

ID = "gpu.topology"
SCOPE = "node"
POLICY = Policy(backend="nvidia", gate=True)
ACTIONS = {
    "nvswitch": ("reset_device", "NVLink down on an NVSwitch system: reset the GPU or reboot, then a hardware ticket (NVIDIA Fabric Manager guide)"),
    "inactive": ("reset_device", "inactive NVLink links: reset the GPU, reseat the bridge, then a hardware ticket"),
    "": ("monitor", "an NVLink asymmetry on a node without NVSwitch: may be by design (a bridged pair)"),
}
DEFAULTS: dict = {}
TOPO_PROBE, NVLINK_PROBE = "nvidia_smi_topo", "nvidia_smi_nvlink"
TOPO = sh("LC_ALL=C nvidia-smi topo -m")
NVLINK = sh("LC_ALL=C nvidia-smi nvlink -s")
REMEDY = ("Check the GPU's links: `nvidia-smi nvlink -s -i N`, `nvidia-smi nvlink -e -i N` (error counters); on "
          "NVSwitch systems `systemctl status nvidia-fabricmanager`; reset the GPU (`nvidia-smi -r -i N`) or reboot "
          "the node; links that stay inactive need a hardware ticket (on PCIe cards reseat the NVLink bridge)")


@dataclass(frozen=True)
class Facts:
    unavailable: str | None                 # why there is no matrix (gpu.health reports nvidia-smi itself)
    topo: topology.Topology | None = None
    nvlink: dict[int, topology.NvlinkGpu] = field(default_factory=dict)
    nvswitch: bool = False                   # a GPU's Fabric State is not N/A


def probes(node, params) -> dict[str, Probe]:
    return {TOPO_PROBE: cmd(TOPO), NVLINK_PROBE: cmd(NVLINK), nv.QUERY_PROBE: cmd(nv.NVIDIA_SMI_Q)}


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    out = outputs.get(TOPO_PROBE)
    if out is None or not out.ok:
        if out is None:
            why = "did not run"
        elif out.timed_out:
            why = "timed out"
        else:
            why = first_line(out.stdout) or first_line(out.stderr) or f"exit code {out.rc}"
        return Facts(f"nvidia-smi topo -m gave no matrix ({why}); see gpu.health")
    topo = topology.parse_topo(out.stdout)
    links = outputs.get(NVLINK_PROBE)
    # nvlink -s is an aid: on GPUs without NVLink it may print nothing or fail; the matrix decides then
    try:
        nvlink = topology.parse_nvlink(links.stdout) if links is not None and links.ok else {}
    except ParseError:
        nvlink = {}  # e.g. only NVML's "Unable to retrieve NVLink information" line: the matrix decides
    q = outputs.get(nv.QUERY_PROBE)
    nvswitch = False
    if q is not None and q.ok:
        try:
            report = smi_xml.read_query(q.stdout)
        except ParseError:
            report = None  # gpu.health reports an unreadable -q
        nvswitch = bool(report) and any(g.fabric[0] not in (None, "N/A") for g in report.gpus)
    return Facts(None, topo, nvlink, nvswitch)


def _cover(bad: list[tuple[int, int]]) -> dict[int, list[int]]:
    """Blame each bad pair on the GPU it most likely comes from: repeatedly the GPU in most
    remaining pairs (one GPU whose links are all down is named once, not with each peer); a pair
    that shares no GPU with another names both of its GPUs."""
    left, out = list(bad), {}
    while left:
        g, count = Counter(x for p in left for x in p).most_common(1)[0]
        if count == 1:  # pairs with no GPU in common: nothing tells which end it is, name both
            for a, b in left:
                out.setdefault(a, []).append(b)
                out.setdefault(b, []).append(a)
            break
        out[g] = sorted(b if a == g else a for a, b in left if g in (a, b))
        left = [p for p in left if g not in p]
    return out


def _nvswitch_problems(t: topology.Topology) -> list[tuple[int, str]]:
    widths = Counter(t.nvlinks(i, j) for i in range(t.gpus) for j in range(i + 1, t.gpus))
    want = max((w for w in widths if w), key=lambda w: (widths[w], w), default=0)
    bad = [(i, j) for i in range(t.gpus) for j in range(i + 1, t.gpus) if t.nvlinks(i, j) < want]
    expect = f"NV{want}" if want else "NVLink"
    return [(g, f"GPU {g}: " + ", ".join(f"GPU {h} {t.cells[(g, h)]}" for h in peers)
             + f" (NVSwitch system: expected {expect} between every GPU pair)") for g, peers in sorted(_cover(bad).items())]


def _direct_problems(t: topology.Topology) -> list[tuple[int, str]]:
    peers = {g: [h for h in range(t.gpus) if h != g and t.nvlinks(g, h)] for g in range(t.gpus)}
    lanes = {g: sum(t.nvlinks(g, h) for h in peers[g]) for g in range(t.gpus)}
    best_peers, best_lanes = max(len(p) for p in peers.values()), max(lanes.values())
    out = []
    for g in range(t.gpus):
        if len(peers[g]) < best_peers:
            others = ", ".join(f"GPU {h} {t.cells[(g, h)]}" for h in range(t.gpus) if h != g and not t.nvlinks(g, h))
            out.append((g, f"GPU {g}: NVLink to {len(peers[g])} GPU(s), the node's best is {best_peers} ({others})"))
        elif lanes[g] < best_lanes:
            out.append((g, f"GPU {g}: {lanes[g]} bonded NVLinks to its peers, the node's best is {best_lanes}"))
    return out


def _link_problems(links: dict[int, topology.NvlinkGpu], nvswitch: bool) -> list[tuple[int, str]]:
    if not links:
        return []
    best = max(g.active_count for g in links.values())
    out = []
    for i, g in sorted(links.items()):
        if g.active_count >= best:
            continue
        where = " (NVSwitch system)" if nvswitch else ""
        if g.all_inactive or not g.active:
            out.append((i, f"GPU {i}: all NVLink links inactive, the node's other GPUs have {best} active{where}"))
        else:
            down = ", ".join(str(k) for k in g.inactive) or "?"
            out.append((i, f"GPU {i}: NVLink link(s) {down} inactive ({g.active_count} active, the node's best is {best}){where}"))
    return out


def evaluate(facts: Facts, params, node) -> list[Finding]:
    if facts.unavailable or facts.topo is None:
        return [skipped(facts.unavailable or "no matrix")]
    t = facts.topo
    if t.gpus < 2:
        return [skipped(f"{t.gpus} GPU on this node: no GPU pair to judge")]
    any_nv = any(t.nvlinks(i, j) for i in range(t.gpus) for j in range(t.gpus) if i != j)
    any_active = any(g.active for g in facts.nvlink.values())
    if not any_nv and not any_active and not facts.nvswitch:
        kinds = "/".join(sorted(set(t.cells.values())))
        return [skipped(f"no NVLink between the node's {t.gpus} GPUs (PCIe only: {kinds}); nothing to judge")]
    status = Status.FAIL if facts.nvswitch else Status.WARN
    problems = _nvswitch_problems(t) if facts.nvswitch else _direct_problems(t)
    inactive = _link_problems(facts.nvlink, facts.nvswitch)
    problems += inactive
    action = graded(ACTIONS, "nvswitch" if facts.nvswitch else None, "inactive" if inactive else None)
    metrics = [Metric("nvlink_active", g.active_count, "", {"device": str(i)}).to_dict() for i, g in sorted(facts.nvlink.items())]
    widths = sorted({t.nvlinks(i, j) for i in range(t.gpus) for j in range(t.gpus) if i != j})
    design = "NVSwitch" if facts.nvswitch else "direct NVLink"
    if not problems:
        return [passed(f"{t.gpus} GPUs NVLink-connected as designed ({design}: "
                       + ", ".join(f"NV{w}" if w else "no NVLink" for w in widths) + " between pairs"
                       + (f"; {max(g.active_count for g in facts.nvlink.values())} active links per GPU" if facts.nvlink else "")
                       + ")", metrics=metrics)]
    devices = sorted({g for g, _ in problems})
    rows = [{"device": g, "problem": text} for g, text in problems]
    return [Finding(status, "; ".join(text for _, text in problems), {
        "failed_devices": devices, "devices": rows, "nvswitch": facts.nvswitch, "metrics": metrics,
    }, remediation=REMEDY.replace("-i N", f"-i {devices[0]}", 2) if len(devices) == 1 else REMEDY, action=action)]
