#!/usr/bin/env python3
"""Time and memory of the simulated cluster: bring-up and tear-down of N nodes, and the cost of
one simulated tool call. Usage: PYTHONPATH=. python bench/sim_updown.py [--mode netns] [8 32 128]

Why: the test bed shares the machine's cores with the tool being measured, so its own costs
(sshd memory, CPU per simulated probe) must be known and small.
"""
from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from preflight.sim import Cluster  # noqa: E402


def tool_cost(c: Cluster, node: str, cmd: str, calls: int = 200) -> float:
    """CPU ms per call (user+sys of the shell and its children), measured inside the node."""
    script = (f"i=0; while [ $i -lt {calls} ]; do {cmd} >/dev/null 2>&1; i=$((i+1)); done; "
              "times")
    out = c.exec(node, script, timeout=120).stdout.split()
    # `times` prints: shell user/sys, children user/sys, as NmN.NNNs
    secs = 0.0
    for tok in out:
        m, s = tok.rstrip("s").split("m")
        secs += int(m) * 60 + float(s)
    return secs / calls * 1000


def one(n: int, mode: str, keep_keys_dir: Path) -> dict:
    spec: dict = {"nodes": n}  # netns mode picks free test subnets sized for n
    d = keep_keys_dir / f"n{n}"
    t0 = time.monotonic()
    c = Cluster.up(spec, dir=d, mode=mode)
    t_up = time.monotonic() - t0
    sshds = [psutil.Process(p) for p in c.pids()]
    rss = sum(p.memory_info().rss for p in sshds)
    uss = sum(p.memory_full_info().uss for p in sshds)
    costs = {
        "npu-smi info": tool_cost(c, "node01" if n < 100 else c.nodes[0].name, "npu-smi info"),
        "hccn_tool -link": tool_cost(c, c.nodes[0].name, f"{c.nodes[0].ascend_home}/driver/tools/hccn_tool -i 0 -link -g"),
    }
    t0 = time.monotonic()
    c.down(purge=True)
    t_down = time.monotonic() - t0
    return {"nodes": n, "up_s": t_up, "down_s": t_down, "sshd_rss_mb": rss / 2**20, "sshd_uss_mb": uss / 2**20,
            "uss_per_sshd_mb": uss / 2**20 / len(sshds), "tool_ms": costs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sizes", nargs="*", type=int, default=[8, 32, 128])
    ap.add_argument("--mode", default="auto", choices=["netns", "loopback", "auto"])
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pfsim-bench-"))
    print(f"{'nodes':>5} {'up s':>6} {'down s':>6} {'sshd RSS MB':>11} {'sshd USS MB':>11} {'USS/sshd':>8} "
          f"{'npu-smi ms':>10} {'hccn ms':>8}")
    for n in args.sizes:
        r = one(n, args.mode, root)
        print(f"{r['nodes']:>5} {r['up_s']:>6.2f} {r['down_s']:>6.2f} {r['sshd_rss_mb']:>11.1f} {r['sshd_uss_mb']:>11.1f} "
              f"{r['uss_per_sshd_mb']:>8.2f} {r['tool_ms']['npu-smi info']:>10.2f} {r['tool_ms']['hccn_tool -link']:>8.2f}",
              flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"bring-up process peak RSS: {peak:.0f} MB")
    root.rmdir()


if __name__ == "__main__":
    main()
