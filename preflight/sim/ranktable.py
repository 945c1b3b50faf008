"""The rank table a simulated cluster's job would be launched from, built from its state.

What MindSpore's hccl_tools.py writes on a real cluster (docs/FORMATS.md §8.1): each node a server
(`server_id` its address), each device with the IP hccn_tool reports and consecutive rank ids;
`superpod=True` writes version 1.2 with each chip's SDID as its `super_device_id` and the nodes
grouped by their physical SuperPoD, as npu-smi spod-info reports them. Tests re-address a device
or move a node afterwards (`Cluster.set_state`) to make the table stale.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import render_npusmi


def rank_table(cluster: Any, superpod: bool = False) -> dict[str, Any]:
    servers, pods, rank = [], {}, 0
    for n in cluster.nodes:
        st = cluster.state(n.name)
        by_logic = {c["logic"]: (npu["id"], c["chip"]) for npu in st["npus"] for c in npu["chips"]}
        sp = st["super_pod"]
        devices = []
        for d in st["devices"]:
            entry = {"device_id": str(d["id"]), "device_ip": d["ip"], "rank_id": str(rank)}
            if superpod:
                npu, chip = by_logic[d["id"]]
                entry["super_device_id"] = str(render_npusmi.sdid(sp["server_index"], npu, chip))
            devices.append(entry)
            rank += 1
        servers.append({"server_id": n.host, "device": devices, "host_nic_ip": "reserve"})
        pods.setdefault(str(sp["id"]), []).append({"server_id": n.host})
    table: dict[str, Any] = {"version": "1.2" if superpod else "1.0", "server_count": str(len(servers)),
                             "server_list": servers, "status": "completed"}
    if superpod:
        table["super_pod_list"] = [{"super_pod_id": pid, "server_list": s} for pid, s in sorted(pods.items())]
    return table


def write(cluster: Any, path: str | Path, superpod: bool = False) -> Path:
    """Write the table as JSON (hccl_tools' indent of 4) and return its path."""
    p = Path(path)
    p.write_text(json.dumps(rank_table(cluster, superpod), indent=4))
    return p
