#!/usr/bin/env python3
"""What a job-side probe costs (issue 13): the same checks judged on the host and in the job's
container, on a simulated cluster with real podman (preflight.sim.podman).

For each mode, the median of `--repeat` interleaved runs of `preflight run --checks CHECKS` (in-process, one
Runner): wall time, and the client's CPU (user+sys of this process, time.process_time), plus the
number of job-side probes sent per node. `exec` is a named running container; `run` a fresh
`run --rm` of the image per probe. Usage: sudo python3 bench/container_cost.py --nodes 2 --repeat 3
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from preflight.inventory import load
from preflight.runner import Options, Runner
from preflight.sim import podman
from preflight.sim.cluster import Cluster
from preflight.transport.hostkeys import KnownHosts
from preflight.transport.ssh import SSHTransport

CHECKS = ["cann.env", "storage.data"]  # no torch import on the host (its real torch dwarfs the rest)


def once(inv: str) -> tuple[float, float]:
    KnownHosts.forget_all()
    t0, c0 = time.monotonic(), time.process_time()
    Runner(load(inv), SSHTransport(), Options(checks=CHECKS)).run()
    return time.monotonic() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    ok, why = podman.available()
    if not ok:
        raise SystemExit(f"podman cannot run here: {why}")
    d = Path(tempfile.mkdtemp(prefix="pfbench-ctr-"))
    c = Cluster.up({"nodes": a.nodes}, dir=d / "c", mode="netns")
    jobs = podman.JobImages(c)
    try:
        jobs.configure()
        doc = yaml.safe_load(c.inventory_path.read_text())
        invs = {"host": str(c.inventory_path)}
        for mode in ("exec", "run"):
            for e in doc["nodes"]:
                tag = f"pfbench-job:{e['name']}"
                if mode == "exec":
                    jobs.build(e["name"], tag, torch="2.1.0")
                    jobs.start(e["name"], f"pfbench-{e['name']}", tag, jobs.run_args(e["name"]))
                    e["container"] = {"runtime": "podman", "name": f"pfbench-{e['name']}"}
                else:
                    e["container"] = {"runtime": "podman", "image": tag, "run_args": jobs.run_args(e["name"])}
            p = d / f"{mode}.yaml"
            p.write_text(yaml.safe_dump(doc))
            invs[mode] = str(p)
        print(f"{a.nodes} nodes, checks {','.join(CHECKS)}, median of {a.repeat}")
        runs: dict[str, list[tuple[float, float]]] = {m: [] for m in invs}
        for _ in range(a.repeat):  # interleaved: a shared machine's load drifts
            for mode, inv in invs.items():
                runs[mode].append(once(inv))
        base = None
        for mode in invs:
            wall = statistics.median(r[0] for r in runs[mode])
            cpu = statistics.median(r[1] for r in runs[mode])
            base = base or (wall, cpu)
            print(f"{mode:5s} wall {wall:6.2f} s  client CPU {cpu:5.2f} s  "
                  f"(+{wall - base[0]:.2f} s wall, +{cpu - base[1]:.2f} s CPU vs host)")
    finally:
        jobs.close()
        c.down(purge=True)


if __name__ == "__main__":
    main()
