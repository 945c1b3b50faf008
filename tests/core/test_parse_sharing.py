"""The runner parses equal outputs once (runner.Runner._parse) and never hands a node another
node's facts: outputs that differ in any field (text, exit code, timing) are parsed on their own."""
from __future__ import annotations

import threading

from preflight.checkapi import Finding, ParseError
from preflight.model import CommandOutput, Status
from preflight.runner import Options, Runner
from tests.core.test_local_runner import checks, inventory, node_check, one  # noqa: F401 - fixtures

OUTPUTS = {
    "n1": CommandOutput(stdout="alpha\n", duration_s=0.5),
    "n2": CommandOutput(stdout="alpha\n", duration_s=0.5),  # equal to n1 in every field: shares its parse
    "n3": CommandOutput(stdout="beta\n", duration_s=0.5),
    "n4": CommandOutput(stdout="alpha\n", rc=3, duration_s=0.5),  # n1's text, another exit code
    "n5": CommandOutput(stdout="alpha\n", duration_s=0.7),  # n1's text, another timing
    "n6": CommandOutput(stdout="bad\n", duration_s=0.5),
    "n7": CommandOutput(stdout="bad\n", duration_s=0.5),
}


class FixedSession:
    def __init__(self, out: CommandOutput):
        self.out = out

    def run(self, probes, cancel: threading.Event):
        return {p.key: self.out for p in probes}

    def close(self) -> None:
        pass


class FixedTransport:
    def connect(self, node, cancel):
        return FixedSession(OUTPUTS[node.name])

    def close(self) -> None:
        pass


def test_equal_outputs_share_a_parse_and_each_node_keeps_its_own_facts(checks, inventory):
    parsed: list[str] = []

    def parse(outs):
        o = outs["hello"]
        parsed.append(o.stdout)
        if o.stdout == "bad\n":
            raise ParseError("unreadable", o.stdout)
        return {"text": o.stdout.strip(), "rc": o.rc, "took": o.duration_s}

    checks(node_check("fake.share", parse=parse,
                      evaluate=lambda facts, params, node: [Finding(Status.PASS, f"{node.name} {facts}")]))
    rep = Runner(inventory(*OUTPUTS), FixedTransport(), Options(forks=1)).run()
    summaries = {n: one(rep, "fake.share", n).summary for n in OUTPUTS}
    assert summaries["n1"] == "n1 {'text': 'alpha', 'rc': 0, 'took': 0.5}"
    assert summaries["n2"] == "n2 {'text': 'alpha', 'rc': 0, 'took': 0.5}"
    assert summaries["n3"] == "n3 {'text': 'beta', 'rc': 0, 'took': 0.5}"
    assert summaries["n4"] == "n4 {'text': 'alpha', 'rc': 3, 'took': 0.5}"
    assert summaries["n5"] == "n5 {'text': 'alpha', 'rc': 0, 'took': 0.7}"
    assert one(rep, "fake.share", "n6").status is Status.ERROR
    assert one(rep, "fake.share", "n7").status is Status.ERROR
    # n2 reused n1's parse; n4 and n5 did not; a parse that raised is not kept (n6, n7 each parse)
    assert sorted(parsed) == sorted(["alpha\n", "beta\n", "alpha\n", "alpha\n", "bad\n", "bad\n"])
