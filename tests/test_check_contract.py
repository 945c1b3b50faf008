"""The meta-test: every check module in checks/ keeps the contract of preflight/checkapi.py.

A new check is one module plus its fixture cases; this test is what holds it to the contract
(docstring that says what/why/how, ID matching the file name, the functions its scope needs,
DEFAULTS, known USES/REQUIRES, probes that build on a default node, a test file with a passing
and a failing case). A check that is still being written fails here on purpose.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import pytest

from preflight.checkapi import Probe
from preflight.node import Node
from preflight.registry import CONNECT_ID, discover, module_name

ROOT = Path(__file__).resolve().parent.parent
CHECKS_DIR = ROOT / "checks"
CHECK_TESTS = Path(__file__).resolve().parent / "checks"
MIN_DOC = 300  # a paragraph each for what, why and how is well over this

ALL = discover()
IDS = sorted(ALL)
NO_PROBES = {CONNECT_ID}  # the runner makes its results from the connection attempt itself


def test_every_module_in_checks_is_discovered():
    files = sorted(p.stem for p in CHECKS_DIR.glob("*.py") if p.stem != "__init__" and not p.stem.startswith("_"))
    found = sorted(module_name(c) for c in ALL)
    assert files == found, "a module in checks/ without ID (or an ID that does not match its file) is never run"


def test_ids_are_unique_and_connect_exists():
    assert CONNECT_ID in ALL
    assert len({module_name(c) for c in ALL}) == len(ALL)


@pytest.mark.parametrize("cid", IDS)
def test_docstring_says_what_why_how(cid):
    doc = ALL[cid].doc
    assert len(doc) >= MIN_DOC, f"{cid}: docstring is {len(doc)} chars; `preflight explain` prints it"
    assert ALL[cid].title.strip(), f"{cid}: first docstring line (list-checks) is empty"
    low = doc.lower()
    assert re.search(r"\bwhy\b", low), f"{cid}: the docstring does not say why it matters"
    assert re.search(r"\bhow\b", low), f"{cid}: the docstring does not say how it is judged or fixed"
    assert re.search(r"\bfix|remed|run |install|set |restart|start ", low), f"{cid}: no way to fix is given"


@pytest.mark.parametrize("cid", IDS)
def test_id_matches_file_name(cid):
    mod = ALL[cid].module
    assert mod.ID == cid
    assert mod.__name__.rsplit(".", 1)[-1] == module_name(cid), f"{cid} lives in {mod.__name__}"
    assert re.fullmatch(r"[a-z][a-z0-9]*\.[a-z][a-z0-9_]*", cid), f"{cid}: ids are area.name in lower case"


@pytest.mark.parametrize("cid", IDS)
def test_scope_and_functions(cid):
    info = ALL[cid]
    mod = info.module
    assert getattr(mod, "SCOPE", None) in ("node", "cluster"), f"{cid}: SCOPE must be 'node' or 'cluster'"
    if cid in NO_PROBES:
        return
    if info.scope == "node":
        missing = [f for f in ("probes", "parse", "evaluate") if not callable(getattr(mod, f, None))]
        assert not missing, f"{cid}: a node check needs {missing}"
    else:
        assert callable(getattr(mod, "evaluate", None)), f"{cid}: a cluster check needs evaluate(ctx)"
        if callable(getattr(mod, "probes", None)):
            assert callable(getattr(mod, "parse", None)), f"{cid}: probes without parse"


@pytest.mark.parametrize("cid", IDS)
def test_defaults_is_a_dict(cid):
    mod = ALL[cid].module
    assert isinstance(getattr(mod, "DEFAULTS", None), dict), f"{cid}: DEFAULTS must be a dict (may be empty)"
    assert all(isinstance(k, str) for k in mod.DEFAULTS)


@pytest.mark.parametrize("cid", IDS)
def test_uses_and_requires_name_existing_checks(cid):
    mod = ALL[cid].module
    for attr in ("USES", "REQUIRES"):
        value = getattr(mod, attr, ())
        assert isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value), \
            f"{cid}: {attr} must be a tuple of check ids"
        unknown = [v for v in value if v not in ALL]
        assert not unknown, f"{cid}: {attr} names unknown checks {unknown}"
        assert cid not in value, f"{cid}: {attr} names itself"
    for dep in getattr(mod, "USES", ()):
        assert ALL[dep].scope == "node", f"{cid}: USES {dep}, which is not a node check (no facts to share)"


@pytest.mark.parametrize("cid", IDS)
def test_probes_build_on_a_default_node(cid):
    info = ALL[cid]
    if not info.has("probes"):
        assert info.scope == "cluster" or cid in NO_PROBES, f"{cid}: node check without probes()"
        return
    node = Node("n1", "h")
    probes = info.module.probes(node, node.check_params(cid, info.defaults))
    assert isinstance(probes, Mapping), f"{cid}: probes() returned {type(probes).__name__}"
    # an empty mapping is fine: storage checks have nothing to look at on a node without paths
    for name, probe in probes.items():
        assert isinstance(name, str) and name, f"{cid}: probe name {name!r}"
        assert isinstance(probe, (str, Probe)), f"{cid}: probe {name} is {type(probe).__name__}"
        cmd = probe.cmd if isinstance(probe, Probe) else probe
        assert cmd.strip(), f"{cid}: probe {name} is an empty command"


def _test_files(cid: str) -> list[Path]:
    mod = module_name(cid)
    return sorted(CHECK_TESTS.glob(f"test_{mod}.py")) + sorted(CHECK_TESTS.glob(f"test_{mod}_*.py"))


@pytest.mark.parametrize("cid", [c for c in IDS if c != CONNECT_ID])
def test_has_a_passing_and_a_failing_case(cid):
    files = _test_files(cid)
    assert files, f"{cid}: no tests/checks/test_{module_name(cid)}.py"
    text = "\n".join(f.read_text() for f in files)
    assert re.search(r"Status\.PASS|[\"']pass[\"']", text), f"{cid}: no test asserts a passing outcome"
    assert re.search(r"Status\.FAIL|[\"']fail[\"']", text), f"{cid}: no test asserts a failing outcome"


# ---------------------------------------------------------------- policy (checkapi.Policy)

@pytest.mark.parametrize("cid", IDS)
def test_policy_is_one_object_with_known_values(cid):
    """Whatever the core needs to know about a check is its POLICY, one checkapi.Policy."""
    from preflight.checkapi import Policy

    info = ALL[cid]
    mod = info.module
    declared = getattr(mod, "POLICY", Policy())
    assert isinstance(declared, Policy), f"{cid}: POLICY must be a checkapi.Policy(...)"
    assert info.policy == declared, f"{cid}: the registry lost its POLICY"
    if info.scope == "node":
        assert not info.node_params, f"{cid}: node_params is for cluster checks (a node check's parameters are per node)"
        assert info.plan_rounds == 1, f"{cid}: plan_rounds is for cluster checks with plan()"
    elif info.plan_rounds > 1:
        assert info.has("plan"), f"{cid}: plan_rounds without plan()"
    assert set(info.node_params) <= set(info.defaults), f"{cid}: node_params names parameters it does not have"
    if info.gate:
        assert info.scope == "node" and info.cost == "light", f"{cid}: the gate's fast set is light node checks"
    if info.disruptive or info.cost != "light":
        assert not info.gate, f"{cid}: a disruptive or costly check cannot be in the gate's fast set"
    if info.trend_metric:
        metric = info.trend_metric[0]
        source = Path(mod.__file__).read_text()
        assert source.count(f'"{metric}"') >= 2, f"{cid}: trend_metric {metric!r} is never emitted"


@pytest.mark.parametrize("kwargs", [
    {"on_busy": "sometimes"}, {"privilege": "admin"}, {"cost": "cheap"}, {"where": "pod"},
    {"backend": "tpu"}, {"gate": 1}, {"on_busy": "skip"}, {"trend_metric": ("rtt",)},
    {"privilege_group": "HwHiAiUser"}, {"plan_rounds": 0}, {"node_params": (1,)},
])
def test_a_bad_policy_value_is_refused_when_made(kwargs):
    from preflight.checkapi import Policy
    from preflight.registry import ContractError

    with pytest.raises(ContractError):
        Policy(**kwargs)


def test_a_misspelt_policy_field_is_an_error_at_import():
    from preflight.checkapi import Policy

    with pytest.raises(TypeError, match="disruptve"):
        Policy(disruptve=True)  # type: ignore[call-arg]


BOGUS_CHECK = '''"""fake.bogus: a check with one misspelt module attribute (tests/test_check_contract.py)."""
from preflight.checkapi import Policy

ID = "fake.bogus"
SCOPE = "node"
DEFAULTS = {{}}
{line}


def probes(node, params):
    return {{}}


def parse(outputs):
    return None


def evaluate(facts, params, node):
    return []
'''


@pytest.mark.parametrize("line, said", [
    ("POLICEY = Policy(gate=True)", "did you mean POLICY"),
    ("USE = ('npu.idle',)", "did you mean USES"),
    ("REQUIRE = ('ssh.connect',)", "did you mean REQUIRES"),
    ("ACTION = {}", "did you mean ACTIONS"),
    ("GATE = True", "GATE is a Policy field"),  # a loose constant from before POLICY
    ("PLAN_ROUNDS = 2", "PLAN_ROUNDS is a Policy field"),
])
def test_a_misspelt_module_attribute_is_refused_when_the_check_is_loaded(tmp_path, monkeypatch, line, said):
    """An upper-case module name the core would ignore without a word (a near miss of a contract
    name, or a Policy field set as a constant) is a ContractError when the registry loads the check."""
    import sys

    import preflight.checks as pkg
    from preflight import registry
    from preflight.registry import ContractError

    (tmp_path / "fake_bogus.py").write_text(BOGUS_CHECK.format(line=line), encoding="utf-8")
    monkeypatch.setattr(pkg, "__path__", [*pkg.__path__, str(tmp_path)])
    registry.discover.cache_clear()
    registry._scan.cache_clear()
    try:
        found = registry.discover()
        assert "fake.bogus" in found
        with pytest.raises(ContractError, match=said):
            found["fake.bogus"]
    finally:
        monkeypatch.undo()
        sys.modules.pop("preflight.checks.fake_bogus", None)
        registry.discover.cache_clear()
        registry._scan.cache_clear()


def test_a_check_of_its_own_upper_case_names_loads():
    """Constants of the check's own (QUERIES, REQUIRED_JOB_KEYS, R_BACKEND) are no near miss: every
    shipped check loads (the registry's rule refuses none of them)."""
    from preflight.registry import refuse_misspelt_names

    for cid in IDS:
        refuse_misspelt_names(ALL[cid].module)


@pytest.mark.parametrize("cid", IDS)
def test_a_node_check_names_no_function_plan(cid):
    """plan(ctx) is the cluster hook (targeted probes): a node check's own helper has a name that
    says what it does (net.ports' ports_to_bind), so the word keeps one meaning."""
    if ALL[cid].scope == "node":
        assert not hasattr(ALL[cid].module, "plan"), f"{cid}: plan is the cluster hook's name"


def test_on_busy_report_needs_a_busy_function():
    import types

    from preflight.checkapi import Policy
    from preflight.registry import ContractError, policy

    with pytest.raises(ContractError, match="busy"):
        policy(types.SimpleNamespace(__name__="checks.fake", POLICY=Policy(on_busy="report")))
    with pytest.raises(ContractError, match="checkapi.Policy"):
        policy(types.SimpleNamespace(__name__="checks.fake", POLICY={"gate": True}))


def test_the_core_names_no_check_but_ssh_connect():
    """No list of check ids in the core: gate membership, busy-node rules, trend metrics and the
    like come from the checks' policy. (ssh.connect is the runner's own: it reports the connection.)"""
    import ast

    from preflight.registry import CONNECT_ID

    core = ROOT / "preflight"
    offenders = []
    for path in sorted(core.rglob("*.py")):
        rel = path.relative_to(core)
        if rel.parts[0] in ("checks", "sim") or rel.as_posix() == "job/__init__.py":  # the checks themselves; the
            # simulator's own node state; the checks the job's commands build on (reached by id)
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ALL:
                if node.value != CONNECT_ID or rel.as_posix() != "registry.py":
                    offenders.append(f"preflight/{rel}:{node.lineno}: {node.value!r}")
    assert not offenders, "check ids in core code (make it a Policy field):\n" + "\n".join(offenders)


def test_checks_have_one_import_name_and_no_top_level_module(tmp_path):
    """`preflight.checks.X` is the one name of a check module (tests and registry share the module
    object), and the installed package adds no top-level `checks` to anyone's environment."""
    import subprocess
    import sys

    import preflight.checks.env_comm as env_comm

    assert ALL["env.comm"].module is env_comm
    probe = ("import importlib.util, preflight.registry as r; "
             "print(importlib.util.find_spec('checks'), len(r.discover()))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None", str(len(ALL))]


# ---------------------------------------------------------------- one page of contract

PAGE_DOC = ROOT / "docs" / "writing-a-check.md"
HOOKS = ("probes", "followup", "parse", "evaluate", "plan", "busy")


def _page() -> str:
    text = PAGE_DOC.read_text(encoding="utf-8")
    start = text.index("## The contract on one page")
    return text[start:text.index("\n## 1.", start)]


def test_checkapi_is_one_page_and_the_doc_opens_with_it():
    """What every check uses fits on one page: at most about 15 names, no speed device among them,
    and writing-a-check.md opens with exactly those names, the hooks and the Policy fields with
    their defaults."""
    import dataclasses

    from preflight import checkapi
    from preflight.checkapi import Policy

    names = checkapi.__all__
    assert len(names) <= 15, f"checkapi.__all__ has {len(names)} names: move helpers to preflight.checkhelpers"
    assert "direct_init" not in names and all(hasattr(checkapi, n) for n in names)
    page = _page()
    assert PAGE_DOC.read_text(encoding="utf-8").split("\n## ")[1].startswith("The contract on one page")
    assert len(page.splitlines()) <= 70, "the contract page no longer fits on one page"
    listed = re.findall(r"^\| `(\w+)[`(]", page.split("**The names of `preflight.checkapi`**")[1], re.M)
    listed += re.findall(r"`(\w+)\(summary", page)  # passed / skipped share a row
    assert sorted(set(listed)) == sorted(names), "the page's names and checkapi.__all__ differ"
    for hook in HOOKS:
        assert re.search(rf"^\| `{hook}\(", page, re.M), f"the page does not list the hook {hook}()"
    for f in dataclasses.fields(Policy):
        assert f"`{f.name}={f.default!r}`" in page.replace('"', "'"), f"the page does not give Policy's {f.name} default"


@pytest.mark.parametrize("cid", IDS)
def test_a_check_imports_only_the_contract_and_the_helpers(cid):
    """From checkapi only its `__all__`; no speed device (direct_init) and nothing from the core's
    model: what a check uses is the page above plus preflight.checkhelpers."""
    import ast

    from preflight import checkapi, checkhelpers

    tree = ast.parse(Path(ALL[cid].module.__file__).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            got = [a.name for a in node.names]
            assert "direct_init" not in got, f"{cid}: direct_init is a speed device of the core, not a check's"
            if node.module == "preflight.checkapi":
                extra = sorted(set(got) - set(checkapi.__all__))
                assert not extra, f"{cid}: {extra} are not checkapi's contract (preflight.checkhelpers?)"
            if node.module == "preflight.checkhelpers":
                assert set(got) <= set(checkhelpers.__all__), f"{cid}: {got}"
            assert node.module != "preflight.model", f"{cid}: imports the core's model (use checkapi / checkhelpers)"


# ---------------------------------------------------------------- enumerated parameters (checkapi.Choice)

def _compared_literals(source: str, keys: set[str]) -> dict[str, set[str]]:
    """param -> the string literals the module compares it with (`p.get("mode") == "all"`,
    `str(params.get("below_min") or "warn") == "fail"`, `p["mode"] in ("pairs", "all")`)."""
    import ast

    def key_of(node):
        while True:
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
                node = node.args[0]
            elif isinstance(node, ast.BoolOp):
                node = node.values[0]
            else:
                break
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
            node = node.args[0]
        elif isinstance(node, ast.Subscript):
            node = node.slice
        else:
            return None
        return node.value if isinstance(node, ast.Constant) and node.value in keys else None

    def literals(node):
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}

    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and (key := key_of(node.left)) is not None:
            for comp in node.comparators:
                found.setdefault(key, set()).update(literals(comp))
    return {k: v for k, v in found.items() if v}


@pytest.mark.parametrize("cid", IDS)
def test_an_enumerated_parameter_declares_its_values(cid):
    """A parameter the check compares with fixed strings is a Choice in DEFAULTS, and every string
    it is compared with is in its set: the loader refuses the others (file:line, the set)."""
    from preflight.checkapi import Choice

    info = ALL[cid]
    strings = {k for k, v in info.module.DEFAULTS.items() if isinstance(v, str)}
    for key, seen in _compared_literals(Path(info.module.__file__).read_text(encoding="utf-8"), strings).items():
        declared = info.module.DEFAULTS[key]
        assert isinstance(declared, Choice), f"{cid}: {key!r} is compared with {sorted(seen)}: declare Choice(default, ...)"
        assert seen <= set(declared.allowed), f"{cid}: {key!r} compared with {sorted(seen - set(declared.allowed))}, not in its Choice"
    for key, value in info.module.DEFAULTS.items():
        if isinstance(value, Choice):
            assert info.choices[key] == value.allowed and type(info.defaults[key]) is str, f"{cid}: registry lost {key}'s set"


def test_a_value_outside_its_set_is_refused_at_load_with_file_line_and_the_set(tmp_path):
    from preflight.inventory import InventoryError, load

    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - {name: n1, host: 10.0.0.1}\nchecks:\n  smoke.allreduce: {mode: al, below_min: fail}\n")
    with pytest.raises(InventoryError) as err:
        load(inv)
    assert str(err.value) == f"{inv}:4: mode: smoke.allreduce takes one of pair, pairs, all, got 'al'"
    inv.write_text("nodes:\n  - {name: n1, host: 10.0.0.1, checks: {net.ping_mesh: {pinger: fping}}}\n")
    with pytest.raises(InventoryError, match=r"inv.yaml:2: pinger: net.ping_mesh takes one of auto, ping, got 'fping'"):
        load(inv)
    inv.write_text("nodes:\n  - {name: n1, host: 10.0.0.1}\nchecks:\n  smoke.allreduce: {mode: pairs, below_min: fail}\n")
    assert load(inv).checks["smoke.allreduce"] == {"mode": "pairs", "below_min": "fail"}


def test_choice_is_its_default_as_a_string():
    import copy
    import json
    import pickle

    from preflight.checkapi import Choice

    mode = Choice("pair", "pairs", "all")
    assert mode == "pair" and json.dumps({"mode": mode}) == '{"mode": "pair"}' and repr(mode) == "'pair'"
    assert pickle.loads(pickle.dumps(mode)).allowed == copy.deepcopy(mode).allowed == ("pair", "pairs", "all")
    for bad in (("a", "a"), ("a", 1)):
        with pytest.raises(TypeError):
            Choice(*bad)
