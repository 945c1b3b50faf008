#!/usr/bin/env python3
"""What a job-side probe costs (issue 13): the same checks judged on the host and in the job's
container, on a simulated cluster with real podman (preflight.sim.podman).

For each mode, the median of `--repeat` interleaved runs of `preflight run --checks CHECKS` (in-process,
one Runner): wall time, the client's CPU (user+sys of this process, time.process_time), and the
runtime calls each node saw per run (podman's own events: exec sessions, containers created).
`exec` is a named running container, `run` a fresh `run --rm` of the image. Each comes twice:
batched (what preflight does: one runtime call per node and round carrying all its job-side
probes, preflight.transport.jobbatch) and `/probe` (one runtime call per probe, as before the
batching; the bench turns the batching off for those runs). Interleaved, because a shared
machine's load drifts. Usage: sudo python3 bench/container_cost.py --nodes 2 --repeat 5
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import yaml

from preflight.inventory import load
from preflight.runner import Options, Runner
from preflight.sim import podman
from preflight.sim.cluster import Cluster
from preflight.transport import jobbatch
from preflight.transport.hostkeys import KnownHosts
from preflight.transport.ssh import SSHTransport

CHECKS = ["cann.env", "storage.data"]  # 5 job-side probes a node; no torch import (the host's real torch dwarfs the rest)


@contextmanager
def per_probe(on: bool):
    """With `on`: every job-side probe its own runtime call (the batching turned off)."""
    split = jobbatch.split
    if on:
        jobbatch.split = lambda probes, cap=jobbatch.DEFAULT_CAP: (list(probes), [])
    try:
        yield
    finally:
        jobbatch.split = split


def once(inv: str, unbatched: bool, jobs: podman.JobImages, nodes: int) -> tuple[float, float, float]:
    KnownHosts.forget_all()
    since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")
    with per_probe(unbatched):
        t0, c0 = time.monotonic(), time.process_time()
        Runner(load(inv), SSHTransport(), Options(checks=CHECKS)).run()
        wall, cpu = time.monotonic() - t0, time.process_time() - c0
    calls = len(jobs.events("exec", since)) + len(jobs.events("create", since))
    return wall, cpu, calls / nodes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
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
        modes = {"host": (invs["host"], False), "exec/probe": (invs["exec"], True), "exec": (invs["exec"], False),
                 "run/probe": (invs["run"], True), "run": (invs["run"], False)}
        print(f"{a.nodes} nodes, checks {','.join(CHECKS)}, median of {a.repeat}, load average "
              f"{os.getloadavg()[0]:.0f} on {os.cpu_count()} CPUs at the start")
        runs: dict[str, list[tuple[float, float, float]]] = {m: [] for m in modes}
        for _ in range(a.repeat):
            for mode, (inv, unbatched) in modes.items():
                runs[mode].append(once(inv, unbatched, jobs, a.nodes))
        base = None
        for mode in modes:
            wall, cpu, calls = (statistics.median(r[i] for r in runs[mode]) for i in range(3))
            base = base or (wall, cpu)
            print(f"{mode:10s} wall {wall:6.2f} s  client CPU {cpu:5.2f} s  runtime calls/node {calls:4.1f}  "
                  f"(+{wall - base[0]:.2f} s wall, +{cpu - base[1]:.2f} s CPU vs host)")
        print(f"load average {os.getloadavg()[0]:.0f} at the end")
    finally:
        jobs.close()
        c.down(purge=True)


if __name__ == "__main__":
    main()
