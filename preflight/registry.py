"""Find the checks (every module of `preflight.checks` with an ID), read their policy, and select
them by id, prefix or policy.

Everything the core knows about a check comes from the module itself (checkapi's contract and its
POLICY, a checkapi.Policy): the gate's fast set, what the sweep does on a busy node, the default trend
metric, the privilege and cost of its probes. Selection is derived from the checks, never listed
beside them, so a new check module needs no edit anywhere else."""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from functools import lru_cache
from types import ModuleType
from typing import Any, Iterator, Mapping, NamedTuple

from .policy import FIELDS as POLICY_FIELDS
from .policy import ContractError, Policy

CONNECT_ID = "ssh.connect"
BACKEND_NAMES = {"ascend": "Ascend", "nvidia": "NVIDIA"}
WHERE_WORDS = {"host": "the host", "job": "the job's container where the node has one (container:), else the host"}


@dataclass(frozen=True)
class CheckInfo:
    """A discovered check: its identity and contract (module attributes) and its POLICY. The
    policy's fields read as the CheckInfo's own (`info.gate`, `info.plan_rounds`)."""

    id: str
    scope: str
    module: ModuleType
    requires: tuple[str, ...]
    uses: tuple[str, ...]
    defaults: dict[str, Any]
    policy: Policy = Policy()
    actions: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # the module's ACTIONS (preflight/actions.py)
    choices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # enumerated parameters: allowed values

    def __post_init__(self) -> None:
        # the policy's fields as the info's own attributes: the runner asks them about 100 times
        # a node, and a __getattr__ that forwards them cost 0.1 ms a node (bench/replay_cpu.py)
        for name in POLICY_FIELDS:
            object.__setattr__(self, name, getattr(self.policy, name))

    def applies_to(self, backend: str) -> bool:
        """Whether this check runs on a node of `backend` (ascend | nvidia)."""
        return self.backend is None or self.backend == backend

    def policy_text(self) -> str:
        """The policy as `preflight explain` prints it: one line a person can act on."""
        parts = [f"privilege: {self.privilege_words}", f"looks at: {WHERE_WORDS[self.where]}", f"cost: {self.cost}"]
        if self.gate:
            parts.append("in the gate's fast set")
        if self.disruptive:
            parts.append("disruptive (--sweep leaves busy nodes out)")
        if self.on_busy != "run":
            parts.append({"skip": f"skipped on a busy node in --sweep ({self.busy_reason})",
                          "report": "decides whether a node is busy (--sweep)"}[self.on_busy])
        if self.trend_metric:
            parts.append(f"trend metric: {self.trend_metric[0]}"
                         + (" (with --history, 3 sigma from its own baseline warns)" if self.baseline else ""))
        if self.backend:
            parts.append(f"{BACKEND_NAMES[self.backend]} nodes only")
        return "\nPolicy: " + "; ".join(parts) + "\n"

    @property
    def privilege_words(self) -> str:
        """What a login user needs for this check's probes, as explain and the docs say it."""
        if self.privilege != "root":
            return "user (no root needed)"
        group = f" or membership of the {self.privilege_group} group" if self.privilege_group else ""
        return f"root{group} (as a non-root login user: become: sudo with a NOPASSWD rule)"

    @property
    def doc(self) -> str:
        return (self.module.__doc__ or "").strip()

    @property
    def title(self) -> str:
        """The docstring's first line, without a leading `id:` / `id —` that repeats the id."""
        return _title(self.id, self.doc)

    def has(self, name: str) -> bool:
        return callable(getattr(self.module, name, None))


def _title(check_id: str, doc: str) -> str:
    para = doc.split("\n\n")[0] if doc else ""
    first = " ".join(line.strip() for line in para.splitlines())
    for sep in (":", " —", " -"):
        if first.startswith(check_id + sep):
            return first[len(check_id) + len(sep):].strip(" :—-")
    return first


def module_name(check_id: str) -> str:
    return check_id.replace(".", "_", 1)


def policy(module: ModuleType) -> Policy:
    """The module's POLICY (a checkapi.Policy, validated when it was made; Policy() without one)."""
    declared = getattr(module, "POLICY", Policy())
    if not isinstance(declared, Policy):
        raise ContractError(f"{module.__name__}: POLICY must be a checkapi.Policy(...), got {type(declared).__name__}")
    if declared.on_busy == "report" and not callable(getattr(module, "busy", None)):
        raise ContractError(f"{module.__name__}: Policy(on_busy='report') needs a busy(facts) function")
    return declared


def _actions(module: ModuleType) -> Mapping[str, tuple[str, str]]:
    from .actions import RuleError, table
    try:
        return table(getattr(module, "ACTIONS", {}), module.__name__)
    except RuleError as exc:
        raise ContractError(str(exc)) from None


# The module attributes the core reads (docs/writing-a-check.md, the contract page).
CONTRACT_NAMES = ("ID", "SCOPE", "DEFAULTS", "REQUIRES", "USES", "POLICY", "ACTIONS")


def refuse_misspelt_names(module: ModuleType) -> None:
    """ContractError for an upper-case module name the core would silently ignore: one of the
    loose constants POLICY replaced (`GATE = True`: Policy(gate=True)), or a near miss of a
    contract name (`POLICEY`, `USE`, `REQUIRE`: difflib, ratio 0.8 and above), which would leave
    the check's default in force without a word."""
    import difflib

    for name in vars(module):
        if not name.isupper() or name in CONTRACT_NAMES:
            continue
        if name.lower() in POLICY_FIELDS:
            raise ContractError(f"{module.__name__}: {name} is a Policy field now "
                                f"(POLICY = Policy({name.lower()}=...)); the core ignores it")
        near = difflib.get_close_matches(name, CONTRACT_NAMES, 1, 0.8)
        if near:
            raise ContractError(f"{module.__name__}: {name} is not a contract name; did you mean {near[0]}? "
                                f"(the core reads {', '.join(CONTRACT_NAMES)}; rename a constant of your own)")


def _info(m: ModuleType) -> CheckInfo:
    from .checkapi import Choice

    refuse_misspelt_names(m)
    declared = dict(getattr(m, "DEFAULTS", {}))
    return CheckInfo(id=m.ID, scope=getattr(m, "SCOPE", "node"), module=m,
                     requires=tuple(getattr(m, "REQUIRES", ())), uses=tuple(getattr(m, "USES", ())),
                     defaults={k: str(v) if isinstance(v, Choice) else v for k, v in declared.items()},
                     policy=policy(m), actions=_actions(m),
                     choices={k: v.allowed for k, v in declared.items() if isinstance(v, Choice)})


class _Checks(Mapping[str, CheckInfo]):
    """discover()'s answer when every check module could be read (_scan): all the ids, in order,
    known from the source; a check's module is imported, and its policy read, the first time its
    CheckInfo is asked for. Why: a command that runs a few checks (the gate: the 13 of its fast
    set) need not import the others (each check and its helpers' dataclasses are compiled at
    import, about 5 ms per check)."""

    def __init__(self, modules: dict[str, tuple[str, str]]):  # id -> (module name, scope), in order
        self._modules = modules
        self._infos: dict[str, CheckInfo] = {}

    def __getitem__(self, cid: str) -> CheckInfo:
        info = self._infos.get(cid)
        if info is None:
            name, scope = self._modules[cid]  # KeyError for an unknown id, as from a dict
            info = _info(importlib.import_module(name))
            if (info.id, info.scope) != (cid, scope):  # the scan read a value the module changes later
                raise ContractError(f"{name}: ID/SCOPE {info.id!r}/{info.scope!r} at import, but "
                                    f"{cid!r}/{scope!r} in its source: assign them once, as literals")
            info = self._infos.setdefault(cid, info)  # two threads may build it: keep the first
        return info

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)

    def __contains__(self, cid: object) -> bool:
        return cid in self._modules

    def __repr__(self) -> str:
        return f"<checks {', '.join(self._modules)}>"


@lru_cache(maxsize=1)
def discover() -> Mapping[str, CheckInfo]:
    """All checks, ssh.connect first, then node checks, then cluster checks, each by id (a
    read-only mapping: each module is imported when its CheckInfo is first used, see _Checks)."""
    from . import checks as _pkg  # preflight.checks: the top-level checks/ folder, packaged

    scanned = _scan()
    if scanned is not None:
        return _Checks({r.id: (f"{_pkg.__name__}.{r.module}", r.scope) for r in scanned})
    found: list[CheckInfo] = []
    for mod in pkgutil.iter_modules(_pkg.__path__):
        m = importlib.import_module(f"{_pkg.__name__}.{mod.name}")
        if not hasattr(m, "ID"):
            continue
        found.append(_info(m))
    found.sort(key=lambda c: (c.id != CONNECT_ID, c.scope != "node", c.id))
    return {c.id: c for c in found}


class _Scanned(NamedTuple):
    id: str
    scope: str
    gate: bool
    module: str  # the module's name in preflight.checks
    doc: str  # the docstring as written in the source (a string literal), "" without one


@lru_cache(maxsize=1)
def _scan() -> tuple[_Scanned, ...] | None:
    """Every check module's ID, SCOPE, POLICY's gate and docstring, read from its source without importing
    it, in discover()'s order; None when any module cannot be read so.

    Why: importing every check with its helpers costs ~0.2 s of CPU (mostly their dataclasses,
    each compiled when its class is created), and listing the checks or choosing the gate's set
    needs only these literals. Only top-level `NAME = <literal>` assignments (and POLICY's `gate=`
    keyword, _scanned_gate) count; anything else
    (a value that is not a literal, one assigned twice, a check that is a package, no source at
    hand) and the caller imports the modules after all: the answer never differs, only its cost
    (tests/core/test_listing.py holds every shipped check to it)."""
    import ast
    import re

    from . import checks as _pkg

    assign = re.compile(r"^(ID|SCOPE)[ \t]*(?::[^=\n]*)?=[ \t]*(.+?)[ \t]*(?:#[^\n]*)?$", re.M)
    docstring = re.compile(r"\A(?:[ \t]*(?:#[^\n]*)?\n)*[ \t]*([rRuU]?(\"\"\"|\'\'\')[\s\S]*?\2)")
    rows = []
    try:
        for mod in pkgutil.iter_modules(_pkg.__path__):
            if mod.ispkg:
                return None
            with open(f"{mod.module_finder.path}/{mod.name}.py", encoding="utf-8") as f:  # type: ignore[union-attr]
                source = f.read()
            found: dict[str, Any] = {}
            for name, value in assign.findall(source):
                if name in found:
                    return None  # assigned twice: only running the module says which wins
                found[name] = ast.literal_eval(value)
            if "ID" not in found:
                if re.search(r"^ID\b", source, re.M):
                    return None
                continue  # not a check (discover() skips it too)
            gate = _scanned_gate(source)
            if gate is None:
                return None
            cid, scope = found["ID"], found.get("SCOPE", "node")
            if not (isinstance(cid, str) and isinstance(scope, str) and isinstance(gate, bool)):
                return None
            m = docstring.match(source)
            rows.append(_Scanned(cid, scope, gate, mod.name, m.group(1) if m else ""))
    except (OSError, ValueError, SyntaxError, AttributeError):
        return None
    rows.sort(key=lambda r: (r.id != CONNECT_ID, r.scope != "node", r.id))
    return tuple(rows)


def _scanned_gate(source: str) -> bool | None:
    """The `gate=` keyword of the module's top-level `POLICY = Policy(...)` (False without one or
    without POLICY); None when it is not a plain literal or POLICY is assigned otherwise."""
    import ast
    import io
    import re
    import tokenize

    starts = list(re.finditer(r"^POLICY\b", source, re.M))
    if not starts:
        return False
    if len(starts) > 1:
        return None
    depth, end = 0, None
    tokens = tokenize.generate_tokens(io.StringIO(source[starts[0].start():]).readline)
    try:
        for tok in tokens:
            if tok.type == tokenize.OP and tok.string in "([{":
                depth += 1
            elif tok.type == tokenize.OP and tok.string in ")]}":
                depth -= 1
                if depth == 0:
                    end = tok.end
                    break
    except tokenize.TokenError:
        return None
    if end is None:
        return None
    rest = source[starts[0].start():].splitlines(keepends=True)
    call = ast.parse("".join(rest[:end[0] - 1]) + rest[end[0] - 1][:end[1]]).body[0]
    if not (isinstance(call, (ast.Assign, ast.AnnAssign)) and isinstance(call.value, ast.Call)):
        return None
    for kw in call.value.keywords:
        if kw.arg is None:
            return None
        if kw.arg == "gate":
            return kw.value.value if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, bool) else None
    return False


def listing() -> list[tuple[str, str, str, bool]]:
    """(id, scope, title, gate) of every check, in discover()'s order, for `list-checks`: from the
    source (_scan), no check imported, when every module reads plainly."""
    rows = _scan()
    if rows is None:
        return [(c.id, c.scope, c.title, c.gate) for c in discover().values()]
    import ast

    return [(r.id, r.scope, _title(r.id, ast.literal_eval(r.doc).strip() if r.doc else ""), r.gate) for r in rows]


def scopes() -> dict[str, str]:
    """id -> scope of every check, in discover()'s order, without importing the checks if _scan can."""
    rows = _scan()
    return {r.id: r.scope for r in rows} if rows is not None else {c.id: c.scope for c in discover().values()}


class SelectionError(ValueError):
    pass


def check_parameters(params_by_check: dict[str, dict[str, Any]], where: str, per_node: bool = False) -> None:
    """Refuse an unknown check id or parameter in the inventory's `checks:` (a typo would
    otherwise silently leave the default threshold in force). With `per_node` (a node's own
    `checks:`), a cluster check's parameter must be one of its policy's node_params: the others are read
    once for the whole cluster, and accepting them on one node would ignore them silently."""
    import difflib

    every = discover()
    for cid, params in params_by_check.items():
        if cid not in every:
            close = difflib.get_close_matches(cid, list(every), n=1)
            raise SelectionError(f"{where}: checks: unknown check {cid!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        info = every[cid]
        for key in params:
            if per_node and info.scope == "cluster" and key in info.defaults and key not in info.node_params:
                allowed = f" (per node it takes only: {', '.join(info.node_params)})" if info.node_params else ""
                raise SelectionError(f"{where}: checks: {cid}: {key!r} applies to the whole cluster; set it in "
                                     f"the top-level `checks:`, not for one node{allowed}")
            if key not in every[cid].defaults:
                known = sorted(every[cid].defaults)
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"did you mean {close[0]!r}?" if close else (f"known: {', '.join(known)}" if known else "it takes none")
                raise SelectionError(f"{where}: checks: {cid}: unknown parameter {key!r} ({hint})")


def matches(check_id: str, pattern: str) -> bool:
    """`hccn` and `hccn.` match every hccn.*; an id matches itself."""
    return check_id == pattern or check_id.startswith(pattern.rstrip(".") + ".")


def select(checks: list[str] | None, skip: list[str] | None) -> tuple[list[str], list[str]]:
    """(reported ids, ids whose probes run). `hccn` selects every hccn.*; USES pull facts in."""
    every = discover()
    for pattern in (checks or []) + (skip or []):
        if not any(matches(c, pattern) for c in every):
            raise SelectionError(f"no check matches {pattern!r} (see: preflight list-checks)")
    chosen = [c for c in every if not checks or any(matches(c, p) for p in checks)]
    chosen = [c for c in chosen if not any(matches(c, p) for p in (skip or []))]
    if CONNECT_ID not in chosen:
        chosen.insert(0, CONNECT_ID)  # reachability is always reported: it explains every skip
    active = list(chosen)
    stack = list(chosen)
    while stack:
        for dep in every[stack.pop()].uses:
            if dep not in active and dep in every:
                active.append(dep)
                stack.append(dep)
    order = list(every)
    return sorted(chosen, key=order.index), sorted(active, key=order.index)


def gate_set() -> list[str]:
    """The gate's fast default set: every check whose Policy says gate=True, in discovery order (read from
    the source when _scan can: the other checks' modules stay unimported)."""
    rows = _scan()
    return [r.id for r in rows if r.gate] if rows is not None else [c.id for c in discover().values() if c.gate]


def busy_deciders() -> list[CheckInfo]:
    """Checks whose facts say whether a node is busy (on_busy="report", with busy(facts))."""
    return [c for c in discover().values() if c.on_busy == "report"]
