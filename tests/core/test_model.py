"""The result model: exit codes and verdicts (SPEC "Exit codes"), status numbers, Finding's contract."""
from __future__ import annotations

import pytest

from preflight.checkapi import Finding
from preflight.model import CommandOutput, NodeState, NodeStateKind, Report, Result, Status, worst

OK = NodeState("n1", "10.0.0.1")
DOWN = NodeState("n2", "10.0.0.2", NodeStateKind.UNREACHABLE, "refused")


def report(*statuses: Status, nodes=(OK,), strict=False, interrupted=False) -> Report:
    results = tuple(Result(f"c{i}", "n1", s, "x", remediation="fix" if s in (Status.FAIL, Status.WARN) else None)
                    for i, s in enumerate(statuses))
    return Report("2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z", "inv.yaml", "0" * 64, tuple(nodes), results,
                  strict=strict, interrupted=interrupted)


P, W, F, S, E = Status.PASS, Status.WARN, Status.FAIL, Status.SKIP, Status.ERROR


@pytest.mark.parametrize("statuses, kw, code, verdict", [
    ((P, P), {}, 0, "ready"),
    ((), {}, 0, "ready"),
    ((P, S), {}, 0, "ready"),
    ((P, W), {}, 0, "ready"),                       # warnings allowed without --strict
    ((P, W), {"strict": True}, 1, "not_ready"),     # --strict: a warning is a failure
    ((P, F), {}, 1, "not_ready"),
    ((F, E), {}, 1, "not_ready"),                   # 1 wins over 3
    ((F,), {"nodes": (OK, DOWN)}, 1, "not_ready"),  # a failure wins over an unreachable node
    ((P, E), {}, 3, "incomplete"),
    ((P,), {"nodes": (OK, DOWN)}, 3, "incomplete"),
    ((W,), {"nodes": (OK, DOWN), "strict": True}, 1, "not_ready"),
    ((P,), {"interrupted": True}, 130, "incomplete"),
    ((F,), {"interrupted": True}, 130, "incomplete"),  # 130 wins over 1
    ((E,), {"interrupted": True, "nodes": (DOWN,)}, 130, "incomplete"),  # and over 3
])
def test_exit_code_and_verdict(statuses, kw, code, verdict):
    r = report(*statuses, **kw)
    assert r.exit_code == code
    assert r.verdict == verdict


@pytest.mark.parametrize("state", [k for k in NodeStateKind if k is not NodeStateKind.OK])
def test_every_not_ok_node_state_is_incomplete(state):
    assert report(P, nodes=(OK, NodeState("n2", "h", state, "why"))).exit_code == 3


def test_status_numbers():
    assert {s.value: s.number for s in Status} == {"pass": 0, "warn": 1, "fail": 2, "error": 3, "skip": -1}


def test_status_values_are_the_spec_strings():
    assert sorted(s.value for s in Status) == ["error", "fail", "pass", "skip", "warn"]
    assert sorted(k.value for k in NodeStateKind) == ["auth_failed", "hostkey_rejected", "ok", "timeout", "unreachable"]


def test_worst():
    assert worst([P, S, W]) is W
    assert worst([P, E, W]) is E
    assert worst([E, F]) is F
    assert worst([]) is P


def test_counts_has_every_status():
    assert report(P, P, F, S).counts() == {"pass": 2, "warn": 0, "fail": 1, "skip": 1, "error": 0}


@pytest.mark.parametrize("status", [Status.FAIL, Status.WARN])
def test_finding_refuses_fail_and_warn_without_remediation(status):
    with pytest.raises(ValueError):
        Finding(status, "device 3 link DOWN")
    with pytest.raises(ValueError):
        Finding(status, "device 3 link DOWN", remediation="")
    assert Finding(status, "device 3 link DOWN", remediation="run hccn_tool -i 3 -link -g").remediation


@pytest.mark.parametrize("status", [Status.PASS, Status.SKIP, Status.ERROR])
def test_finding_other_statuses_need_no_remediation(status):
    assert Finding(status, "x").remediation is None


def test_command_output_ok():
    assert CommandOutput(rc=0).ok
    assert not CommandOutput(rc=1).ok
    assert not CommandOutput(rc=None, error="connection lost").ok
    assert not CommandOutput(rc=0, timed_out=True).ok


def test_result_to_dict_fields():
    d = Result("hccn.link", "n1", Status.FAIL, "device 5 link DOWN", {"failed_devices": [5]}, "fix it",
               0.123456).to_dict()
    assert d == {"check": "hccn.link", "node": "n1", "status": "fail", "summary": "device 5 link DOWN",
                 "details": {"failed_devices": [5]}, "remediation": "fix it", "action": None,
                 "duration_s": 0.123}


@pytest.mark.parametrize("cls", ["preflight.model.CommandOutput", "preflight.transport.batch.ProbeSpec"])
def test_direct_init_takes_exactly_the_fields_with_their_defaults(cls):
    """The __init__ model.direct_init gives CommandOutput and ProbeSpec (a fast path, see its
    docstring) names every field in order with its default and keeps the class frozen."""
    import dataclasses
    import importlib
    import inspect

    module, _, name = cls.rpartition(".")
    klass = getattr(importlib.import_module(module), name)
    params = list(inspect.signature(klass.__init__).parameters.values())[1:]
    fields = dataclasses.fields(klass)
    no_default = (inspect.Parameter.empty, dataclasses.MISSING)
    assert [(p.name, p.default if p.default is not inspect.Parameter.empty else no_default) for p in params] == \
        [(f.name, f.default if f.default is not dataclasses.MISSING else no_default) for f in fields]
    values = [f"v{i}" for i in range(len(fields))]
    made = klass(*values)
    assert [getattr(made, f.name) for f in fields] == values and made == klass(**dataclasses.asdict(made))
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, fields[0].name, "x")


def test_command_output_keeps_its_values_its_equality_and_stays_frozen():
    """What a frozen dataclass gave CommandOutput still holds with direct_init's __init__: values by
    position and name, equality and hash by value, no assignment, replace() and the defaults."""
    import dataclasses

    from preflight.model import CommandOutput

    fields = dataclasses.fields(CommandOutput)
    values = ["o", "e", 3, 1.5, True, False, "why", "why", 1.0, 2.0]
    out = CommandOutput(*values)
    assert dataclasses.asdict(out) == dict(zip([f.name for f in fields], values))
    again = CommandOutput(**dataclasses.asdict(out))
    assert out == again and hash(out) == hash(again)
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.rc = 0  # type: ignore[misc]
    assert dataclasses.replace(out, rc=0).rc == 0 and CommandOutput().rc == 0 and CommandOutput().stdout == ""
