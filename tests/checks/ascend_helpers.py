"""Shared builders for the Ascend check tests: node, npu-smi outputs, hccn_tool loop outputs."""
from __future__ import annotations

from preflight.checkapi import CommandOutput
from preflight.node import Node
from tests.support import fixture_body

A2 = "npu-smi_info__910B1_8card_idle_npu-smi24.1.0__vllm-ascend-4037.txt"
A3 = "npu-smi_info__A3_910_93_16chip_procs__vllm-ascend-4930.txt"
P310 = "npu-smi_info__310_1chip__hpckurt-Ascend-npu-drivers.txt"


def node(devices: int = 8, **kw) -> Node:
    return Node("node01", "10.0.0.1", devices=devices, **kw)


def smi(name: str = A2) -> CommandOutput:
    return CommandOutput(stdout=fixture_body(name))


def loop(per_dev: dict[int, tuple[str, int] | str]) -> CommandOutput:
    """The output shape of preflight.ascend.probes.hccn_loop for the given per-device texts."""
    parts = []
    for dev, val in per_dev.items():
        text, rc = (val, 0) if isinstance(val, str) else val
        parts.append(f"@@dev {dev}\n{text}{'' if text.endswith(chr(10)) or not text else chr(10)}@@rc {rc}\n")
    return CommandOutput(stdout="".join(parts))


def same(text: str, devices=range(8)) -> CommandOutput:
    return loop({d: text for d in devices})


MISSING = CommandOutput(stdout="@@missing /usr/local/Ascend/driver/tools/hccn_tool\n", rc=127)


def used(outputs) -> dict:
    """What the runner hands a check that USES npu.idle (the parsed npu-smi table): npu.idle's
    facts from the same outputs, or the error its parse raised; nothing when npu-smi was not asked."""
    from preflight.checks import npu_idle

    if npu_idle.PROBE not in outputs:
        return {}
    try:
        return {npu_idle.ID: npu_idle.parse(outputs)}
    except Exception as exc:  # noqa: BLE001 - handed over as the runner hands it
        return {npu_idle.ID: exc}


def parse(check, outputs):
    """check.parse as the runner calls it for a check that USES npu.idle."""
    return check.parse(outputs, used(outputs))


def followup(check, outputs, node, params):
    """check.followup as the runner calls it for a check that USES npu.idle."""
    return check.followup(outputs, node, params, used(outputs))
