"""HCCL's error-code table (preflight/data/hccl_errors.yaml): one real text per rule, from HCCL's
error-code reference, its troubleshooting guide, or a public issue's log (tests/fixtures/ascend/hccl_errors,
each file's header names its source). Pure: no SSH, no torch."""
from __future__ import annotations

import pytest

from preflight.ascend import hccl_errors
from preflight.checks import smoke_allreduce as S
from tests.support import FIXTURES

SAMPLES = sorted((FIXTURES / "ascend" / "hccl_errors").glob("*.txt"))


def body(path) -> str:
    return path.read_text(encoding="utf-8").partition("# ---\n")[2]


def test_every_rule_has_sources_and_a_real_sample():
    ids = [r.id for r in hccl_errors.rules()]
    assert len(ids) == len(set(ids)) and {"socket_ifname_missing", "bind_failed", "socket_timeout"} <= set(ids)
    sampled = {p.name.split("__")[0] for p in SAMPLES}
    for rule in hccl_errors.rules():
        assert rule.sources and all(s.startswith("https://") for s in rule.sources), rule.id
        assert rule.codes and rule.remediation and rule.patterns, rule.id
        assert rule.id in sampled, f"rule {rule.id} has no sample under tests/fixtures/ascend/hccl_errors"
    assert sampled <= set(ids)  # no sample for a rule that is gone


@pytest.mark.parametrize("path", SAMPLES, ids=[p.stem for p in SAMPLES])
def test_each_sample_is_classified_by_its_rule(path):
    want = path.name.split("__")[0]
    text = body(path)
    assert text.strip() and path.read_text().startswith("# source: https://")
    rule = hccl_errors.classify(text)
    assert rule is not None and rule.id == want
    d = S.diagnose(text)  # what smoke.allreduce makes of it: the rule's kind, blame and remediation
    assert (d.kind, d.local, d.remediation) == (rule.kind, rule.local, rule.remediation)


def test_the_three_wordings_the_old_classifier_missed():
    """A taken port (device-side listen failure), a missing HCCL_SOCKET_IFNAME NIC and a socket-establish
    timeout: each now names its own cause, and the first two blame the node that logged them."""
    listen = body(FIXTURES / "ascend" / "hccl_errors" / "bind_failed__vllm-ascend-1955.txt")
    ifname = body(FIXTURES / "ascend" / "hccl_errors" / "socket_ifname_missing__hiascend-cann900-hcclug_000031.txt")
    establish = body(FIXTURES / "ascend" / "hccl_errors" / "socket_timeout__hiascend-hcclug_000050.txt")
    assert (S.diagnose(listen).kind, S.diagnose(listen).local) == ("port_in_use", True)
    assert "HCCL_NPU_SOCKET_PORT_RANGE" in S.diagnose(listen).remediation
    assert (S.diagnose(ifname).kind, S.diagnose(ifname).local) == ("hccl_ifname", True)
    assert "HCCL_SOCKET_IFNAME" in S.diagnose(ifname).remediation
    assert S.diagnose(establish).kind == "hccl_socket_timeout" and "HCCL_CONNECT_TIMEOUT" in S.diagnose(establish).remediation


def test_blame_follows_the_table():
    """rank 1's HCCL_SOCKET_IFNAME names no NIC; rank 0 only times out waiting: rank 1's node is named."""
    ifname = body(FIXTURES / "ascend" / "hccl_errors" / "socket_ifname_missing__hiascend-cann850-hcclug_000031.txt")
    timeout = body(FIXTURES / "ascend" / "hccl_errors" / "socket_timeout__vllm-ascend-486.txt")
    r0 = S.RankResult("a", 0, False, error="x", diagnosis=S.diagnose(timeout))
    r1 = S.RankResult("b", 1, False, error="y", diagnosis=S.diagnose(ifname))
    assert S.blame(r0, r1) == ("b",)
