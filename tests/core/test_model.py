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


DIRECT_INIT = ["preflight.model.CommandOutput", "preflight.transport.batch.ProbeSpec", "preflight.model.Result",
               "preflight.model.Metric", "preflight.checkapi.Finding", "preflight.checkapi.Probe",
               "preflight.ascend.npu_smi.Chip", "preflight.net.iproute.Address", "preflight.net.iproute.Interface",
               "preflight.ascend.hccn.Optical", "preflight.ascend.hccn.LinkStat", "preflight.ascend.hccn.IpConf"]


def _twin(klass):
    """The same fields (and __post_init__) as a plain frozen dataclass: the __init__ direct_init replaced."""
    import dataclasses

    spec = [(f.name, f.type, dataclasses.field(default=f.default, default_factory=f.default_factory))
            for f in dataclasses.fields(klass)]
    post = {"__post_init__": klass.__post_init__} if hasattr(klass, "__post_init__") else {}
    return dataclasses.make_dataclass(klass.__name__, spec, frozen=True, namespace=post)


def _outcome(klass, *args):
    try:
        made = klass(*args)
    except Exception as exc:  # noqa: BLE001 - compared: both refuse alike
        return type(exc), str(exc)
    return [getattr(made, name) for name in klass.__dataclass_fields__]


@pytest.mark.parametrize("cls", DIRECT_INIT)
def test_direct_init_is_the_dataclass_init(cls):
    """Every class given model.direct_init's __init__ (a fast path, see its docstring) takes the
    same parameters as the frozen dataclass's own, in order, with the same defaults; fills a
    default_factory field with a fresh value per instance; runs __post_init__ (Finding refuses a
    fail without remediation, as before); and stays frozen."""
    import dataclasses
    import importlib
    import inspect

    module, _, name = cls.rpartition(".")
    klass = getattr(importlib.import_module(module), name)
    assert "__factories" in klass.__init__.__globals__, f"{cls} lost direct_init"  # its generated namespace
    twin = _twin(klass)
    mine = list(inspect.signature(klass.__init__).parameters.values())[1:]
    theirs = list(inspect.signature(twin.__init__).parameters.values())[1:]
    assert [(p.name, repr(p.default)) for p in mine] == [(p.name, repr(p.default)) for p in theirs]
    fields = dataclasses.fields(klass)
    required = [f for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    values = [f"v{i}" for i in range(len(fields))]
    assert _outcome(klass, *values) == _outcome(twin, *values)
    least = values[:len(required)]
    assert _outcome(klass, *least) == _outcome(twin, *least)
    if not isinstance(_outcome(klass, *least), tuple):
        one, two = klass(*least), klass(*least)
        for f in fields:
            if f.default_factory is not dataclasses.MISSING:
                assert getattr(one, f.name) is not getattr(two, f.name), f"{cls}.{f.name} shared between instances"
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(one, fields[0].name, "x")
        assert one == klass(**{f.name: getattr(one, f.name) for f in fields})


def test_direct_init_refuses_what_it_cannot_do():
    """A field left out of __init__, an InitVar (a __post_init__ with arguments) or __slots__:
    the dataclass's own __init__ is needed, and direct_init says so instead of dropping them."""
    import dataclasses

    from preflight.model import direct_init

    @dataclasses.dataclass(frozen=True)
    class Hidden:
        a: int
        b: int = dataclasses.field(default=0, init=False)

    @dataclasses.dataclass(frozen=True)
    class WithInitVar:
        a: int
        scale: dataclasses.InitVar[int] = 1

        def __post_init__(self, scale):
            pass

    @dataclasses.dataclass(frozen=True, slots=True)
    class Slotted:
        a: int

    for klass in (Hidden, WithInitVar, Slotted):
        with pytest.raises(TypeError, match="needs the dataclass's own __init__"):
            direct_init(klass)


def test_finding_still_checks_itself():
    """Finding's __post_init__ runs under direct_init: a fail needs a remediation, an action must be known."""
    from preflight.checkapi import Finding

    with pytest.raises(ValueError, match="needs a remediation"):
        Finding(Status.FAIL, "device 3 down")
    with pytest.raises(ValueError, match="unknown action"):
        Finding(Status.WARN, "slow", remediation="look", action="reboot-the-world")
    assert Finding(Status.FAIL, "device 3 down", remediation="fix it").details == {}


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
