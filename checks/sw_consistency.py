"""sw.consistency — the software stack is identical across nodes and a known-good combination.

What it checks: on every node, the versions of python, torch, torch_npu, mindspeed and
megatron-core (package metadata read with the inventory's `python` inside the launch environment;
torch itself is not imported, which takes seconds), the kernel (`uname -r`), and the CANN toolkit,
driver and firmware versions that cann.env reads. Where the job runs in a container (`container:`)
these are read inside it, and the job's image itself is compared by digest (the image id
container.runtime reads: the same tag can name other contents on two nodes), among the nodes that
have a container. Each version must be the same on every node:
the nodes that differ from the majority are named; with no majority (two nodes, two values) no node
is blamed and the values are listed. Then each node's combination is looked up in the compatibility
table shipped with preflight (`preflight/data/compat.yaml`, from the Ascend Extension for PyTorch
release notes): torch_npu built for another torch fails; a torch_npu/CANN pair or a Python version
the table does not list warns. Every such result names its reference.

Why it matters: ranks with different CANN, driver or torch_npu builds disagree on HCCL and operator
behaviour and fail at communicator initialisation or, worse, train subtly differently; torch_npu
is built for exactly one torch release (docs/MIGRATION.md: "PyTorch 2.1.0 with the matching torch_npu").

How to fix: install the majority version on the node named (`pip install torch_npu==<version>`,
or the CANN toolkit / driver package of the other nodes); pick versions from the release-note table
cited in the result.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import yaml

import preflight
from preflight import launchenv
from preflight.checkapi import (Policy, ClusterContext, CommandOutput, Finding, ParseError, Probe, Status, cmd, passed,
                                require_ok, sh)
from preflight.checkhelpers import graded, first_line, worst, q
from preflight import backend as backends
from preflight.net.blame import consensus

ID = "sw.consistency"
SCOPE = "cluster"
POLICY = Policy(
    where="job",  # on a node with a container: inside the job's container
)
USES = ("cann.env", "cuda.env", "container.runtime")
# What to do with a fail/warn (preflight/actions.py): versions are installed configuration.
ACTIONS = {
    "unknown_combination": ("monitor", "an unknown combination: not known bad (preflight/data/compat.yaml)"),
    "": ("fix_config", "versions that differ or are a known-bad combination (preflight/data/compat.yaml)"),
}
UNKNOWN = "unknown_combination"
DEFAULTS: dict[str, Any] = {"ignore": [], "compat_table": True}
COMPAT_PATH = Path(preflight.__file__).resolve().parent / "data" / "compat.yaml"

# Distribution names tried in order (metadata spells them with - or _ depending on the wheel).
PACKAGES = {"torch": ("torch",), "torch_npu": ("torch_npu", "torch-npu"), "mindspeed": ("mindspeed",),
            "megatron_core": ("megatron-core", "megatron_core")}
# Runs on the node's own python, any 3.x: importlib.metadata (3.8+), else pkg_resources.
SCRIPT = "\n".join([
    "import sys",
    "print('python=%d.%d.%d' % tuple(sys.version_info[:3]))",
    "try:",
    "    from importlib import metadata as _m",
    "    _v = _m.version",
    "except ImportError:",
    "    import pkg_resources as _p",
    "    _v = lambda n: _p.get_distribution(n).version",
    "def v(names):",
    "    for n in names:",
    "        try:",
    "            return _v(n)",
    "        except Exception:",
    "            pass",
    "    return ''",
    *[f"print('{key}=' + v({names!r}))" for key, names in PACKAGES.items()],
])
PY_PROBE, KERNEL_PROBE = "sw_python", "uname_r"

# (label, severity of a mismatch across nodes). Kernel builds differ harmlessly more often.
FIELDS = {
    "toolkit": ("CANN toolkit", Status.FAIL), "driver": ("driver", Status.FAIL), "firmware": ("firmware", Status.FAIL),
    "python": ("python", Status.FAIL), "torch": ("torch", Status.FAIL), "torch_npu": ("torch_npu", Status.FAIL),
    "mindspeed": ("mindspeed", Status.FAIL), "megatron_core": ("megatron-core", Status.FAIL),
    "kernel": ("kernel", Status.WARN),
    "image": ("job image (by digest)", Status.FAIL),
    "cuda": ("CUDA", Status.FAIL), "nccl": ("NCCL", Status.FAIL),
}
CANN_FIELDS = {"toolkit": "toolkit_version", "driver": "driver_version", "firmware": "firmware_version"}
ABSENT = "absent"


@dataclass(frozen=True)
class Facts:
    """Per node. Package versions are '' when not installed; python None when the interpreter failed."""

    python: str | None
    torch: str = ""
    torch_npu: str = ""
    mindspeed: str = ""
    megatron_core: str = ""
    kernel: str | None = None
    python_error: str | None = None


def probes(node, params) -> dict[str, Probe]:
    return {PY_PROBE: cmd(launchenv.command(node, sh("{py} -c {src}", py=node.python, src=SCRIPT))),
            KERNEL_PROBE: cmd("uname -r", where="host")}  # the kernel is the host's (a container shares it)


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    py = require_ok(outputs.get(PY_PROBE), "python package metadata")
    kernel_out = outputs.get(KERNEL_PROBE)
    kernel = first_line(kernel_out.stdout) if kernel_out is not None and kernel_out.ok else None
    if py.rc != 0:
        # rc 127: the interpreter is not on the launch PATH; anything else: it could not run the script
        return Facts(None, kernel=kernel, python_error=first_line(py.stderr) or f"rc {py.rc}")
    kv = dict(line.split("=", 1) for line in py.stdout.splitlines() if "=" in line)
    if "python" not in kv:
        raise ParseError("no python= line in the package-metadata probe", py.stdout + py.stderr)
    return Facts(kv["python"], *(kv.get(k, "") for k in PACKAGES), kernel=kernel)


# ---------------------------------------------------------------- compatibility table

@lru_cache(maxsize=4)
def load_table(path: str = str(COMPAT_PATH)) -> dict[str, Any]:
    return yaml.safe_load(Path(path).read_text())


def line_of(version: str) -> str:
    """'2.1.0.post12' and '2.1.0+cpu' -> '2.1.0': the torch release a build belongs to."""
    m = re.match(r"(\d+\.\d+\.\d+)", version)
    return m.group(1) if m else version


def cann_base(version: str) -> str:
    """'8.0.RC3.beta1' -> '8.0.RC3' (community builds carry a suffix the tables omit)."""
    return re.sub(r"\.(alpha|beta)\d*$", "", version.strip(), flags=re.I)


def _ref(table: Mapping[str, Any], key: str) -> str:
    ref = table["references"].get(key, {})
    return f"{ref.get('title', key)}" + (f" <{ref['url']}>" if ref.get("url") else "")


def combination_problems(v: Mapping[str, str], table: Mapping[str, Any]) -> list[tuple[Status, str, str, str | None]]:
    """(status, what, reference, problem in ACTIONS or None) for one node's versions, from the table alone."""
    out: list[tuple[Status, str, str, str | None]] = []
    npu, torch, cann, py = v.get("torch_npu", ""), v.get("torch", ""), v.get("toolkit", ""), v.get("python", "")
    if npu and not torch:
        out.append((Status.FAIL, f"torch_npu {npu} is installed without torch", _ref(table, table["torch_npu_naming"]["ref"]), None))
    if npu and torch and line_of(npu) != line_of(torch):
        out.append((Status.FAIL, f"torch_npu {npu} is built for torch {line_of(npu)}, installed torch is {torch}",
                    _ref(table, table["torch_npu_naming"]["ref"]), None))
    row = next((r for r in table["torch_npu"] if str(r["torch_npu"]) == npu), None) if npu else None
    if npu and row is None:
        out.append((Status.WARN, f"torch_npu {npu} is not in the compatibility table (unknown combination)",
                    "preflight/data/compat.yaml", UNKNOWN))
    if row is not None and cann and cann_base(cann) not in [str(c) for c in row["cann"]]:
        out.append((Status.WARN, f"torch_npu {npu} is documented for CANN {', '.join(map(str, row['cann']))}, "
                                 f"toolkit is {cann} (unknown combination)", _ref(table, row["ref"]), None))
    minor = ".".join(py.split(".")[:2]) if py else ""
    if row is not None and minor and minor not in [str(p) for p in row["python"]]:
        out.append((Status.WARN, f"python {py} is not among the versions torch_npu {npu} is published for "
                                 f"({', '.join(map(str, row['python']))})", _ref(table, row["ref"]), None))
    mig = table.get("migration_python", {})
    # The migration guides' Python range matters where no release table row decides it.
    if npu and row is None and minor and mig and minor not in [str(p) for p in mig["validated"]]:
        out.append((Status.WARN, f"python {py} is outside the versions the migration guides validated "
                                 f"({', '.join(map(str, mig['validated']))}; {mig.get('best')} best)", _ref(table, mig["ref"]), UNKNOWN))
    return out


# ---------------------------------------------------------------- evaluation

def _versions(ctx: ClusterContext) -> tuple[dict[str, dict[str, str | None]], dict[str, str]]:
    """node -> field -> version (ABSENT when not installed; None when unknown: the python fields of a
    node whose interpreter failed, which then take no part in the vote); node -> why it is broken."""
    versions, broken = {}, {}
    for name in sorted(ctx.nodes):
        facts = ctx.facts.get(name, {})
        own: Facts | None = facts.get(ID)
        if own is None:
            broken[name] = "package metadata could not be read (see this node's errors)"
            continue
        if own.python is None:
            broken[name] = f"{ctx.nodes[name].python}: {own.python_error}"
        ok = own.python is not None
        row: dict[str, str | None] = {k: ((getattr(own, k) or ABSENT) if ok else None)
                                      for k in ("python", *PACKAGES)}
        row["kernel"] = own.kernel or ABSENT
        row["image"] = _image(ctx.nodes[name], facts.get("container.runtime"))
        if getattr(ctx.nodes[name], "backend", "ascend") == "nvidia":
            versions[name] = row | _cuda_fields(facts.get("cuda.env"))
            continue
        cann = facts.get("cann.env")
        for field, attr in CANN_FIELDS.items():
            row[field] = str(getattr(cann, attr, None) or ABSENT) if cann is not None else ABSENT
        versions[name] = row
    return versions, broken


def _image(node, runtime) -> str | None:
    """The job image's id (its content digest, container.runtime's `details.image_id`) on a node with
    `container:`; None elsewhere (a node whose job runs on the host takes no part in that vote)."""
    if getattr(node, "container", None) is None or runtime is None:
        return None
    return getattr(runtime, "image_id", None) or None


def _cuda_fields(cuda) -> dict[str, str | None]:
    """An NVIDIA node's driver, CUDA and NCCL (cuda.env); no CANN fields, so they take no part in
    the Ascend nodes' vote."""
    py = (getattr(cuda, "python", None) or {}) if cuda is not None else {}
    return {"driver": (getattr(cuda, "driver_version", None) or ABSENT) if cuda is not None else ABSENT,
            "cuda": (getattr(cuda, "cuda_version", None) or ABSENT) if cuda is not None else ABSENT,
            "nccl": py.get("nccl") or ABSENT}


def _mismatches(versions: Mapping[str, Mapping[str, str]], ignore: set[str], groups: Mapping[str, list[str]]):
    """(field, Consensus) for the fields that disagree, within each backend's nodes."""
    out = []
    for group in groups.values():
        members = set(group)  # membership per node and field: a list would make this quadratic
        for field in FIELDS:
            if field in ignore:
                continue
            c = consensus({n: v[field] for n, v in versions.items() if n in members and v.get(field) is not None})
            if not c.agreed:
                out.append((field, c))
    return out


def _fix(field: str, want: str, python: str) -> str:
    label = FIELDS[field][0]
    if field in PACKAGES:
        pkg = "megatron-core" if field == "megatron_core" else field
        return f"`{q(python)} -m pip install {q(f'{pkg}=={want}')}`" if want != ABSENT else f"uninstall {label} to match the other nodes"
    if field == "python":
        return f"point the inventory's python at a {want} interpreter"
    if field == "image":
        return f"run the job from the image with id {want}, as the other nodes do (`docker/podman images --digests`; pull it by digest)"
    return f"install {label} {want} (the version on the other nodes)"


def evaluate(ctx: ClusterContext) -> list[Finding]:
    versions, broken = _versions(ctx)
    ignore = set(ctx.params.get("ignore", []))
    table = load_table() if ctx.params.get("compat_table", True) else None
    per_node: dict[str, list[tuple[Status, str, str, str | None]]] = {n: [] for n in ctx.nodes}  # (.., fix, problem)
    summary_parts: list[tuple[Status, str, str | None]] = []
    for name, why in broken.items():
        per_node[name].append((Status.FAIL, f"python unusable: {why}",
                               f"Set `python:` for {name} in the inventory to the interpreter that has torch_npu (e.g. /opt/conda/bin/python3).",
                               None))
    for field, c in _mismatches(versions, ignore, backends.groups(ctx.nodes)):
        label, sev = FIELDS[field]
        if c.majority is None:
            summary_parts.append((sev, f"{label} differs with no majority: {c.describe()}", None))
            continue
        for node, value in c.outliers.items():
            per_node[node].append((sev, f"{label} {value}, expected {c.majority} (as on {len(c.groups[c.majority])} other nodes)",
                                   f"On {node}: {_fix(field, c.majority, ctx.nodes[node].python)}.", None))
    combos = {n: combination_problems({k: x for k, x in v.items() if x and x != ABSENT}, table)
              for n, v in versions.items()} if table else {}
    _spread(combos, per_node, summary_parts, len(versions))
    return _findings(ctx, versions, per_node, summary_parts)


def _spread(combos, per_node, summary_parts, n_nodes: int) -> None:
    """A combination problem every node shares belongs to the summary; otherwise blame its nodes."""
    by_text: dict[tuple[Status, str, str, str | None], list[str]] = {}
    for node, problems in combos.items():
        for p in problems:
            by_text.setdefault(p, []).append(node)
    for (status, what, ref, problem), nodes in by_text.items():
        text = f"{what} [ref: {ref}]"
        if len(nodes) == n_nodes and n_nodes > 1:
            summary_parts.append((status, f"{text} on every node", problem))
        else:
            for node in nodes:
                per_node[node].append((status, text, "Install versions from one row of the referenced table "
                                                     "(`pip install torch==<v> torch_npu==<v>`).", problem))


def _findings(ctx, versions, per_node, summary_parts) -> list[Finding]:
    blamed = []
    for node, items in sorted(per_node.items()):
        if items:
            blamed.append(Finding(worst(s for s, _, _, _ in items), f"{node}: " + "; ".join(w for _, w, _, _ in items),
                                  {"versions": versions.get(node, {})}, " ".join(dict.fromkeys(f for _, _, f, _ in items)),
                                  node=node, action=graded(ACTIONS, *(p for *_, p in items))))
    status = worst([s for s, _, _ in summary_parts] + [f.status for f in blamed])
    details = {"versions": versions}
    if status is Status.PASS:
        return [passed(_agreed_text(versions, backends.groups(ctx.nodes)), **details)]
    text = "; ".join([t for _, t, _ in summary_parts] + [f.summary for f in blamed])
    fix = "Install the same versions on every node, from one row of the compatibility table (preflight/data/compat.yaml)."
    problems = [p for _, _, p in summary_parts] + [p for items in per_node.values() for *_, p in items]
    return [Finding(status, text, details, fix, action=graded(ACTIONS, *problems))] + blamed


def _agreed_text(versions: Mapping[str, Mapping[str, str]], groups: Mapping[str, list[str]] | None = None) -> str:
    if not versions:
        return "no node reported versions"
    groups = {b: [n for n in members if n in versions] for b, members in (groups or {"": list(versions)}).items()}
    groups = {b: m for b, m in groups.items() if m}
    parts = []
    for backend, members in groups.items():
        first = versions[members[0]]
        shown = ", ".join(f"{FIELDS[k][0]} {v}" for k, v in first.items() if v and v != ABSENT)
        label = f"{backends.NAMES.get(backend, backend)} " if len(groups) > 1 else ""
        parts.append(f"identical on {len(members)} {label}nodes: {shown}")
    return "; ".join(parts)
