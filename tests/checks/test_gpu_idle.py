from __future__ import annotations

from preflight.checkapi import Status
from preflight.checks import gpu_idle as check
from preflight.nvidia import probes as nv
from tests.checks.nvidia_helpers import H100_TABLE, node, out
from tests.support import fixture_body

P100_BUSY = fixture_body("nvidia-smi__P100_4gpu_python3_processes__readme-capture.txt")


def run(text, devices=8, rc=0):
    facts = check.parse({nv.SMI_PROBE: out(text, rc=rc)})
    return facts, check.evaluate(facts, check.DEFAULTS, node(devices))


def test_idle_h100_passes():
    facts, [f] = run(H100_TABLE)
    assert f.status is Status.PASS and "8 GPUs idle" in f.summary and not check.busy(facts)


def test_processes_fail_naming_gpu_and_pid():
    facts, [f] = run(P100_BUSY, devices=4)
    assert f.status is Status.FAIL and f.details["failed_devices"] == [0, 1, 2, 3]
    assert "GPU 0: pid 280080 python3 (C) 3030 MiB" in f.summary and "kill 280080" in f.remediation
    assert check.busy(facts)


def test_memory_held_without_process_warns():
    # the idle H100 table with GPU 6 holding 40 GiB and no process listed (derived from the sample)
    rows = H100_TABLE.split("\n")
    i = [n for n, r in enumerate(rows) if r.startswith("|   6  NVIDIA")][0] + 1
    rows[i] = rows[i].replace("      1MiB /  81559MiB", "  40960MiB /  81559MiB")
    _, [f] = run("\n".join(rows))
    assert f.status is Status.WARN and f.details["failed_devices"] == [6] and "GPU 6 memory 50%" in f.summary


def test_failing_nvidia_smi_is_left_to_gpu_health():
    _, [f] = run("", rc=127)
    assert f.status is Status.SKIP and "gpu.health" in f.summary
