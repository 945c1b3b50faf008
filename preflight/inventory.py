"""Inventory YAML -> validated `Node`s, with file:line in every error (docs/SPEC.md §2 "Inventory").

Two shapes are read: preflight's own (cluster/defaults/checks/nodes/job) and Ansible's YAML
inventory (all/children/hosts/vars). YAML 1.1 silently turns `22:22` into 1342, `8.10` into 8.1
and `no` into False; such plain scalars are refused with a request to quote them.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from . import inventory_ansible, inventory_ini, inventory_ranktable, nodeset, redact, sshinclude
from .container import RUNTIMES, Container
from .errors import InventoryError, read_text  # InventoryError defined there so config.py needs no YAML
from .node import JumpHop, Node, parse_jump

if TYPE_CHECKING:
    import paramiko


# key -> (accepted types, Node field it fills). Mappings merge key by key; scalars/lists replace.
NODE_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "host": ((str,), "host"),
    "port": ((int,), "port"),
    "user": ((str,), "user"),
    "identity_file": ((str,), "identity_file"),
    "known_hosts": ((str,), "known_hosts"),
    "host_key_policy": ((str,), "host_key_policy"),
    "connect_timeout": ((int, float), "connect_timeout"),
    "banner_timeout": ((int, float), "banner_timeout"),
    "auth_timeout": ((int, float), "auth_timeout"),
    "probe_timeout": ((int, float), "probe_timeout"),
    "proxy_jump": ((str,), "proxy_jump"),
    "become": ((str,), "become"),
    "become_user": ((str,), "become_user"),
    "container": ((dict,), "container"),
    "backend": ((str,), "backend"),
    "devices": ((int,), "devices"),
    "ascend_home": ((str,), "ascend_home"),
    "env": ((dict,), "env"),
    "env_files": ((list,), "env_files"),
    "paths": ((dict,), "paths"),
    "python": ((str,), "python"),
    "launch_shell": ((str,), "launch_shell"),
    "checks": ((dict,), "params"),
}
CHOICES = {
    "host_key_policy": ("strict", "accept-new", "off"),
    "backend": ("ascend", "nvidia", "auto"),
    "launch_shell": ("exec", "login"),
    "become": ("sudo", "none"),
}
TOP_KEYS = {"cluster", "defaults", "checks", "nodes", "job"}
PATH_KEYS = {"data", "checkpoint"}
# job: key -> kind. "int": a positive integer; "path": an absolute path string; "hccl": a mapping of
# HCCL_* variable names to scalar values (the HCCL settings `preflight env` writes, values checked there).
JOB_KEYS: dict[str, str] = {
    **{k: "int" for k in ("nnodes", "nproc_per_node", "tp", "pp", "cp", "ep", "etp", "num_layers",
                          "num_attention_heads", "num_experts", "micro_batch", "global_batch", "seq_length",
                          "master_port")},
    **{k: "path" for k in ("load", "save", "megatron_path", "entry")},
    "hccl": "hccl",
}
ANSIBLE_VARS = {"ansible_host": "host", "ansible_port": "port", "ansible_user": "user",
                "ansible_ssh_private_key_file": "identity_file", "ansible_ssh_host": "host",
                "ansible_ssh_port": "port", "ansible_ssh_user": "user", "ansible_become_user": "become_user"}
# Ansible's become: a boolean switch and a method; preflight supports the sudo method only.
ANSIBLE_BECOME, ANSIBLE_BECOME_METHOD = "ansible_become", "ansible_become_method"
USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*\$?$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")
HOST_RE = re.compile(r"^[A-Za-z0-9._:%\-]+$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Values with a grammar, refused at load when they do not fit it (probes quote every value anyway;
# this catches the typo, and the value that could only be an attack, before any node is reached).
# An interface name as Linux accepts it (dev_valid_name: 1-15 bytes, no '/', ':' or white space),
# narrowed to the characters real names use; the *_SOCKET_IFNAME syntax around it is docs/ENV.md's.
IFNAME_RE = re.compile(r"[A-Za-z0-9_.@+-]{1,15}")
IFNAME_VARS = {"HCCL_SOCKET_IFNAME": r"\^?=?", "NCCL_SOCKET_IFNAME": r"\^?=?", "GLOO_SOCKET_IFNAME": ""}
COMMAND_RE = re.compile(r"[A-Za-z0-9_.+][A-Za-z0-9_.+-]*")  # a bare command name, found on PATH
PATH_FIELDS = ("ascend_home",)  # node keys that are absolute paths on the node
# C0, DEL, C1 (0x9b is an 8-bit CSI) and the bidi embeddings/overrides/isolates (text that reads
# otherwise than it runs): refused in every inventory value, as node text is escaped on output
CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@dataclass(frozen=True)
class Inventory:
    path: str
    sha256: str
    nodes: tuple[Node, ...]
    cluster: str | None = None
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    job: dict[str, Any] | None = None
    fmt: str = "preflight"  # preflight | ansible-yaml | ansible-ini | rank-table
    # node name -> [(node key, variable, line)]: which Ansible variables set what (inventory show);
    # key NOT_USED: a variable preflight does not use, with why, in place of the variable's name
    origins: dict[str, list[tuple[str, str, int]]] = field(default_factory=dict)


NOT_USED = "-"


# ---------------------------------------------------------------- YAML with line numbers

class _Map(dict):
    """A dict that remembers the line of each key (1-based) and of itself."""

    line: int = 0
    lines: dict[str, int]
    traps: dict[str, str]  # key -> YAML 1.1 coercion message, raised only if preflight reads the key


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe loading; libyaml's scanner and parser where PyYAML has them (a 1,000-node inventory
    loads in a fraction of the pure-Python time), with the same node marks for line numbers."""


_TRAPS = (
    ("tag:yaml.org,2002:bool", lambda v: v.lower() not in ("true", "false"),
     "YAML 1.1 reads {v!r} as a boolean"),
    ("tag:yaml.org,2002:int", lambda v: ":" in v, "YAML 1.1 reads {v!r} as a base-60 number"),
    ("tag:yaml.org,2002:int", lambda v: re.fullmatch(r"[-+]?0[0-7_]+", v) is not None,
     "YAML 1.1 reads {v!r} as an octal number"),
    ("tag:yaml.org,2002:float", lambda v: ":" in v or re.fullmatch(r"[-+]?\d+\.\d*[1-9]\d*0", v) is not None,
     "YAML 1.1 reads {v!r} as the number {n}"),
    # PyYAML's YAML 1.1 int resolver also takes 0x.., 0b.. and digit groups with `_` (1_000)
    ("tag:yaml.org,2002:int", lambda v: re.fullmatch(r"[-+]?0x[0-9a-fA-F_]+", v) is not None,
     "YAML 1.1 reads {v!r} as the hexadecimal number {n}"),
    ("tag:yaml.org,2002:int", lambda v: re.fullmatch(r"[-+]?0b[01_]+", v) is not None,
     "YAML 1.1 reads {v!r} as the binary number {n}"),
    ("tag:yaml.org,2002:int", lambda v: "_" in v, "YAML 1.1 drops the underscores of {v!r} and reads {n}"),
    ("tag:yaml.org,2002:float", lambda v: "_" in v, "YAML 1.1 drops the underscores of {v!r} and reads {n}"),
)


class _Trap(yaml.MarkedYAMLError):
    pass


def _trap(node: yaml.ScalarNode, secret: bool = False) -> str | None:
    """The coercion a plain scalar suffers under YAML 1.1, in words, or None. The value of a
    secret-named key is not repeated (preflight.redact)."""
    if node.style:  # quoted: the user said what they meant (plain: None in PyYAML, "" in libyaml)
        return None
    for tag, hit, msg in _TRAPS:
        if node.tag == tag and hit(node.value):
            v, n = (redact.REDACTED, redact.REDACTED) if secret else (node.value, yaml.safe_load(node.value))
            return (msg.format(v=v, n=n) + "; write the number you mean, or quote it if it is text: "
                    f"\"{v}\"").replace("'" + redact.REDACTED + "'", "the value")


def _check_trap(node: yaml.ScalarNode, key: str = "") -> None:
    found = _trap(node)
    if found:
        raise _Trap(None, None, (f"{key}: " if key else "") + found, node.start_mark)


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> _Map:
    loader.flatten_mapping(node)
    out = _Map()
    out.line = node.start_mark.line + 1
    out.lines, out.traps = {}, {}
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode):
            _check_trap(key_node)
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float, bool)) or key is None:
            raise _Trap(None, None, f"unsupported mapping key {key!r}", key_node.start_mark)
        key = str(key)
        trap = _trap(value_node, redact.is_secret(key)) if isinstance(value_node, yaml.ScalarNode) else None
        if key in out:
            raise _Trap(None, None, f"duplicate key {key!r}", key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = key_node.start_mark.line + 1
        if trap:
            out.traps[key] = trap
    return out


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> list:
    for item in node.value:
        if isinstance(item, yaml.ScalarNode):
            _check_trap(item)
    return [loader.construct_object(item, deep=True) for item in node.value]


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


# An inventory is at most a few thousand nodes of a few dozen keys: a document whose aliases expand
# to more YAML nodes than this is an alias bomb (847 bytes of `&a [*b, *b, ...]` grow exponentially).
MAX_YAML_NODES = 1_000_000


def _load_yaml(path: Path, text: str) -> Any:
    loader = _Loader(text)
    try:
        root = loader.get_single_node()  # composing is linear: an alias is one shared node here
        if root is None:
            return None
        _bound_aliases(path, root)
        return loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = exc.problem or exc.context or "invalid YAML"
        raise InventoryError(f"{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise InventoryError(f"{path}: invalid YAML: {exc}") from None
    finally:
        loader.dispose()


def _bound_aliases(path: Path, root: yaml.Node) -> None:
    """Refuse a document whose aliases expand past MAX_YAML_NODES, counted over the shared node
    graph in linear time (each node's expanded size once), before anything walks the expansion."""
    size: dict[int, int] = {}
    visiting: set[int] = set()  # on the current path: a recursive alias counts as one value
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        kids = ([k for pair in node.value for k in pair] if isinstance(node, yaml.MappingNode) else
                list(node.value) if isinstance(node, yaml.SequenceNode) else [])
        if children_done:
            size[id(node)] = total = 1 + sum(size.get(id(k), 1) for k in kids)
            if total > MAX_YAML_NODES:
                raise InventoryError(f"{path}:{node.start_mark.line + 1}: YAML aliases here expand to more than "
                                     f"{MAX_YAML_NODES:,} values (an alias bomb?); refusing to expand them")
            continue
        if id(node) in size or id(node) in visiting:
            continue
        visiting.add(id(node))
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in size and id(k) not in visiting)


# ---------------------------------------------------------------- validation

class _Ctx:
    def __init__(self, path: Path):
        self.path = path

    def fail(self, mapping: Any, key: str | None, message: str) -> InventoryError:
        line = None
        if isinstance(mapping, _Map):
            line = mapping.lines.get(key, mapping.line) if key else mapping.line
        where = f"{self.path}:{line}" if line else str(self.path)
        shown = getattr(mapping, "names", {}).get(key, key)  # an Ansible variable's own name (ansible_host)
        return InventoryError(f"{where}: {shown + ': ' if shown else ''}{message}")


def _check_settings(ctx: _Ctx, m: _Map, where: str, allowed: set[str] | None = None) -> dict[str, Any]:
    """Validate node-level keys of one mapping (defaults, a node entry, Ansible vars)."""
    out: dict[str, Any] = {}
    for key, value in m.items():
        _raise_trap(ctx, m, key)
        if allowed is not None and key in allowed:
            continue
        if key not in NODE_KEYS:
            close = _closest(key, list(NODE_KEYS) + sorted(allowed or ()))
            hint = f" (did you mean {close!r}?)" if close else f" (known keys: {', '.join(sorted(NODE_KEYS))})"
            raise ctx.fail(m, key, f"unknown key in {where}{hint}")
        types, _ = NODE_KEYS[key]
        if isinstance(value, bool) or not isinstance(value, types):
            raise ctx.fail(m, key, f"expected {' or '.join(t.__name__ for t in types)}, got "
                                   f"{type(value).__name__} {redact.value(key, repr(value))}")
        if key in CHOICES and value not in CHOICES[key]:
            raise ctx.fail(m, key, f"{value!r} is not one of {', '.join(CHOICES[key])}")
        out[key] = _check_value(ctx, m, key, value)
    return out


def _raise_trap(ctx: _Ctx, m: Any, key: str) -> None:
    if isinstance(m, _Map) and key in m.traps:
        raise ctx.fail(m, key, m.traps[key])


def _raise_traps_deep(ctx: _Ctx, m: Any) -> None:
    if isinstance(m, _Map):
        for k, v in m.items():
            _raise_trap(ctx, m, k)
            _raise_traps_deep(ctx, v)


def _path_problem(value: str) -> str | None:
    """Why `value` is not an absolute path, or None."""
    if CONTROL_RE.search(value):
        return f"{_shown(value)} holds a control character (a newline?); expected an absolute path"
    if not value.startswith("/"):
        return f"{_shown(value)} is not an absolute path; write it from /"
    return None


def _shown(value: str) -> str:
    return repr(value if len(value) <= 80 else value[:77] + "...")


def _ifname_problem(var: str, value: str) -> str | None:
    """Why an *_SOCKET_IFNAME value does not fit its syntax (a comma list of interface names)."""
    m = re.fullmatch(IFNAME_VARS[var] + r"(.*)", value.strip())
    names = m.group(1).split(",") if m else []
    bad = [n for n in names if not IFNAME_RE.fullmatch(n.strip())]
    if not names or bad:
        return (f"{_shown(value)} is not a list of interface names ({_shown(bad[0]) if bad else 'empty'}: "
                f"names are 1-15 of A-Z a-z 0-9 _ . @ + -), e.g. eth0 or ^docker,lo")
    return None


def _check_value(ctx: _Ctx, m: _Map, key: str, value: Any) -> Any:
    if isinstance(value, str) and CONTROL_RE.search(value):  # a newline here would end a line of any file it reaches
        raise ctx.fail(m, key, f"{_shown(value)} holds a control character (a newline?)")
    if key in ("env", "paths", "checks"):
        _raise_traps_deep(ctx, value)
    if key == "env":
        for k, v in value.items():
            if not ENV_NAME_RE.fullmatch(k):
                raise ctx.fail(value, k, "not a valid environment variable name")
            if isinstance(v, (dict, list)) or v is None:
                raise ctx.fail(value, k, f"environment values are strings, got {redact.value(k, repr(v))}")
            if k in IFNAME_VARS and isinstance(v, str) and (why := _ifname_problem(k, v)):
                raise ctx.fail(value, k, why)
        return {k: ("true" if v is True else "false" if v is False else str(v)) for k, v in value.items()}
    if key == "env_files":
        if not all(isinstance(f, str) for f in value):
            raise ctx.fail(m, key, "expected a list of file paths (strings)")
        for f in value:
            if why := _path_problem(f):
                raise ctx.fail(m, key, why)
        return tuple(value)
    if key == "paths":
        for k, v in value.items():
            if k not in PATH_KEYS:
                raise ctx.fail(value, k, f"unknown path kind (known: {', '.join(sorted(PATH_KEYS))})")
            ok = isinstance(v, str) or (k == "data" and isinstance(v, list) and all(isinstance(p, str) for p in v))
            if not ok:
                raise ctx.fail(value, k, "expected a path string" + (" or a list of them" if k == "data" else ""))
            for p in [v] if isinstance(v, str) else v:
                if why := _path_problem(p):
                    raise ctx.fail(value, k, why)
        return dict(value)
    if key in PATH_FIELDS and (why := _path_problem(value)):
        raise ctx.fail(m, key, why)
    if key == "python" and not (value.startswith("/") and not _path_problem(value)) and not COMMAND_RE.fullmatch(value):
        raise ctx.fail(m, key, f"{_shown(value)} is neither an absolute interpreter path nor a bare command "
                               "name (python3); arguments and shell text do not belong here")
    if key == "checks":
        for k, v in value.items():
            if not isinstance(v, dict):
                raise ctx.fail(value, k, "check parameters must be a mapping")
        _check_param_types(ctx, value)
        return {k: dict(v) for k, v in value.items()}
    if key in ("port", "devices") and not (0 < value < (65536 if key == "port" else 4097)):
        raise ctx.fail(m, key, f"{value} is out of range")
    if key == "container":
        return _container(ctx, m, value)
    if key == "become_user" and not USER_RE.fullmatch(value):
        raise ctx.fail(m, key, f"{value!r} is not a user name")
    if key == "proxy_jump":
        try:
            parse_jump(value)
        except ValueError as exc:
            raise ctx.fail(m, key, str(exc)) from None
    if key == "host" and not HOST_RE.fullmatch(value.replace("[", "").replace("]", "").replace(",", "")):
        raise ctx.fail(m, key, f"{value!r} is not a host name or address")
    return value


CONTAINER_KEYS = {"runtime", "name", "image", "run_args"}


def _container(ctx: _Ctx, m: _Map, value: Any) -> Container:
    """`container:` — runtime (docker | podman), and exactly one of name (a running container) or
    image (a fresh `run --rm` with run_args)."""
    _raise_traps_deep(ctx, value)
    for k in value:
        if k not in CONTAINER_KEYS:
            raise ctx.fail(value, k, f"unknown container key (known: {', '.join(sorted(CONTAINER_KEYS))})")
    runtime = value.get("runtime", "docker")
    if runtime not in RUNTIMES:
        raise ctx.fail(value, "runtime", f"{runtime!r} is not one of {', '.join(RUNTIMES)}")
    name, image = value.get("name"), value.get("image")
    if (name is None) == (image is None):
        raise ctx.fail(m, "container", "give exactly one of name (a running container to exec into) or image "
                                       "(a fresh run --rm of it), not " + ("both" if name else "neither"))
    for k in ("name", "image"):
        v = value.get(k)
        if v is not None and (not isinstance(v, str) or not v.strip() or v.startswith("-")):
            raise ctx.fail(value, k, f"expected a {k} (a string not starting with '-'), got {v!r}")
    args = value.get("run_args", [])
    if isinstance(args, str):
        import shlex
        args = shlex.split(args)
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ctx.fail(value, "run_args", "expected a list of arguments (strings) or one string")
    if args and name is not None:
        raise ctx.fail(value, "run_args", "run_args apply to image: (a fresh run); a named container already runs")
    return Container(runtime=runtime, name=name, image=image, run_args=tuple(args))


# A parameter's type is its default's (DEFAULTS of the check): an int default takes an integer, a
# float default any number, a None default anything. Unknown ids and keys are refused by
# registry.check_parameters (with a suggestion); this catches `min_free_gib: "lots"` at load, and an
# enumerated parameter's value outside its set (`mode: al`; checkapi.Choice in the check's DEFAULTS).
_PARAM_TYPES: dict[type, tuple[tuple[type, ...], str]] = {
    bool: ((bool,), "true or false"),
    int: ((int,), "an integer"),
    float: ((int, float), "a number"),
    str: ((str,), "a string"),
    list: ((list,), "a list"),
    dict: ((dict,), "a mapping"),
}


def _check_param_types(ctx: _Ctx, checks: Any) -> None:
    from .registry import discover  # the checks' DEFAULTS; imported here: loading needs no check otherwise

    every = discover()
    for cid, params in checks.items():
        info = every.get(cid)
        if info is None or not isinstance(params, dict):
            continue
        for key, v in params.items():
            if key not in info.defaults or type(info.defaults[key]) not in _PARAM_TYPES:
                continue
            default = info.defaults[key]
            types, words = _PARAM_TYPES[type(default)]
            if (isinstance(v, bool) and bool not in types) or not isinstance(v, types):
                raise ctx.fail(params, key, f"{cid} expects {words} (its default is {default!r}), got "
                                            f"{type(v).__name__} {redact.value(key, repr(v))}")
            allowed = info.choices.get(key)
            if allowed is not None and v not in allowed:  # an enumerated parameter (checkapi.Choice)
                raise ctx.fail(params, key, f"{cid} takes one of {', '.join(allowed)}, got {redact.value(key, repr(v))}")


def _closest(key: str, candidates: list[str]) -> str | None:
    import difflib

    found = difflib.get_close_matches(key, candidates, n=1, cutoff=0.7)
    return found[0] if found else None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Node over group over defaults: mappings merge key by key, scalars and lists replace."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            merged = dict(out[k])
            for kk, vv in v.items():
                merged[kk] = {**merged[kk], **vv} if k == "checks" and isinstance(merged.get(kk), dict) else vv
            out[k] = merged
        else:
            out[k] = v
    return out


# ---------------------------------------------------------------- the two shapes

def _native(ctx: _Ctx, doc: _Map) -> tuple[list[tuple[str, dict[str, Any], int]], dict[str, Any]]:
    for key in doc:
        if key not in TOP_KEYS:
            close = _closest(key, sorted(TOP_KEYS))
            raise ctx.fail(doc, key, "unknown top-level key" + (f" (did you mean {close!r}?)" if close else
                                                                  f" (known: {', '.join(sorted(TOP_KEYS))})"))
    defaults = doc.get("defaults") or _Map()
    if not isinstance(defaults, dict):
        raise ctx.fail(doc, "defaults", "expected a mapping")
    base = _check_settings(ctx, defaults, "defaults")
    nodes = doc.get("nodes")
    if not isinstance(nodes, list):
        raise ctx.fail(doc, "nodes", "expected a list of nodes" if "nodes" in doc else "missing (a list of nodes)")
    entries: list[tuple[str, dict[str, Any], int]] = []
    for entry in nodes:
        if not isinstance(entry, _Map):
            raise ctx.fail(doc, "nodes", f"each node is a mapping with name and host, got {entry!r}")
        if not isinstance(entry.get("name"), str):
            raise ctx.fail(entry, "name" if "name" in entry else None, "each node needs a name (string)")
        settings = _check_settings(ctx, entry, "a node entry", allowed={"name"})
        entries.extend(_expand(ctx, entry, entry["name"], _merge(base, settings)))
    top = {"cluster": doc.get("cluster"), "checks": doc.get("checks") or {}, "job": doc.get("job")}
    _check_top(ctx, doc, top)
    return entries, top


def _check_top(ctx: _Ctx, doc: _Map, top: dict[str, Any]) -> None:
    for key in ("cluster", "checks", "job"):
        _raise_trap(ctx, doc, key)
    _raise_traps_deep(ctx, top["checks"])
    _raise_traps_deep(ctx, top["job"])
    if top["cluster"] is not None and not isinstance(top["cluster"], str):
        raise ctx.fail(doc, "cluster", "expected a string")
    if top["cluster"] is not None and CONTROL_RE.search(top["cluster"]):
        raise ctx.fail(doc, "cluster", f"{_shown(top['cluster'])} holds a control character (a newline?)")
    if not isinstance(top["checks"], dict) or not all(isinstance(v, dict) for v in top["checks"].values()):
        raise ctx.fail(doc, "checks", "expected a mapping of check id to a mapping of parameters")
    _check_param_types(ctx, top["checks"])
    job = top["job"]
    if job is not None:
        if not isinstance(job, _Map):
            raise ctx.fail(doc, "job", "expected a mapping")
        for k, v in job.items():
            if k not in JOB_KEYS:
                close = _closest(k, sorted(JOB_KEYS))
                raise ctx.fail(job, k, "unknown job key" + (f" (did you mean {close!r}?)" if close else
                                                            f" (known: {', '.join(sorted(JOB_KEYS))})"))
            _check_job_value(ctx, job, k, v)


def _check_job_value(ctx: _Ctx, job: _Map, k: str, v: Any) -> None:
    kind = JOB_KEYS[k]
    if kind == "int" and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
        raise ctx.fail(job, k, f"expected a positive integer, got {v!r}")
    if kind == "path" and (not isinstance(v, str) or not v.startswith("/") or "\0" in v):
        raise ctx.fail(job, k, f"expected an absolute path (a string starting with /), got {v!r}")
    if kind == "hccl":
        if not isinstance(v, dict):
            raise ctx.fail(job, k, "expected a mapping of HCCL_* variable names to values")
        for name, val in v.items():
            if not name.startswith("HCCL_") or not ENV_NAME_RE.fullmatch(name):
                raise ctx.fail(v, name, "job.hccl holds HCCL_* variables only")
            if isinstance(val, (dict, list)) or val is None or isinstance(val, bool):
                raise ctx.fail(v, name, f"expected a number or a string, got {val!r}")


def _ansible(ctx: _Ctx, src: inventory_ansible.Source) -> tuple[list[tuple[str, dict[str, Any], int]],
                                                             dict[str, list[tuple[str, str, int]]]]:
    """Ansible's inventory (either format): each host's merged variables, the ones that mean a
    preflight setting validated like preflight's own keys, errors naming the variable itself."""
    entries: list[tuple[str, dict[str, Any], int]] = []
    origins: dict[str, list[tuple[str, str, int]]] = {}
    for host in inventory_ansible.resolve(src):
        got = inventory_ansible.settings(src, host, set(NODE_KEYS))
        m = _Map({k: s.value for k, s in got.items()})
        m.line, m.lines, m.traps = host.line, {k: s.line for k, s in got.items()}, {}
        m.names = {k: s.var for k, s in got.items()}  # type: ignore[attr-defined]
        settings = _check_settings(ctx, m, f"host {host.name}")
        entries.extend(_expand(ctx, m, host.name, settings, key=""))
        origins[host.name] = [(k, s.var, s.line) for k, s in got.items()]
        origins[host.name] += [(NOT_USED, f"{var}: {why}", line) for var, why, line in inventory_ansible.not_used(host)]
    return entries, origins


def _is_ipv6(name: str) -> bool:
    """An Ansible host may be named by its IPv6 address (fd00::1), colons and all."""
    import ipaddress

    try:
        return isinstance(ipaddress.ip_address(name), ipaddress.IPv6Address)
    except ValueError:
        return False


def _expand(ctx: _Ctx, m: _Map, pattern: str, settings: dict[str, Any], key: str = "name"):
    """Expand ranges in name and host together: node[02-04] with 10.0.0.[2-4]."""
    if CONTROL_RE.search(pattern):  # before expansion, which strips white space
        raise ctx.fail(m, key, f"{_shown(pattern)} holds a control character (a newline?); not a node name")
    try:
        names = nodeset.expand(pattern)
        hosts = nodeset.expand(settings["host"]) if "host" in settings else names
    except nodeset.RangeError as exc:
        raise ctx.fail(m, key, str(exc)) from None
    if len(hosts) == 1 and len(names) > 1 and "[" not in settings.get("host", "["):
        raise ctx.fail(m, key, f"{pattern} expands to {len(names)} nodes but host {hosts[0]!r} is one address")
    if len(hosts) != len(names):
        raise ctx.fail(m, key, f"{pattern} expands to {len(names)} names but its host to {len(hosts)}")
    line = m.lines.get(key, m.line) if isinstance(m, _Map) else 0
    for n in names:
        if not NAME_RE.fullmatch(n) and not _is_ipv6(n):
            raise ctx.fail(m, key, f"{n!r} is not a valid node name (letters, digits, . _ -)")
    return [(n, {**settings, "host": h}, line) for n, h in zip(names, hosts)]


# ---------------------------------------------------------------- ~/.ssh/config and nodes

# ssh_config StrictHostKeyChecking -> host_key_policy. `ask` would prompt: a batch run cannot, so it
# is strict (ssh in BatchMode does the same); `off` is OpenSSH's synonym of `no`.
STRICT_HOST_KEY_CHECKING = {"yes": "strict", "ask": "strict", "accept-new": "accept-new", "no": "off", "off": "off"}


@dataclass(frozen=True)
class _SSHConfig:
    """The ssh_config in force and the file it came from, named in every message about it."""

    path: str
    config: paramiko.SSHConfig

    def lookup(self, host: str) -> dict[str, Any]:
        return self.config.lookup(host)


def _ssh_config(path: str | None) -> _SSHConfig | None:
    p = Path(os.path.expanduser(path or "~/.ssh/config"))
    if not p.is_file():
        return None
    import paramiko  # here, not at import: commands that read no ssh config never load it (~0.1 s)

    text = sshinclude.expanded(str(p))  # paramiko skips Include; OpenSSH follows it
    try:
        return _SSHConfig(str(p), paramiko.SSHConfig.from_text(text))
    except Exception as exc:  # noqa: BLE001 - any parse problem is the user's file
        raise InventoryError(f"{p}: cannot read ssh config: {exc}") from None


def _jump_hops(spec: str, cfg: _SSHConfig | None, where: str) -> tuple[JumpHop, ...]:
    """Each hop of a ProxyJump resolved as OpenSSH resolves it: the hop's name looked up in the
    ssh_config in force (HostName, User, Port, IdentityFile); what the spec says itself wins."""
    try:
        hops = parse_jump(spec)
    except ValueError as exc:
        raise InventoryError(f"{where}: {exc}") from None
    if cfg is None:
        return hops
    out = []
    for hop in hops:
        found = cfg.lookup(hop.host)
        command = found.get("proxycommand")
        if command and str(command).lower() != "none" and not found.get("proxyjump"):
            raise InventoryError(f"{cfg.path}: ProxyCommand for jump host {hop.host} is not supported; "
                                 f"use ProxyJump there")
        port = hop.port if hop.port_given or not found.get("port") else int(found["port"])
        key = found.get("identityfile", [None])[0]
        out.append(JumpHop(hop.user or found.get("user"), found.get("hostname", hop.host), port,
                           port_given=True, identity_file=os.path.expanduser(key) if key else None))
    return tuple(out)


def _node(name: str, s: dict[str, Any], line: int, cfg: _SSHConfig | None, where: str) -> Node:
    """Inventory > ssh_config > built-in defaults (docs/SPEC.md §2.1)."""
    kw: dict[str, Any] = {NODE_KEYS[k][1]: v for k, v in s.items() if k != "host"}
    if kw.get("become") == "none":
        kw["become"] = None
    host = s["host"]
    if cfg is not None:
        found = cfg.lookup(host)
        if "user" not in kw and found.get("user"):
            kw["user"] = found["user"]
        if "port" not in kw and found.get("port"):
            kw["port"] = int(found["port"])
        if "identity_file" not in kw and found.get("identityfile"):
            kw["identity_file"] = found["identityfile"][0]
        jump = found.get("proxyjump")
        if "proxy_jump" not in kw and jump and jump.lower() != "none":  # `ProxyJump none`: no jump
            try:
                parse_jump(jump)
            except ValueError as exc:
                raise InventoryError(f"{cfg.path}: ProxyJump for {host}: {exc}") from None
            kw["proxy_jump"] = jump
        if "known_hosts" not in kw and found.get("userknownhostsfile"):
            kw["known_hosts"] = found["userknownhostsfile"].split()[0]
        policy = STRICT_HOST_KEY_CHECKING.get(str(found.get("stricthostkeychecking", "")).lower())
        if "host_key_policy" not in kw and policy:
            kw["host_key_policy"] = policy
        if str(found.get("identitiesonly", "")).lower() == "yes":
            kw["identities_only"] = True
        command = found.get("proxycommand")
        if command and str(command).lower() != "none" and "proxy_jump" not in kw:
            raise InventoryError(f"{cfg.path}: ProxyCommand for {host} is not supported; "
                                 f"use ProxyJump or set proxy_jump in the inventory")
        host = found.get("hostname", host)
    if kw.get("proxy_jump"):
        kw["jump_hops"] = _jump_hops(kw["proxy_jump"], cfg, where)
    for k in ("identity_file", "known_hosts"):
        if kw.get(k):
            kw[k] = os.path.expanduser(kw[k])
    return Node(name=name, host=host, source_line=line, **kw)


def _read(p: Path, text: str, ctx: _Ctx):
    """Which format the file is, from its content (Ansible tries YAML, then INI, whatever the file's
    name): -> (format, entries, top-level settings, origins)."""
    if inventory_ranktable.is_table_text(text):  # an HCCL rank table itself (hccl.json)
        return _rank_table(ctx, p, text, None)
    yaml_error: InventoryError | None = None
    try:
        doc = _load_yaml(p, text)
    except InventoryError as exc:
        if "alias bomb" in str(exc):
            raise
        doc, yaml_error = None, exc
    if isinstance(doc, _Map) and inventory_ranktable.names_table(doc):  # rank_table: hccl.json + defaults
        return _rank_table(ctx, p, text, doc)
    if isinstance(doc, _Map):
        groups_only = all(v is None or isinstance(v, dict) for v in doc.values())  # Ansible: every key a group
        if "nodes" in doc or ("all" not in doc and (not groups_only or any(k in TOP_KEYS for k in doc))):
            return ("preflight", *_native(ctx, doc), {})
        entries, origins = _ansible(ctx, inventory_ansible.from_yaml(str(p), doc))
        return "ansible-yaml", entries, _NO_TOP, origins
    if yaml_error is None and not text.strip():
        raise InventoryError(f"{p}: empty file; expected preflight's inventory (nodes:) or an Ansible inventory")
    try:
        src = inventory_ini.read(str(p), text)
    except InventoryError as ini_error:
        if yaml_error is None:
            shown = "a list" if isinstance(doc, list) else f"a {type(doc).__name__} ({_shown(str(doc))})"
            raise InventoryError(f"{p}: neither an inventory in YAML (it reads as {shown}, not a mapping with "
                                 f"nodes: or groups) nor in Ansible INI ({_after_path(p, ini_error)})") from None
        # lead with INI when the file opens with a [section], else with the reading that got further
        ini_first = _looks_ini(text) or _error_line(ini_error) > _error_line(yaml_error)
        first, second = (ini_error, yaml_error) if ini_first else (yaml_error, ini_error)
        label = "YAML" if first is yaml_error else "Ansible INI"
        other = "Ansible INI" if first is yaml_error else "YAML"
        raise InventoryError(f"{first} (read as {label}; as {other}: {_after_path(p, second)})") from None
    entries, origins = _ansible(ctx, src)
    return "ansible-ini", entries, _NO_TOP, origins


_NO_TOP: dict[str, Any] = {"cluster": None, "checks": {}, "job": None}


def _rank_table(ctx: _Ctx, p: Path, text: str, doc: _Map | None):
    """An HCCL rank table read as the nodes of a preflight inventory (preflight/inventory_ranktable.py)."""
    entries, top, _ = inventory_ranktable.read(ctx, p, text, doc, _mapping, _native)
    return inventory_ranktable.FORMAT, entries, top, {}


def _mapping(values: dict[str, Any], line: int) -> _Map:
    m = _Map(values)
    m.line, m.lines, m.traps = line, {k: line for k in values}, {}
    return m


def _looks_ini(text: str) -> bool:
    """The first line that is not blank or a comment is an INI [section] header."""
    for line in text.splitlines():
        line = line.strip()
        if line and line[0] not in "#;":
            return line.startswith("[") and line.endswith("]")
    return False


def _error_line(exc: InventoryError) -> int:
    m = re.match(r"^.*?:(\d+)(?::\d+)?: ", str(exc))
    return int(m.group(1)) if m else 0


def _after_path(p: Path, exc: InventoryError) -> str:
    """`file:12: reason` -> `line 12: reason` (the file is named once already)."""
    text = str(exc)
    rest = text[len(str(p)) + 1:] if text.startswith(f"{p}:") else text
    m = re.match(r"^(\d+)(?::\d+)?: (.*)$", rest)
    return f"line {m.group(1)}: {m.group(2)}" if m else rest.lstrip(" ")


def load(path: str | os.PathLike, limit: str | None = None, ssh_config: str | None = None) -> Inventory:
    """Read, validate and expand an inventory. Raises InventoryError (one line) on any problem."""
    p = Path(path)
    text = read_text(p, "inventory", InventoryError)
    ctx = _Ctx(p)
    fmt, entries, top, origins = _read(p, text, ctx)
    seen: dict[str, int] = {}
    for name, _, line in entries:
        if name in seen:
            raise InventoryError(f"{p}:{line}: duplicate node name {name!r} (first at line {seen[name]})")
        seen[name] = line
    if limit:
        try:
            keep = set(nodeset.select([e[0] for e in entries], limit))
        except nodeset.RangeError as exc:
            raise InventoryError(str(exc)) from None
        entries = [e for e in entries if e[0] in keep]
    if not entries:
        raise InventoryError(f"{p}: no nodes selected by --limit {limit}" if limit else
                             f"{p}: no nodes selected: the inventory lists no host (are its host lines commented out?)")
    cfg = _ssh_config(ssh_config)
    top_checks = {"checks": {k: dict(v) for k, v in top["checks"].items()}}
    nodes = tuple(_node(n, _merge(top_checks, s), line, cfg, f"{p}:{line}") for n, s, line in entries)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()  # the file's bytes (strict UTF-8 round-trips)
    return Inventory(path=str(p), sha256=digest, nodes=nodes,
                     cluster=top["cluster"], checks={k: dict(v) for k, v in top["checks"].items()},
                     job=dict(top["job"]) if top["job"] else None, fmt=fmt,
                     origins={n: o for n, o in origins.items() if n in {e[0] for e in entries}})
