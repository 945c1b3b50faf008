"""Benchmark of smoke.allreduce `mode: all`: isolate one faulty node among N simulated nodes.

    python3 bench/isolation.py --nodes 16 32 [--fault throttle|wrong_sum|none] [--repeat 1]

Brings up N simulated nodes (netns mode, root; sshd per node, gloo ranks with this machine's
python and CPU torch), puts the fault on one node (a tc tbf throttle of its link to `--rate`, or a
test-only hook that makes its all_reduce contribution wrong; a different node each repeat), runs
the real runner over SSH with only smoke.allreduce, and prints per run: the culprits named, the
rounds, the wall time, and the client's CPU (this process: the runner, paramiko, the evaluation).
The ranks' own CPU (N python + torch imports per round, all on this machine's cores) is what
dominates the wall time here; on a real cluster each node pays its own.
"""
from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import yaml


def _cpu_self() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def run_once(c, fault: str, victim: str, rate: str, params: dict) -> dict:
    from preflight.inventory import load
    from preflight.runner import Options, Runner
    from preflight.transport.hostkeys import KnownHosts
    from preflight.transport.ssh import SSHTransport

    if fault == "throttle":
        c.inject(victim, "link_throttle", rate=rate)
    elif fault == "wrong_sum":
        c.inject(victim, "collective_wrong_sum")
    try:
        doc = yaml.safe_load(Path(c.inventory_path).read_text())
        doc["defaults"]["python"] = sys.executable
        doc.setdefault("checks", {})["smoke.allreduce"] = params
        path = Path(c.dir) / "bench-inv.yaml"
        path.write_text(yaml.safe_dump(doc))
        KnownHosts.forget_all()
        cpu0, t0 = _cpu_self(), time.monotonic()
        report = Runner(load(str(path)), SSHTransport(), Options(checks=["smoke.allreduce"])).run()
        wall, cpu = time.monotonic() - t0, _cpu_self() - cpu0
    finally:
        if fault != "none":
            c.reset(victim)
    head = next(r for r in report.results if r.check == "smoke.allreduce" and r.node is None)
    named = [r.node for r in report.results if r.check == "smoke.allreduce" and r.node]
    return {"status": head.status.value, "named": named, "rounds": head.details.get("rounds"), "wall_s": wall,
            "client_cpu_s": cpu, "summary": head.summary}


def main(argv: list[str] | None = None) -> int:
    from preflight.sim import Cluster
    from preflight.smoke import isolate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--fault", choices=("throttle", "wrong_sum", "none"), default="throttle")
    ap.add_argument("--rate", default="50mbit")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--size-mib", type=int, default=1)
    a = ap.parse_args(argv)
    params = {"mode": "all", "size_mib": a.size_mib, "iters": 3, "warmup": 1, "rendezvous_timeout_s": 90,
              "run_timeout_s": 120, "startup_s": 120}
    print("nodes fault      victim  named            rounds bound wall_s client_cpu_s")
    for n in a.nodes:
        with tempfile.TemporaryDirectory(prefix="pf-bench-iso-") as d:
            t = time.monotonic()
            c = Cluster.up({"nodes": n}, dir=f"{d}/c", mode="netns")
            print(f"# up: {n} nodes in {time.monotonic() - t:.1f} s", flush=True)
            try:
                for i in range(a.repeat):
                    victim = c.nodes[(7 * i + n // 3) % n].name
                    r = run_once(c, a.fault, victim, a.rate, params)
                    ok = (r["named"] == [victim]) if a.fault != "none" else not r["named"]
                    print(f"{n:5d} {a.fault:10s} {victim if a.fault != 'none' else '-':7s} "
                          f"{','.join(r['named']) or '-':16s} {r['rounds']!s:6s} {isolate.round_bound(n):5d} "
                          f"{r['wall_s']:6.1f} {r['client_cpu_s']:12.2f} {'ok' if ok else 'WRONG: ' + r['summary'][:200]}",
                          flush=True)
            finally:
                c.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
