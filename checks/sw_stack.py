"""sw.stack: the job's Megatron-LM tree and the installed MindSpeed are a pair MindSpeed supports, and the adaptor loads.

What it checks on every node, in the launch environment with the inventory's `python`, when the
inventory's `job:` has `megatron_path` (the Megatron-LM source tree the job puts on its path):
- Megatron's version from `megatron/core/package_info.py` (MAJOR, MINOR, PATCH, PRE_RELEASE) and,
  when the tree is a git checkout, its branch or tag (`core_r0.8.0`, `core_v0.12.1`); a branch that
  names another version than package_info.py warns;
- the installed MindSpeed (`mindspeed` package: its git branch when it is a checkout, else its
  version) and the Megatron core line it is made for, from MindSpeed's own version table
  (`preflight/data/mindspeed.yaml`): another Megatron version fails, a MindSpeed the table does
  not list warns;
- `import mindspeed.megatron_adaptor` succeeds (with `megatron_path` first on sys.path): its
  error line fails the node;
- when `job.entry` names the training script, an Ascend node warns if the script does not import
  `mindspeed.megatron_adaptor` (MindSpeed README, 快速上手: the one line that enables it).
NVIDIA nodes check only the Megatron tree.

Why it matters: MindSpeed patches Megatron's functions by name at import; a branch made for another
Megatron release fails with an AttributeError or ImportError deep in the patching, or silently
trains without the patches (docs/MIGRATION.md §3: "Megatron-LM core_r0.10.0 with MindSpeed
core_r0.10.0 (the branches must match)"). Without the adaptor import the script runs Megatron's
CUDA code paths on an NPU.

How to fix: check out the Megatron-LM branch of MindSpeed's table row (`git -C MEGATRON checkout
core_r0.8.0`), or install the MindSpeed branch made for your Megatron (`git clone -b
2.0.0_core_r0.8.0 https://gitee.com/ascend/MindSpeed.git && pip install -e MindSpeed`); add
`import mindspeed.megatron_adaptor` after `import torch` in the training script.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import yaml

import preflight
from preflight import launchenv
from preflight.checkapi import Policy, ClusterContext, CommandOutput, Finding, Probe, Status, cmd, passed, sh, skipped
from preflight.checkhelpers import graded, first_line, worst, q

ID = "sw.stack"
SCOPE = "cluster"
# On a node with a container: inside it. The Megatron tree, MindSpeed and the entry script the job
# imports are the image's (or its mounts'), the host's copies are not what the job loads.
POLICY = Policy(where="job")
# What to do with a fail/warn (preflight/actions.py): the installed stack is configuration.
ACTIONS = {
    "unknown_pairing": ("monitor", "an unknown pairing: not known bad"),
    "": ("fix_config", "MindSpeed / Megatron-LM / torch_npu versions or the job's entry (docs/MIGRATION.md §7)"),
}
DEFAULTS: dict[str, Any] = {"import_timeout": 120}
TABLE_PATH = Path(preflight.__file__).resolve().parent / "data" / "mindspeed.yaml"
PROBE, MARK = "sw_stack", "@@sw-stack "
ADAPTOR = "mindspeed.megatron_adaptor"

# Runs on the node's own python 3: reads files and asks git, imports the adaptor last.
SCRIPT = r'''
import json, os, re, subprocess, sys
M, E = sys.argv[1], sys.argv[2]
out = {}
def git(d):
    info = {}
    for key, args in (("branch", ["rev-parse", "--abbrev-ref", "HEAD"]), ("tag", ["describe", "--tags", "--exact-match"])):
        try:
            r = subprocess.run(["git", "-C", d] + args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=10)
            if r.returncode == 0:
                info[key] = r.stdout.decode(errors="replace").strip()
        except Exception:
            pass
    return info
try:
    with open(os.path.join(M, "megatron", "core", "package_info.py"), errors="replace") as f:
        out["package_info"] = f.read(8192)
except OSError as e:
    out["package_info_error"] = "%s: %s" % (os.path.join(M, "megatron", "core", "package_info.py"), e.strerror)
out["megatron_git"] = git(M)
try:
    import importlib.util
    spec = importlib.util.find_spec("mindspeed")
except Exception as e:
    spec, out["mindspeed_error"] = None, "%s: %s" % (type(e).__name__, e)
if spec is not None and spec.origin:
    d = os.path.dirname(spec.origin)
    out["mindspeed_path"] = d
    out["mindspeed_git"] = git(os.path.dirname(d))
    try:
        from importlib import metadata
        out["mindspeed_version"] = metadata.version("mindspeed")
    except Exception:
        pass
if E:
    try:
        with open(E, errors="replace") as f:
            text = f.read(1 << 20)
        out["entry_imports_adaptor"] = bool(re.search(r"^\s*(import\s+mindspeed\.megatron_adaptor|from\s+mindspeed\s+import\s+megatron_adaptor)", text, re.M))
    except OSError as e:
        out["entry_error"] = "%s: %s" % (E, e.strerror)
sys.stdout.flush()
if spec is not None:
    sys.path.insert(0, M)
    try:
        import mindspeed.megatron_adaptor
        out["adaptor"] = "ok"
    except BaseException as e:
        out["adaptor"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
print("@@sw-stack " + json.dumps(out))
'''


@dataclass(frozen=True)
class Stack:
    """One node's answer."""

    megatron: str | None  # "0.8.0" from package_info.py
    megatron_label: str  # "0.13.0rc2", for messages
    megatron_branch: str | None
    megatron_error: str | None
    mindspeed_ref: str | None  # branch name, or None
    mindspeed_version: str | None
    adaptor: str | None  # "ok", the error line, or None (MindSpeed not installed)
    entry_imports_adaptor: bool | None
    entry_error: str | None
    python_error: str | None = None


def plan(ctx: ClusterContext) -> dict[str, dict[str, Probe]]:
    job = ctx.job or {}
    if not job.get("megatron_path"):
        return {}
    timeout = float(ctx.params.get("import_timeout", 120))
    return {name: {PROBE: cmd(launchenv.command(node, sh("{py} -c {src} {tree} {entry}", py=node.python, src=SCRIPT,
                                                            tree=job["megatron_path"], entry=job.get("entry", ""))),
                              timeout=timeout + 10)}
            for name, node in ctx.nodes.items()}


VERSION_RE = {k: re.compile(rf"^{k}\s*=\s*(?:'([^']*)'|\"([^\"]*)\"|(\d+))", re.M)
              for k in ("MAJOR", "MINOR", "PATCH", "PRE_RELEASE")}
BRANCH_RE = re.compile(r"core_[rv](\d+\.\d+\.\d+)")


def package_version(text: str) -> tuple[str, str] | None:
    """megatron/core/package_info.py -> ("0.13.0", "0.13.0rc2"), read as text, never executed."""
    parts = {}
    for key, rx in VERSION_RE.items():
        m = rx.search(text)
        if m:
            parts[key] = next(g for g in m.groups() if g is not None)
    if not all(k in parts for k in ("MAJOR", "MINOR", "PATCH")):
        return None
    short = f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"
    return short, short + parts.get("PRE_RELEASE", "")


def parse_output(out: CommandOutput) -> Stack:
    if out.rc != 0 or MARK not in out.stdout:
        why = first_line(out.stderr.splitlines()[-1] if out.stderr.strip() else "") or out.error or f"rc {out.rc}"
        return Stack(None, "", None, None, None, None, None, None, None, python_error=why)
    doc = json.loads(out.stdout.rsplit(MARK, 1)[1].splitlines()[0])
    ver = package_version(doc["package_info"]) if "package_info" in doc else None
    err = doc.get("package_info_error") or (None if ver else "megatron/core/package_info.py has no MAJOR/MINOR/PATCH")
    mg = doc.get("megatron_git", {})
    ms = doc.get("mindspeed_git", {})
    ref = ms.get("branch") if ms.get("branch") not in (None, "HEAD") else ms.get("tag")
    return Stack(ver[0] if ver else None, ver[1] if ver else "", mg.get("branch") if mg.get("branch") != "HEAD" else mg.get("tag"),
                 err, ref, doc.get("mindspeed_version"), doc.get("adaptor"), doc.get("entry_imports_adaptor"),
                 doc.get("entry_error"))


@lru_cache(maxsize=2)
def load_table(path: str = str(TABLE_PATH)) -> dict[str, Any]:
    return yaml.safe_load(Path(path).read_text())


def made_for(stack: Stack, table: Mapping[str, Any]) -> tuple[str | None, str]:
    """The Megatron core version the installed MindSpeed is made for, and how that was read."""
    rows = table["rows"]
    if stack.mindspeed_ref:
        row = next((r for r in rows if r["mindspeed"] == stack.mindspeed_ref), None)
        if row:
            return str(row["megatron_core"]), f"MindSpeed {stack.mindspeed_ref}"
        m = BRANCH_RE.search(stack.mindspeed_ref)
        return (m.group(1) if m else None), f"MindSpeed branch {stack.mindspeed_ref} (not in MindSpeed's table)"
    if stack.mindspeed_version:
        line = re.match(r"\d+\.\d+\.\d+", stack.mindspeed_version)
        core = line.group(0) if line else None
        known = any(str(r["megatron_core"]) == core for r in rows)
        return core, f"MindSpeed {stack.mindspeed_version}" + ("" if known else " (not in MindSpeed's table)")
    return None, "MindSpeed version unknown"


def _problems(name: str, node, s: Stack, job: Mapping[str, Any], table) -> list[tuple[Status, str, str, str | None]]:
    """(status, problem, fix, problem in ACTIONS or None) for one node's stack."""
    mpath = job["megatron_path"]
    if s.python_error:
        return [(Status.FAIL, f"{node.python} could not run in the launch environment: {s.python_error}",
                 f"install python3 on {name} or fix the inventory's python", None)]
    out: list[tuple[Status, str, str, str | None]] = []
    if s.megatron_error:
        out.append((Status.FAIL, f"Megatron-LM tree unreadable: {s.megatron_error}",
                    "point job.megatron_path at the Megatron-LM checkout (it holds megatron/core/package_info.py)", None))
    elif s.megatron_branch and (m := BRANCH_RE.search(s.megatron_branch)) and m.group(1) != s.megatron:
        out.append((Status.WARN, f"Megatron-LM branch {s.megatron_branch} but package_info.py says {s.megatron_label}",
                    f"check out one release in {mpath} (`git -C {q(mpath)} status`)", None))
    if getattr(node, "backend", "auto") == "nvidia":
        return out
    if s.adaptor is None:
        return out + [(Status.FAIL, "mindspeed is not installed for the job's python",
                       "install MindSpeed: `git clone -b <branch> https://gitee.com/ascend/MindSpeed.git && pip install -e MindSpeed`", None)]
    core, how = made_for(s, table)
    if core and s.megatron and core != s.megatron:
        rows = [r for r in table["rows"] if str(r["megatron_core"]) == s.megatron]
        row = next((r for r in rows if r["mindspeed"] != "master"), rows[0] if rows else None)  # a release first
        out.append((Status.FAIL, f"{how} is made for Megatron core {core}, {mpath} is {s.megatron_label}"
                    + (f" (branch {s.megatron_branch})" if s.megatron_branch else ""),
                    f"check out Megatron-LM core_r{core} in {mpath}" +
                    (f", or install MindSpeed {row['mindspeed']} (made for {s.megatron})" if row else ""), None))
    elif "not in MindSpeed's table" in how or core is None:
        out.append((Status.WARN, f"{how}: no Megatron pairing known for it", "use a MindSpeed branch from its version table",
                    "unknown_pairing"))
    if s.adaptor != "ok":
        out.append((Status.FAIL, f"import {ADAPTOR} fails: {s.adaptor}",
                    "fix the MindSpeed install (its requirements, torch_npu) until `python -c 'import mindspeed.megatron_adaptor'` works", None))
    if s.entry_error:
        out.append((Status.FAIL, f"training script unreadable: {s.entry_error}", "fix job.entry", None))
    elif s.entry_imports_adaptor is False:
        out.append((Status.WARN, f"{job['entry']} does not import {ADAPTOR}: it would run without MindSpeed",
                    f"add `import {ADAPTOR}` after `import torch` in {job['entry']}", None))
    return out


def evaluate(ctx: ClusterContext) -> list[Finding]:
    job = ctx.job or {}
    if not job.get("megatron_path"):
        return [skipped("no job.megatron_path in the inventory: no Megatron tree to pair")]
    table = load_table()
    blamed, seen, named = [], {}, {}  # named: node -> its problems in ACTIONS
    for name in sorted(ctx.nodes):
        out = ctx.planned.get(name, {}).get(PROBE)
        if out is None or out.timed_out or out.error:
            why = "timed out" if out is not None and out.timed_out else (out.error if out else "probe not run")
            blamed.append(Finding(Status.ERROR, f"{name}: could not read the software stack: {why}", node=name))
            continue
        try:
            s = parse_output(out)
        except (ValueError, KeyError) as exc:
            blamed.append(Finding(Status.ERROR, f"{name}: unreadable answer: {exc}", {"output": out.stdout[-500:]}, node=name))
            continue
        seen[name] = s
        probs = _problems(name, ctx.nodes[name], s, job, table)
        if probs:
            st = worst(p[0] for p in probs)
            blamed.append(Finding(st, f"{name}: " + "; ".join(m for _, m, _, _ in probs), {"megatron": s.megatron_label,
                                  "mindspeed": s.mindspeed_ref or s.mindspeed_version},
                                  " ".join(dict.fromkeys(r for _, _, r, _ in probs)), node=name,
                                  action=graded(ACTIONS, *(p for *_, p in probs))))
            named[name] = [p for *_, p in probs]
    pairs = sorted({(s.megatron_label, s.mindspeed_ref or s.mindspeed_version or "-") for s in seen.values()})
    details = {"pairs": [{"megatron": m, "mindspeed": ms} for m, ms in pairs], "reference": table["reference"]["title"]}
    if not blamed:
        m, ms = pairs[0] if len(pairs) == 1 else ("several", "several")
        return [passed(f"Megatron-LM {m} with MindSpeed {ms} on {len(seen)} nodes: a pair in MindSpeed's table; "
                       f"{ADAPTOR} imports", **details)]
    status = worst(f.status for f in blamed)
    texts = [f.summary for f in blamed]
    fixes = [f.remediation for f in blamed if f.remediation]
    same = {f.summary.split(": ", 1)[1] for f in blamed} if blamed else set()
    head = (f"{len(blamed)} nodes: {next(iter(same))}" if len(same) == 1 and len(blamed) > 1
            else "; ".join(texts[:4]) + (f" (+{len(texts) - 4} more)" if len(texts) > 4 else ""))
    shown = blamed if len(same) == 1 and len(blamed) > 1 else blamed[:4]  # the findings the head names
    return [Finding(status, head, details, " ".join(dict.fromkeys(fixes)) or "see the per-node results",
                    action=graded(ACTIONS, *(p for f in shown for p in named.get(f.node, ()))))] + blamed
