"""preflight sim: a simulated Ascend cluster of real OpenSSH sshd nodes, for tests and the demo.

Why: preflight is only trustworthy if it is tested the way it is used, over real SSH, against
nodes whose tools print exactly what Ascend servers print. Nothing here is a mock of SSH.

Python API::

    from preflight.sim import Cluster
    c = Cluster.up({"nodes": 4, "defaults": {"layout": "910B"}}, dir="/tmp/x", mode="auto")
    c.inventory_path, c.known_hosts, c.client_key     # ready for `preflight run c.inventory_path`
    c.nodes                                           # SimNode(name, index, host, port, namespace, dir, ...)
    c.inject("node02", "npu_health", device=3, status="Alarm", codes=["A4025021"])
    c.set_state("node01", "devices.3.link", "DOWN")   # any state value by dotted path
    c.exec("node01", "npu-smi info")                  # run inside the node's namespaces
    c.reset("node02")                                 # back to the healthy baseline
    c.down()                                          # or Cluster.down_dir(dir); safe twice

CLI: ``preflight sim up SPEC [--dir DIR] [--mode netns|loopback|auto] [--slurm]``, ``preflight sim down``,
``preflight sim status`` (also ``python -m preflight.sim.cli``). Default dir /tmp/preflight-sim or
$PREFLIGHT_SIM_DIR. The spec format is in preflight/sim/spec.py.

Slurm (spec key ``slurm: true`` or ``--slurm``; netns mode): real munged + slurmctld on the control
side and one slurmd per node, all recorded by PID, state in <dir>/slurm/; clients use
``SLURM_CONF=<dir>/slurm/slurm.conf`` (``c.slurm_env()``). Details: preflight/sim/slurm.py and docs/SLURM.md §5.

Modes
-----
netns (root): subnets come from the spec's `network:` or, without one, the first free blocks
(at least /24) of 198.18.0.0/16 (host) and 198.19.0.0/16 (devices), chosen under a machine-wide
lock so clusters of concurrent test sessions never collide. Each node is a network namespace
`pfs-<tag>-<node>` (`<tag>`: 4 hex chars of the dir) with `eth0` on bridge `pfs<tag>h` (control
end = first address of the subnet, on the bridge; node N = first + N) and `hccn0` on bridge `pfs<tag>d` carrying its device addresses
(consecutive over nodes and devices). No default route. Each node reserves HCCL's default ports
60000-60015 (net.ipv4.ip_local_reserved_ports, per netns), as a tuned node does. sshd runs in
`ip netns exec NS unshare --mount --uts --propagation private`, with the node tree bind-mounted on
/usr/local/Ascend, its bin/ on /usr/local/sbin (so `npu-smi` is on root's sshd PATH), its data/
and ckpt/ on <dir>/mnt/{data,ckpt} (the inventory's paths, identical on every node), and /etc
overlaid so /etc/hccn.conf is the node's own (absent when the state has none). Empty host
mountpoints (/usr/local/Ascend, /usr/local/sbin) are created only if absent, recorded, and
removed at `down`. loopback (no root): sshd on 127.0.0.1 with distinct ports; the inventory gives
each node its own `ascend_home` and sshd's `SetEnv PATH=<node>/bin:...` finds `npu-smi`; device
addresses are 127.19.x.y; device_drop/device_net_down need netns mode.

State-file layout (<dir>/)
--------------------------
    record.json            everything made: PIDs (+ start time), namespaces, links, host dirs, nodes
    inventory.yaml         docs/SPEC.md inventory: user root, identity_file, known_hosts, host_key_policy strict,
                           devices, ascend_home, env (HCCL_IF_IP per node, MASTER_ADDR = first node,
                           MASTER_PORT "29500", GLOO/HCCL_SOCKET_IFNAME = eth0), env_files [set_env.sh], paths
    known_hosts            one line per node host key
    authorized_keys        the client key, for every node's sshd (AuthorizedKeysFile)
    keys/client_ed25519    client key; kept across `down` and reused by the next `up` (`--purge` drops it)
    mnt/{data,ckpt}        netns mode: mountpoints of each node's data/ckpt
    nodes/<name>/
      state.json           the node's state (see state.py); baseline.json is the healthy one
      ascend/              driver/{version.info,tools/hccn_tool,lib64/..}, firmware/version.info,
                           ascend-toolkit/{set_env.sh,latest -> <ver>,<ver>/<arch>-linux/ascend_toolkit_install.info,..}
      bin/npu-smi          sh script
      out/npu/*            pre-rendered npu-smi outputs: info, list, map; health, board, usages, ecc and
                           spod-info (one "@@N" / "@@N.M" section per card / chip); invalid_card,
                           invalid_chip, not_found, busy;
                           mode (hang | busy, when set)
      out/hccn/*           pre-rendered hccn_tool outputs, one file per query (link, ip, optical,
                           net_health, link_stat, tls, fec, speed, stat; addr = the source -ping uses),
                           one "@@<dev>" section per device. Valid ids, devices without an IP and
                           product support are baked into the tool scripts at each render.
      etc/hccn.conf        address_N/netmask_N when the state has one
      data/, ckpt/         data files (deterministic content), checkpoint dir
      ssh/                 sshd_config, host key, sshd.pid, sshd.log

Faults (``c.inject(node, NAME, **params)`` or a spec's ``faults:``; device = logical id)
-----------------------------------------------------------------------------------------
    npu_health       device, status=Warning|Alarm|Critical|UNKNOWN, codes=[..], info=[..]  (chip= alias)
    npu_process      device, pid, name, mem, cpid   a process holds the NPU (process table + HBM used)
    hbm_leak         device, used                HBM used, no process listed
    link_down        device                      link DOWN, LINK DOWN record, device address removed
    link_flap        device, count               extra DOWN/UP records, link up count grows
    optical_absent   device                      module not present
    optical_rx_low   device, lane, rx, los, lol  Rx power under threshold, LOS/LoL flags set
    ip_missing       device                      hccn_tool -ip -g empty (+stderr), address removed
    ip_stale         device, address             /etc/hccn.conf address_N differs from the device IP
    net_health       [device], status            default "Receive timeout" (all devices without device)
    set_env_missing                              ascend-toolkit/set_env.sh removed
    version          component=cann|driver|firmware|npu_smi, value
    npu_smi_missing / npu_smi_hang / npu_smi_busy   gone / sleeps forever / dcmi -8020
    port_held        port                        a listener in the node's netns, tracked by PID
    data_missing     [file] / data_different [file, size]
    sshd_down                                    sshd stopped (start_sshd brings it back)
    silent_banner                                sshd stopped, a listener accepts TCP and never speaks
    device_drop      [device]                    iptables DROP in the node's netns (netns mode)
    device_net_down                              hccn0 down: every device link DOWN (netns mode)
  Collectives (smoke.allreduce mode all; real traffic, the node's own interpreter):
    link_throttle    rate (100mbit), ingress      tc tbf on the node's eth0 egress; ingress: through an ifb
                                                 device too (netns mode; this kernel has tbf/ifb, no netem)
    link_loss        percent (5)                 random drop of received TCP but ssh (iptables statistic)
    link_drop        after (0.5), duration (25)  `after` s after each rank on the node connects to its
                                                 peers (its collective under way), eth0 drops every packet
                                                 but ssh's for `duration` s (a watcher in its netns; reset
                                                 stops it): the link goes in the middle of the collective
    collective_wrong_sum                         set_env.sh loads a test-only sitecustomize on that node:
                                                 torch.distributed.all_reduce adds 1 to its contribution
    no_torch                                     the same hook takes site-packages off sys.path: no torch
  NVIDIA nodes (`device` = GPU index in nvidia-smi order):
    gpu_ecc          device, count               volatile (and aggregate) DRAM uncorrectable ECC
    gpu_remap_pending device                     Remapped Rows: Pending: Yes
    gpu_xid          device, xid (79)            an `NVRM: Xid (PCI:...): N, ...` line in the node's dmesg
    gpu_missing      device                      the GPU is gone from nvidia-smi (7 of 8)
    gpu_process      device, pid, name, mem      a compute process on the GPU (table + memory used)
    gpu_pcie_degraded device, width (8)          PCIe Link Width Current 8x of Max 16x
    gpu_hw_slowdown  device                      Clocks Event Reasons: HW Slowdown: Active
    ib_port_down     ca (mlx5_0), state=Polling|Down   the HCA port Down/Polling (or Disabled)
    gpu_nvlink_down  device, links (all 18)      those NVLinks `<inactive>` in `nvlink -s`; `topo -m` pairs
                                                 over PCIe (NODE/SYS), or NV<active> when some remain
    roce_netdev_down ca (mlx5_8)                 the RoCE port's veth netdev down in the node's netns;
                                                 ibstat still Active (netns mode)

Layouts (node key `layout`): 910B (A2, one chip per card, `Chip`), A3 (two chips per card,
`Chip  Phy-ID`, 16 logical devices; npu-smi >= 26 prints the 116-char wide table), 310P
(`Chip    Device`, no HBM, no RoCE: hccn_tool says the command is not supported), 910A (A1,
910ProB by default, DDR + HBM). Other node keys: chip_name, npus, chips_per_npu,
npu_smi_version, driver_version, firmware_version, cann_version, arch, hccn_conf, data_files.

NVIDIA nodes (node key `backend: nvidia`, with `gpus` (8) and `gpu_model` (H100, the one model with
a real `-q` capture)): bin/ holds sh scripts `nvidia-smi` (default table, `-q`, `topo -m`,
`nvlink -s`, `--query-gpu=... --format=csv,noheader,nounits`), `ibstat`, `ibstatus`,
`ibdev2netdev` (the RoCE port `mlx5_8`, whose netdev `enp27s0f0np0` is a veth pair kept inside the
node's namespace in netns mode) and `dmesg` (the node's kernel log: sim
nodes share the host kernel, so the real dmesg would show the host's), catting out/nv/*; no
npu-smi, no hccn_tool, no device addresses. The inventory gives them `backend: nvidia` and
NCCL_SOCKET_IFNAME. Formats: preflight/sim/render_nvidia.py.

Simulated tools are POSIX sh that `cat` pre-rendered text (no interpreter per call); text with no
verbatim capture is marked `# inferred` in the renderers.
"""
from __future__ import annotations

from .cluster import Cluster, SimNode
from .procs import SimError
from .spec import SimSpec, SimSpecError, load_spec, parse_spec

__all__ = ["Cluster", "SimNode", "SimError", "SimSpec", "SimSpecError", "load_spec", "parse_spec"]
