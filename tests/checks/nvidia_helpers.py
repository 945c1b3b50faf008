"""Builders for the NVIDIA check tests: nodes, and probe outputs from the real samples."""
from __future__ import annotations

from preflight.checkapi import CommandOutput
from preflight.node import Node
from preflight.nvidia import probes as nv
from preflight.nvidia.kernlog import RULE_FILTER
from tests.support import fixture_body

H100_Q = fixture_body("nvidia-smi_-q__H100_8gpu__gpud-fixture.txt")
H100_TABLE = fixture_body("nvidia-smi__H100_8gpu_idle__gpud-fixture.txt")
A10_Q = fixture_body("nvidia-smi_-q__A10_1gpu_idle__gpud-e2e.txt")
XID119 = fixture_body("dmesg__xid119_gsp_timeout__gpud-fixture.txt")
XID79 = fixture_body("dmesg__xid79_fallen_off_bus_sxid__gpud-readme.txt")


def node(devices: int = 8, **kw) -> Node:
    return Node("gpu01", "198.18.0.2", devices=devices, backend="nvidia", **kw)


def out(text: str, rc: int = 0, stderr: str = "") -> CommandOutput:
    return CommandOutput(stdout=text, rc=rc, stderr=stderr)


def kernel_log(lines: str = "", source: str = "dmesg") -> CommandOutput:
    """What the KERNEL_LOG probe prints: the source line, then the log's lines that hold one of
    its grep's fixed words (kernlog.RULE_FILTER)."""
    kept = "".join(ln + "\n" for ln in lines.splitlines() if any(w in ln for w in RULE_FILTER))
    return out(f"@@source {source}\n{kept}")


def at_bus(q: str, index: int, bus: str) -> str:
    """The -q report with GPU `index`'s bus id set to `bus` (`00000000:91:00.0`): a log sample's GPU."""
    report_bus = q.split("\nGPU ")[index + 1].split("\n")[0]
    return q.replace(f"GPU {report_bus}\n", f"GPU {bus}\n")


def gpu_block(text: str, index: int) -> tuple[int, int]:
    """(start, end) offsets of the index-th `GPU <bus>` block of a -q report."""
    starts = [i for i in range(len(text)) if text.startswith("\nGPU 0000", i)]
    end = starts[index + 1] if index + 1 < len(starts) else len(text)
    return starts[index], end


def edit_gpu(text: str, index: int, old: str, new: str) -> str:
    """The -q report with `old` replaced by `new` inside one GPU's block only (a derived variant)."""
    a, b = gpu_block(text, index)
    block = text[a:b]
    assert old in block, old
    return text[:a] + block.replace(old, new, 1) + text[b:]


def health_outputs(q: str | None = None, log: CommandOutput | None = None) -> dict[str, CommandOutput]:
    return {nv.QUERY_PROBE: out(H100_HEALTHY if q is None else q), nv.KERNEL_PROBE: log or kernel_log()}


# The real 8x H100 capture is not all healthy: GPU 2 (00000000:75:00.0) has `HW Power Brake
# Slowdown` and `SW Thermal Slowdown` Active. The healthy baseline is that report with GPU 2's two
# reasons set to Not Active (derived in code; the fixture body stays as captured).
H100_HEALTHY = edit_gpu(edit_gpu(H100_Q, 2, "HW Power Brake Slowdown       : Active", "HW Power Brake Slowdown       : Not Active"),
                        2, "SW Thermal Slowdown               : Active", "SW Thermal Slowdown               : Not Active")
