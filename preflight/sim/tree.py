"""Write a node's on-disk tree from its state: the Ascend install, the tools, the pre-rendered
outputs, /etc/hccn.conf, data files. Called at bring-up and after every state change.

Why files: the simulated tools are sh scripts that `cat`; everything a probe can see is a file
Python wrote, so a fault is a state edit followed by `write_tree`. Writes are atomic (rename) so a
probe running during a re-render sees the old or the new text, never half of it.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
from importlib import resources
from pathlib import Path
from typing import Any

from . import render_hccn, render_npusmi
from .logins import DEVICE_MARKS

TOOLKIT_DIRS = ("lib64/plugin/opskernel", "lib64/plugin/nnengine", "opp/built-in/op_impl/ai_core/tbe/op_tiling",
                "bin", "python/site-packages", "tools/aml/lib64/plugin", "toolkit", "compiler/ccec_compiler/bin")


def package_text(kind: str, name: str) -> str:
    return resources.files("preflight.sim").joinpath(kind, name).read_text(encoding="utf-8")


def put(path: Path, text: str | bytes, mode: int | None = None) -> None:
    """Replace a file atomically (a probe reading it sees old or new text); skipped when the
    content is already there, written in place when the file is new (bring-up: fewer syscalls)."""
    data = text.encode() if isinstance(text, str) else text
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            if mode is not None:
                os.chmod(path, mode)
            return
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        if mode is not None:
            os.chmod(path, mode)
        return
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, path)


def remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def driver_version_info(v: str) -> str:
    return (f"Version={v}\nascendhal_version=7.35.19\naicpu_version=1.0\ntdt_version=1.0\nlog_version=1.0\n"
            f"prof_version=2.0\ndvppkernels_version=1.1\ntsfw_version=1.0\nInnerversion=V100R001C23SPC002B220\n"
            f"compatible_version=[V100R001C15],[V100R001C18],[V100R001C19],[V100R001C20],[V100R001C21],[V100R001C23]\n"
            f"compatible_version_fw=[7.0.0,7.99.99]\npackage_version={v}\n")


def firmware_version_info(fw: str, drv: str) -> str:
    return (f"Version={fw}\nfirmware_version=1.0\npackage_version={drv}\n"
            f"compatible_version_drv=[{drv},{drv}.]\n")


def toolkit_install_info(cann: str, arch: str) -> str:
    return (f"package_name=Ascend-cann-toolkit\nversion={cann}\ninnerversion=V100R001C23SPC002B210\n"
            f"compatible_version=[V100R001C15],[V100R001C18],[V100R001C19],[V100R001C20],[V100R001C21],[V100R001C23]\n"
            f"arch={arch}\nos=linux\npath=/usr/local/Ascend/ascend-toolkit/{cann}/{arch}-linux\n")


def data_bytes(name: str, size: int, variant: int) -> bytes:
    """Deterministic content: identical across nodes unless a fault bumps `variant`."""
    block = hashlib.sha256(f"{name}:{variant}".encode()).digest() * 128  # 4 KiB
    return (block * (size // len(block) + 1))[:size]


HOOK_DIR = "pf-sim-hooks"  # under the node's Ascend home: sitecustomize.py, the sim's interpreter hooks


def write_tree(node_dir: Path, state: dict[str, Any], ascend_home: str) -> None:
    """Bring node_dir in line with state. ascend_home is where the node sees its Ascend tree."""
    asc = node_dir / "ascend"

    # Ascend install (also on a GPU node: an empty-looking tree the Ascend checks never read there)
    put(asc / "driver" / "version.info", driver_version_info(state["driver_version"]))
    put(asc / "firmware" / "version.info", firmware_version_info(state["firmware_version"], state["driver_version"]))
    for sub in ("lib64/common", "lib64/driver"):
        (asc / "driver" / sub).mkdir(parents=True, exist_ok=True)
    tk = asc / "ascend-toolkit"
    ver_dir = tk / state["cann_version"]
    put(ver_dir / f"{state['arch']}-linux" / "ascend_toolkit_install.info",
        toolkit_install_info(state["cann_version"], state["arch"]))
    (ver_dir / f"{state['arch']}-linux" / "devlib").mkdir(parents=True, exist_ok=True)
    for sub in TOOLKIT_DIRS:
        (ver_dir / sub).mkdir(parents=True, exist_ok=True)
    latest = tk / "latest"
    if not latest.is_symlink() or os.readlink(latest) != state["cann_version"]:
        tmp = tk / ".latest.tmp"
        remove(tmp)
        tmp.symlink_to(state["cann_version"])
        os.replace(tmp, latest)
    hooks = sorted(state.get("hooks") or ())
    hook_dir = asc / HOOK_DIR
    if state["set_env"]:
        text = package_text("templates", "set_env.sh").replace("@ASCEND_HOME@", shlex.quote(ascend_home))
        if hooks:  # a test-only interpreter hook on this node (faults collective_wrong_sum, no_torch)
            text += (f"export PYTHONPATH={shlex.quote(ascend_home + '/' + HOOK_DIR)}${{PYTHONPATH:+:$PYTHONPATH}}\n"
                     f"export PF_SIM_HOOKS={','.join(hooks)}\n")
        put(tk / "set_env.sh", text, 0o755)
    else:
        remove(tk / "set_env.sh")
    if hooks:
        put(hook_dir / "sitecustomize.py", package_text("templates", "sitecustomize.py"))
    else:
        remove(hook_dir / "sitecustomize.py")

    if state.get("backend") == "nvidia":
        _write_nvidia(node_dir, state)
    else:
        _write_ascend_tools(node_dir, state, asc)
        for tool in NVIDIA_TOOLS:
            remove(node_dir / "bin" / tool)
    _write_data(node_dir, state)


NVIDIA_TOOLS = ("nvidia-smi", "ibstat", "ibstatus", "ibdev2netdev", "dmesg")


def _write_nvidia(node_dir: Path, state: dict[str, Any]) -> None:
    """A GPU node: nvidia-smi, ibstat, ibstatus and dmesg (its kernel log) as sh scripts that cat
    pre-rendered text; no npu-smi (so `backend: auto` sees an NVIDIA node)."""
    from . import render_nvidia

    out = node_dir / "out" / "nv"
    put(out / "table", render_nvidia.render_table(state))
    put(out / "query", render_nvidia.render_query(state))
    put(out / "topo", render_nvidia.render_topo(state))
    put(out / "nvlink", render_nvidia.render_nvlink(state))
    for field, text in render_nvidia.render_csv(state).items():
        put(out / "csv" / field, text)
    put(out / "ibstat", render_nvidia.render_ibstat(state))
    put(out / "ibstatus", render_nvidia.render_ibstatus(state))
    put(out / "roce_map", render_nvidia.render_roce_map(state))
    put(out / "dmesg", render_nvidia.render_dmesg(state))
    remove(node_dir / "bin" / "npu-smi")
    remove(node_dir / "etc" / "hccn.conf")
    for tool in NVIDIA_TOOLS:
        put(node_dir / "bin" / tool, package_text("tools", tool).replace("@OUT@", shlex.quote(str(out))), 0o755)


def _write_ascend_tools(node_dir: Path, state: dict[str, Any], asc: Path) -> None:
    out = node_dir / "out"
    npu_out, hccn_out = out / "npu", out / "hccn"
    # npu-smi: whole outputs as files, per-card/per-chip ones as "@@id" sections of one file
    files = render_npusmi.render_all(state)
    sections: dict[str, list[str]] = {"health": [], "board": [], "usages": [], "ecc": [], "spod-info": []}
    for name, text in files.items():
        kind, _, key = name.partition(".")
        if kind in sections:
            sections[kind].append(f"@@{key}\n{text}")
        else:
            put(npu_out / name, text)
    for kind, parts in sections.items():
        put(npu_out / kind, "".join(parts))
    for name, text in (("invalid_card", render_npusmi.INVALID_CARD), ("invalid_chip", render_npusmi.INVALID_CHIP),
                       ("not_found", render_npusmi.NOT_FOUND), ("busy", render_npusmi.BUSY),
                       ("denied", render_npusmi.DENIED)):
        put(npu_out / name, text)
    if state["npu_smi"] in ("hang", "busy"):
        put(npu_out / "mode", state["npu_smi"] + "\n")
    else:
        remove(npu_out / "mode")
    cards = " ".join(str(n["id"]) for n in state["npus"])
    chip_ids = " ".join(f"{n['id']}.{c['chip']}" for n in state["npus"] for c in n["chips"])
    if state["npu_smi"] == "missing":
        remove(node_dir / "bin" / "npu-smi")
    else:
        script = package_text("tools", "npu-smi").replace("@OUT@", shlex.quote(str(npu_out)))
        script = script.replace("@DENIED_RC@", str(render_npusmi.DENIED_RC))
        put(node_dir / "bin" / "npu-smi", script.replace("@CARDS@", cards).replace("@CHIPS@", chip_ids), 0o755)

    # hccn_tool: one file per command, one "@@id" section per device
    per_cmd: dict[str, list[str]] = {}
    for d in state["devices"]:
        for name, text in render_hccn.render_device(state, d).items():
            if not name.endswith(".err"):
                per_cmd.setdefault(name, []).append(f"@@{d['id']}\n{text}")
    for name, parts in per_cmd.items():
        put(hccn_out / name, "".join(parts))
    put(hccn_out / "err_major_type", render_hccn.ERR_MAJOR_TYPE)
    put(hccn_out / "not_root", render_hccn.ERR_NOT_ROOT)
    script = package_text("tools", "hccn_tool").replace("@OUT@", shlex.quote(str(hccn_out)))
    script = script.replace("@DEVS@", " ".join(str(d["id"]) for d in state["devices"]))
    script = script.replace("@NOIP@", " ".join(str(d["id"]) for d in state["devices"] if not d["shown_ip"]))
    script = script.replace("@SUPPORTED@", "1" if state["hccn"] else "0")
    put(asc / "driver" / "tools" / "hccn_tool", script, 0o755)

    conf = render_hccn.render_hccn_conf(state)
    if conf is None:
        remove(node_dir / "etc" / "hccn.conf")
    else:
        put(node_dir / "etc" / "hccn.conf", conf)


def _write_data(node_dir: Path, state: dict[str, Any]) -> None:
    # data and checkpoint
    data = node_dir / "data"
    data.mkdir(exist_ok=True)
    (node_dir / "ckpt").mkdir(exist_ok=True)
    wanted = state["data_files"]
    for p in data.iterdir():
        if p.name not in wanted:
            p.unlink()
    for name, f in wanted.items():
        put(data / name, data_bytes(name, f["size"], f["variant"]))

    out = node_dir / "out"
    for rel, mode in DEVICE_MARKS.items():  # what the tools test before answering (sim.logins)
        if not (out / rel).exists():
            put(out / rel, b"", mode)
    put(node_dir / "state.json", json.dumps(state, indent=1, sort_keys=True) + "\n")
