"""The simulated NVIDIA node's tools: the default table is byte-identical to the real 535 capture
when given that node's values; -q, ibstat, ibstatus and dmesg read back through preflight's own
parsers to the state they were rendered from; faults change exactly what they name."""
from __future__ import annotations

import pytest

from preflight.nvidia import ibstat, nvidia_smi, topology, xid
from preflight.sim import faults, render_nvidia
from preflight.sim.spec import NodeSpec, SimSpecError, parse_spec
from preflight.sim.state import build_state
from tests.support import fixture_body


def gpu_state(gpus: int = 8) -> dict:
    return build_state(NodeSpec(name="gpu01", index=2, backend="nvidia", gpus=gpus), "198.18.0.3", [],
                       "255.255.0.0", "eth0", "hccn0")


def test_table_is_the_real_535_capture_for_that_nodes_values():
    want = fixture_body("nvidia-smi__P100_4gpu_python3_processes__readme-capture.txt")
    values = [("1A", 51, 56, 3032, 47, 3030), ("1C", 49, 214, 3906, 82, 3904), ("1D", 44, 52, 3906, 0, 3904),
              ("1E", 54, 55, 4564, 0, 4562)]
    st = {"nvidia_driver": "535.129.03", "cuda_version": "12.2", "gpus": [
        {"present": True, "name": "Tesla P100-SXM2-16GB", "persistence": False, "bus": f"00000000:{b}:00.0",
         "ecc_volatile": 0, "temp": t, "power": p, "power_cap": 300, "mem_used": mu, "mem_total": 16384,
         "util": u, "mig": "N/A", "processes": [{"pid": 280080, "name": "python3", "mem": pm}]}
        for b, t, p, mu, u, pm in values]}
    assert render_nvidia.render_table(st) == want


def test_healthy_node_reads_back_healthy():
    st = gpu_state()
    q = nvidia_smi.parse_query(render_nvidia.render_query(st))
    assert q.attached == 8 and [g.bus_id for g in q.gpus] == [g["bus"] for g in st["gpus"]]
    for g in q.gpus:
        assert g.uncorrectable("Volatile") == 0 and not g.flag("remap_pending") and not g.clock_reasons["HW Slowdown"]
        assert g.pcie()["width_current"] == 16 and g.fabric == ("Completed", "Success")
    t = nvidia_smi.parse_table(render_nvidia.render_table(st))
    assert len(t.gpus) == 8 and t.processes == () and t.driver_version == "535.183.01"
    ports = ibstat.parse_ibstat(render_nvidia.render_ibstat(st))
    ib = [p for p in ports if p.link_layer == "InfiniBand"]
    assert len(ib) == 8 and all(p.up and p.rate == 400 for p in ib)
    assert [(p.name, p.up, p.rate, p.link_layer) for p in ports if p not in ib] == [("mlx5_8:1", True, 10, "Ethernet")]
    assert ibstat.parse_ibstatus(render_nvidia.render_ibstatus(st)) == ib  # no ibstatus sample of a RoCE port
    topo = topology.parse_topo(render_nvidia.render_topo(st))
    assert topo.gpus == 8 and set(topo.cells.values()) == {"NV18"}
    links = topology.parse_nvlink(render_nvidia.render_nvlink(st))
    assert sorted(links) == list(range(8)) and all(g.active_count == 18 and not g.inactive for g in links.values())
    assert render_nvidia.render_dmesg(st) == ""


@pytest.mark.parametrize("fault,params,check", [
    ("gpu_ecc", {"device": 3, "count": 2}, lambda q, t, p: q.gpus[3].uncorrectable("Volatile") == 2),
    ("gpu_remap_pending", {"device": 1}, lambda q, t, p: q.gpus[1].flag("remap_pending")),
    ("gpu_hw_slowdown", {"device": 0}, lambda q, t, p: q.gpus[0].clock_reasons["HW Slowdown"]),
    ("gpu_pcie_degraded", {"device": 6}, lambda q, t, p: q.gpus[6].pcie()["width_current"] == 8),
    ("gpu_missing", {"device": 7}, lambda q, t, p: q.attached == 7 and len(t.gpus) == 7),
    ("gpu_process", {"device": 2, "pid": 4242}, lambda q, t, p: [(x.gpu, x.pid) for x in t.processes] == [(2, 4242)]),
    ("ib_port_down", {"ca": "mlx5_4"}, lambda q, t, p: [x.name for x in p if not x.up] == ["mlx5_4:1"]),
])
def test_each_fault_changes_what_it_names(fault, params, check):
    st = gpu_state()
    faults.apply_fault(st, fault, params)
    q = nvidia_smi.parse_query(render_nvidia.render_query(st))
    t = nvidia_smi.parse_table(render_nvidia.render_table(st))
    p = ibstat.parse_ibstat(render_nvidia.render_ibstat(st))
    assert check(q, t, p)
    healthy = [g for g in q.gpus if g.index not in (params.get("device"),)]
    assert all(g.uncorrectable("Volatile") == 0 and not g.flag("remap_pending") for g in healthy)


def test_xid_fault_logs_the_real_line_for_that_gpus_bus():
    st = gpu_state()
    faults.apply_fault(st, "gpu_xid", {"device": 5, "xid": 79})
    [ev] = xid.parse_kernel_log(render_nvidia.render_dmesg(st))
    assert (ev.xid, ev.pci) == (79, xid.bus_key(st["gpus"][5]["bus"]))
    assert ev.text == "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def test_gpu_faults_refuse_an_ascend_node_and_specs_are_validated():
    asc = build_state(NodeSpec(name="n", index=1), "198.18.0.2", [], "255.255.0.0", "eth0", "hccn0")
    with pytest.raises(ValueError, match="needs an NVIDIA node"):
        faults.apply_fault(asc, "gpu_ecc", {"device": 0})
    with pytest.raises(SimSpecError, match="unknown backend"):
        parse_spec({"nodes": [{"name": "g", "backend": "cuda"}]})
    with pytest.raises(SimSpecError, match="gpus: must be an integer"):
        parse_spec({"nodes": [{"name": "g", "backend": "nvidia", "gpus": 0}]})
    sp = parse_spec({"nodes": [{"name": "g", "backend": "nvidia", "gpus": 4}]})
    assert sp.nodes[0].backend == "nvidia" and sp.nodes[0].gpus == 4


def test_csv_values_are_one_line_per_gpu():
    st = gpu_state(2)
    csv = render_nvidia.render_csv(st)
    fields = ["index", "name", "pci.bus_id"]
    text = "".join(", ".join(csv[f].splitlines()[i] for f in fields) + "\n" for i in range(2))
    rows = nvidia_smi.parse_csv(text, fields)
    assert rows[1] == {"index": "1", "name": "NVIDIA H100 80GB HBM3", "pci.bus_id": "00000000:64:00.0"}


def test_topo_and_nvlink_have_the_real_tabbed_layout_and_follow_the_nvlink_fault():
    st = gpu_state()
    text = render_nvidia.render_topo(st)
    real = fixture_body("nvidia-smi_topo_-m__RTX4090_8gpu_PCIe_only__go-gpuallocator-issue17.txt").split("\n")
    assert text.split("\n")[0] == real[0].replace("NIC0\tNIC1\t", "")  # the header, without the NIC columns
    assert text.split("\n")[1] == "GPU0\t X \t" + "\t".join(["NV18"] * 7) + "\t0-47,96-143\t0\t\tN/A"
    legend = fixture_body("nvidia-smi_topo_-m__RTXA6000_3gpu_NV4_pair__siboehm-bench.txt").partition("\nLegend:")[2]
    assert text.endswith("\nLegend:" + legend)
    faults.apply_fault(st, "gpu_nvlink_down", {"device": 4})
    t = topology.parse_topo(render_nvidia.render_topo(st))
    assert {t.cells[(4, j)] for j in range(8) if j != 4} == {"SYS", "NODE"} and t.nvlinks(0, 1) == 18
    links = topology.parse_nvlink(render_nvidia.render_nvlink(st))
    assert links[4].all_inactive and links[3].active_count == 18
    faults.apply_fault(st, "gpu_nvlink_down", {"device": 2, "links": [3, 5]})
    t = topology.parse_topo(render_nvidia.render_topo(st))
    assert t.nvlinks(2, 0) == 16
    assert topology.parse_nvlink(render_nvidia.render_nvlink(st))[2].inactive == (3, 5)


def test_roce_port_block_is_the_real_ethernet_block_and_its_fault_keeps_ibstat_active():
    st = gpu_state()
    real = fixture_body("ibstat__H100_CX7_some_down__gpud-fixture.txt")
    block = real[real.index("CA 'mlx5_7'"):real.index("CA 'mlx5_8'")].splitlines()
    mine = render_nvidia.render_ibstat(st)
    mine = mine[mine.index("CA 'mlx5_8'"):].splitlines()
    keys = [ln.split(":")[0] for ln in block]
    assert [ln.split(":")[0] for ln in mine] == [k.replace("mlx5_7", "mlx5_8") for k in keys]
    assert render_nvidia.render_roce_map(st) == "mlx5_8 1 enp27s0f0np0\n"
    faults.apply_fault(st, "roce_netdev_down", {"ca": "mlx5_8"})
    assert st["net"]["roce_down"] == ["enp27s0f0np0"] and "State: Active" in render_nvidia.render_ibstat(st).split("CA 'mlx5_8'")[1]
