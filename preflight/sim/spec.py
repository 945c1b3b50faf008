"""The simulated-cluster spec: a small YAML document, validated strictly.

Why strict: a typo in a spec ("layuot") would otherwise silently give a default cluster and a test
that passes for the wrong reason. Every problem is one line naming the place and the problem.

    cluster: demo                 # optional; the inventory's cluster name
    nodes: 4                      # a count (names prefix01..), or a list of names / {name:, <node keys>}
    prefix: node                  # name prefix when nodes is a count
    network:                      # optional; test ranges only (inside 198.18.0.0/15, RFC 2544)
      subnet: 198.18.0.0/24       # host network; the control end is the first address
      device_subnet: 198.19.0.0/24
                                  # without network:, bring-up picks the first free blocks
                                  # (at least /24) of 198.18.0.0/16 and 198.19.0.0/16
    slurm: false                  # true: real slurmctld + one slurmd per node (netns mode; sim/slurm.py)
    defaults: {layout: 910B}      # node keys every node gets; netns mode also takes login_user
                                  # (a non-root login), sudo (nopasswd|password|none), groups
                                  # ([HwHiAiUser]: npu-smi without sudo), become (inventory: sudo),
                                  # hide_tools ([ip, ss]: not installed on that node, netns mode)
    faults:                       # applied after bring-up; see preflight.sim docstring
      - {node: node02, fault: npu_health, device: 3, status: Alarm, codes: [A4025021]}
"""
from __future__ import annotations

import ipaddress
import os
import platform
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from .faults import FAULTS, check_fault_params
from .layouts import LAYOUTS


class SimSpecError(ValueError):
    """A spec the simulator refuses; the message is one line naming the problem."""


TEST_RANGE = ipaddress.ip_network("198.18.0.0/15")
TOP_KEYS = {"cluster", "nodes", "prefix", "network", "defaults", "faults", "slurm"}
NETWORK_KEYS = {"subnet", "device_subnet"}
NODE_KEYS = {
    "layout", "chip_name", "npus", "chips_per_npu", "npu_smi_version", "driver_version",
    "firmware_version", "cann_version", "arch", "hccn_conf", "data_files", "backend", "gpus", "gpu_model",
    "login_user", "sudo", "groups", "become", "hide_tools",
}
BACKENDS = ("ascend", "nvidia")
GPU_MODELS = ("H100",)  # one model with a real -q capture to render from
NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,30}$")


@dataclass(frozen=True)
class NodeSpec:
    name: str
    index: int                       # 1-based position in the cluster
    layout: str = "910B"
    chip_name: str | None = None     # None: the layout's
    npus: int = 8
    chips_per_npu: int | None = None
    npu_smi_version: str | None = None
    driver_version: str | None = None
    firmware_version: str | None = None
    cann_version: str | None = None
    arch: str = field(default_factory=platform.machine)
    hccn_conf: bool = True
    data_files: dict[str, int] = field(default_factory=lambda: {"train.bin": 65536, "train.idx": 4096})
    backend: str = "ascend"          # nvidia: a GPU node (nvidia-smi, ibstat, a kernel log), no npu-smi
    gpus: int = 8
    gpu_model: str = "H100"
    login_user: str | None = None    # netns mode: log in as this non-root user (preflight.sim.logins)
    sudo: str = "nopasswd"           # its sudoers: nopasswd | password | none
    groups: tuple[str, ...] = ()     # its extra groups, e.g. [HwHiAiUser] (npu-smi without sudo)
    become: bool = True              # the inventory says `become: sudo` for it
    hide_tools: tuple[str, ...] = ()  # netns mode: these commands are not installed on the node (sshd.node_script)


@dataclass(frozen=True)
class SimSpec:
    cluster: str
    nodes: tuple[NodeSpec, ...]
    subnet: ipaddress.IPv4Network | None         # None: chosen free at bring-up
    device_subnet: ipaddress.IPv4Network | None
    faults: tuple[dict[str, Any], ...]
    source: str = "<spec>"
    slurm: bool = False                          # real slurmctld + one slurmd per node (netns mode)


def _fail(source: str, where: str, problem: str) -> SimSpecError:
    return SimSpecError(f"{source}: {where}: {problem}" if where else f"{source}: {problem}")


def _unknown(source: str, where: str, got: dict, allowed: set[str]) -> None:
    extra = sorted(set(got) - allowed)
    if extra:
        raise _fail(source, where, f"unknown key {extra[0]!r} (allowed: {', '.join(sorted(allowed))})")


def _node_keys(source: str, where: str, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _fail(source, where, "must be a mapping")
    _unknown(source, where, raw, NODE_KEYS)
    out = dict(raw)
    if "layout" in out and out["layout"] not in LAYOUTS:
        raise _fail(source, f"{where}.layout", f"unknown layout {out['layout']!r} (one of {', '.join(LAYOUTS)})")
    for key in ("npus", "chips_per_npu"):
        if key in out and (not isinstance(out[key], int) or isinstance(out[key], bool) or not 1 <= out[key] <= 16):
            raise _fail(source, f"{where}.{key}", "must be an integer from 1 to 16")
    for key in ("chip_name", "npu_smi_version", "driver_version", "firmware_version", "cann_version", "arch"):
        if key in out:
            if not isinstance(out[key], (str, int, float)) or not re.fullmatch(r"[A-Za-z0-9._ -]{1,40}", str(out[key])):
                raise _fail(source, f"{where}.{key}", "must be a short plain string")
            out[key] = str(out[key])
    if "backend" in out and out["backend"] not in BACKENDS:
        raise _fail(source, f"{where}.backend", f"unknown backend {out['backend']!r} (one of {', '.join(BACKENDS)})")
    if "gpus" in out and (not isinstance(out["gpus"], int) or isinstance(out["gpus"], bool) or not 1 <= out["gpus"] <= 16):
        raise _fail(source, f"{where}.gpus", "must be an integer from 1 to 16")
    if "gpu_model" in out and out["gpu_model"] not in GPU_MODELS:
        raise _fail(source, f"{where}.gpu_model", f"unknown model {out['gpu_model']!r} (one of {', '.join(GPU_MODELS)})")
    if "login_user" in out and not (isinstance(out["login_user"], str) and re.fullmatch(r"[a-z_][a-z0-9_-]{0,30}", out["login_user"])):
        raise _fail(source, f"{where}.login_user", "must be a lower-case user name")
    if "sudo" in out and out["sudo"] not in ("nopasswd", "password", "none"):
        raise _fail(source, f"{where}.sudo", "must be nopasswd, password or none")
    if "groups" in out:
        if not isinstance(out["groups"], list) or not all(isinstance(g, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]{0,30}", g)
                                                          for g in out["groups"]):
            raise _fail(source, f"{where}.groups", "must be a list of group names")
        out["groups"] = tuple(out["groups"])
    if "hide_tools" in out:
        if not isinstance(out["hide_tools"], list) or not all(isinstance(t, str) and re.fullmatch(r"[A-Za-z0-9_.+-]{1,40}", t)
                                                              for t in out["hide_tools"]):
            raise _fail(source, f"{where}.hide_tools", "must be a list of command names")
        out["hide_tools"] = tuple(out["hide_tools"])
    for key in ("hccn_conf", "become"):
        if key in out and not isinstance(out[key], bool):
            raise _fail(source, f"{where}.{key}", "must be true or false")
    if "data_files" in out:
        files = out["data_files"]
        if not isinstance(files, dict) or not all(
                isinstance(k, str) and re.fullmatch(r"[A-Za-z0-9._-]{1,64}", k) and isinstance(v, int) and 0 <= v <= 1 << 30
                for k, v in files.items()):
            raise _fail(source, f"{where}.data_files", "must map plain file names to sizes in bytes (<= 1 GiB)")
    return out


def _network(source: str, raw: Any) -> tuple[Any, Any]:
    if raw is None:
        return None, None
    if not isinstance(raw, dict):
        raise _fail(source, "network", "must be a mapping")
    _unknown(source, "network", raw, NETWORK_KEYS)
    nets = []
    for key, default in (("subnet", "198.18.0.0/24"), ("device_subnet", "198.19.0.0/24")):
        try:
            net = ipaddress.ip_network(str(raw.get(key, default)), strict=True)
        except ValueError as exc:
            raise _fail(source, f"network.{key}", str(exc)) from None
        if net.version != 4 or not net.subnet_of(TEST_RANGE):  # type: ignore[arg-type]
            raise _fail(source, f"network.{key}", f"{net} is outside the test range {TEST_RANGE}")
        if net.prefixlen > 29:
            raise _fail(source, f"network.{key}", f"{net} is too small")
        nets.append(net)
    if nets[0].overlaps(nets[1]):
        raise _fail(source, "network", "subnet and device_subnet overlap")
    return nets[0], nets[1]


def _names(source: str, raw: Any, prefix: str) -> list[tuple[str, dict[str, Any]]]:
    if isinstance(raw, bool) or raw is None:
        raise _fail(source, "nodes", "must be a count or a list")
    if isinstance(raw, int):
        if not 1 <= raw <= 4096:
            raise _fail(source, "nodes", "count must be from 1 to 4096")
        width = max(2, len(str(raw)))
        return [(f"{prefix}{i:0{width}d}", {}) for i in range(1, raw + 1)]
    if not isinstance(raw, list) or not raw:
        raise _fail(source, "nodes", "must be a count or a non-empty list")
    out = []
    for i, item in enumerate(raw):
        where = f"nodes[{i}]"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict) or "name" not in item:
            raise _fail(source, where, "needs a name")
        keys = dict(item)
        name = str(keys.pop("name"))
        out.append((name, _node_keys(source, where, keys)))
    return out


def parse_spec(raw: Any, source: str = "<spec>") -> SimSpec:
    """Validate a loaded spec mapping; raise SimSpecError (one line) on the first problem."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise _fail(source, "", "the spec must be a mapping")
    _unknown(source, "", raw, TOP_KEYS)
    prefix = str(raw.get("prefix", "node"))
    if not NAME_RE.match(prefix + "1"):
        raise _fail(source, "prefix", f"bad name prefix {prefix!r}")
    defaults = _node_keys(source, "defaults", raw.get("defaults") or {})
    subnet, device_subnet = _network(source, raw.get("network"))
    named = _names(source, raw.get("nodes", 2), prefix)
    seen: set[str] = set()
    nodes = []
    for i, (name, keys) in enumerate(named, start=1):
        if not NAME_RE.match(name):
            raise _fail(source, f"nodes[{i - 1}]", f"bad node name {name!r} (letters, digits, - and _; up to 31)")
        if name in seen:
            raise _fail(source, f"nodes[{i - 1}]", f"duplicate node name {name!r}")
        seen.add(name)
        nodes.append(NodeSpec(name=name, index=i, **{**defaults, **keys}))
    capacity = subnet.num_addresses - 3 if subnet else 65533  # network, broadcast, the control end
    if len(nodes) > capacity:
        raise _fail(source, "nodes", f"{len(nodes)} nodes do not fit subnet {subnet} (holds {capacity})")
    devices = sum(n.npus * (n.chips_per_npu or LAYOUTS[n.layout].chips_per_npu) for n in nodes if n.backend == "ascend")
    if devices > (device_subnet.num_addresses - 2 if device_subnet else 65534):
        raise _fail(source, "nodes", f"{devices} devices do not fit device_subnet {device_subnet or '198.19.0.0/16'}")
    faults = []
    for i, fault in enumerate(raw.get("faults") or []):
        where = f"faults[{i}]"
        if not isinstance(fault, dict) or "fault" not in fault or "node" not in fault:
            raise _fail(source, where, "needs node: and fault:")
        if fault["node"] not in seen:
            raise _fail(source, f"{where}.node", f"no node named {fault['node']!r}")
        params = {k: v for k, v in fault.items() if k not in ("node", "fault")}
        try:
            check_fault_params(str(fault["fault"]), params)
        except ValueError as exc:
            raise _fail(source, where, str(exc)) from None
        faults.append(dict(fault))
    cluster = str(raw.get("cluster", "sim"))
    slurm = raw.get("slurm", False)
    if not isinstance(slurm, bool):
        raise _fail(source, "slurm", "must be true or false")
    return SimSpec(cluster=cluster, nodes=tuple(nodes), subnet=subnet, device_subnet=device_subnet,
                   faults=tuple(faults), source=source, slurm=slurm)


def load_spec(spec: "str | os.PathLike[str] | dict[str, Any] | SimSpec") -> SimSpec:
    """A path to YAML, YAML text, an already-loaded mapping, or a SimSpec."""
    if isinstance(spec, SimSpec):
        return spec
    if isinstance(spec, dict):
        return parse_spec(spec)
    text_or_path = os.fspath(spec)
    if "\n" not in text_or_path and os.path.exists(text_or_path):
        with open(text_or_path, encoding="utf-8") as fh:
            text, source = fh.read(), text_or_path
    elif "\n" in text_or_path or ":" in text_or_path:
        text, source = text_or_path, "<spec>"
    else:
        raise SimSpecError(f"{text_or_path}: no such spec file")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SimSpecError(f"{source}: not valid YAML: {' '.join(str(exc).split())}") from None
    return parse_spec(raw, source)


__all__ = ["SimSpec", "NodeSpec", "SimSpecError", "parse_spec", "load_spec", "FAULTS"]
