"""Benchmark of the ping meshes on the simulated cluster (netns mode, root).

    python3 bench/ping_mesh.py --nodes 128 [--pinger auto|ping] [--hccn]

Brings up N simulated nodes, builds net.ping_mesh's plan (all N*(N-1) pairs) and runs every node's
mesh command at once inside its namespace (no SSH: the figure is the mesh itself, which is what
all nodes share the machine's cores for), then prints wall time and CPU per pair. With --hccn it
times hccn.ping_mesh the same way (same-rail device pairs). The SSH fan-out cost is measured
separately (docs/PERFORMANCE.md).
"""
from __future__ import annotations

import argparse
import resource
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from preflight.checkapi import ClusterContext, CommandOutput
from preflight.node import Node


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _run_all(c, cmds: dict[str, str]) -> tuple[dict[str, CommandOutput], float, float]:
    def one(name: str) -> tuple[str, CommandOutput]:
        r = c.exec(name, cmds[name], timeout=600)  # inside the node's network and mount namespaces
        return name, CommandOutput(stdout=r.stdout, stderr=r.stderr, rc=r.returncode)

    cpu0, t0 = _cpu(), time.monotonic()
    with ThreadPoolExecutor(max_workers=len(cmds) or 1) as pool:
        outs = dict(pool.map(one, cmds))
    return outs, time.monotonic() - t0, _cpu() - cpu0


def main(argv: list[str] | None = None) -> int:
    from preflight.checks import env_comm, hccn_ping_mesh, net_ping_mesh
    from preflight.checks.hccn_ip import DeviceIp, Facts as IpFacts
    from preflight.sim import Cluster, netns

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--pinger", default="auto", choices=("auto", "ping"))
    ap.add_argument("--hccn", action="store_true")
    ap.add_argument("--subnet", help="host subnet (default: a free one in 198.18.0.0/16)")
    ap.add_argument("--device-subnet", help="device subnet (default: a free one in 198.19.0.0/16)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pf-bench-") as d:
        t = time.monotonic()
        net = ({"subnet": a.subnet, "device_subnet": a.device_subnet} if a.subnet and a.device_subnet
               else netns.free_test_subnets(a.nodes))
        c = Cluster.up({"nodes": a.nodes, "network": net}, dir=f"{d}/c", mode="netns")
        print(f"up: {a.nodes} nodes in {time.monotonic() - t:.1f} s")
        try:
            nodes = {n.name: Node(name=n.name, host=n.host) for n in c.nodes}
            facts = {n.name: {"env.comm": env_comm.Facts(env={"HCCL_IF_IP": n.host})} for n in c.nodes}
            ctx = ClusterContext(nodes=nodes, facts=facts, params={**net_ping_mesh.DEFAULTS, "pinger": a.pinger})
            cmds = {n: p[net_ping_mesh.PROBE].cmd for n, p in net_ping_mesh.plan(ctx).items()}
            outs, wall, cpu = _run_all(c, cmds)
            ctx.planned.update({n: {net_ping_mesh.PROBE: o} for n, o in outs.items()})
            res, _ = net_ping_mesh.results(ctx)
            pairs = a.nodes * (a.nodes - 1)
            top = net_ping_mesh.evaluate(ctx)[0]
            print(f"net.ping_mesh ({a.pinger}): {len(res)}/{pairs} pairs, {top.status.value} ({top.summary[:120]}), "
                  f"wall {wall:.2f} s, cpu {cpu:.2f} s, {cpu / max(1, pairs) * 1000:.3f} ms cpu/pair")
            if a.hccn:
                for n in c.nodes:
                    devs = {d["id"]: DeviceIp(d["ip"], d["netmask"]) for d in c.state(n.name)["devices"]}
                    facts[n.name]["hccn.ip"] = IpFacts(None, None, devs)
                hctx = ClusterContext(nodes=nodes, facts=facts, params=dict(hccn_ping_mesh.DEFAULTS))
                cmds = {n: p[hccn_ping_mesh.PROBE].cmd for n, p in hccn_ping_mesh.plan(hctx).items()}
                outs, wall, cpu = _run_all(c, cmds)
                hctx.planned.update({n: {hccn_ping_mesh.PROBE: o} for n, o in outs.items()})
                res, _ = hccn_ping_mesh.results(hctx)
                top = hccn_ping_mesh.evaluate(hctx)[0]
                print(f"hccn.ping_mesh: {len(res)} device pairs, {top.status.value} ({top.summary[:120]}), "
                      f"wall {wall:.2f} s, cpu {cpu:.2f} s")
        finally:
            c.down(purge=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
