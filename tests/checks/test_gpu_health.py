"""gpu.health on the real nvidia-smi -q samples; faults are derived from them by editing one
GPU's block (the body of a fixture is never changed)."""
from __future__ import annotations

import pytest

from preflight.checkapi import CommandOutput, ParseError, Status
from preflight.checks import gpu_health as check
from preflight.nvidia import probes as nv
from tests.checks.nvidia_helpers import (A10_Q, at_bus, H100_HEALTHY, H100_Q, XID79, XID119, edit_gpu, health_outputs, kernel_log, node,
                                         out)
from tests.support import fixture_body

VOL_DRAM = "        Volatile\n            SRAM Correctable              : 0\n            SRAM Uncorrectable Parity     : 0\n" \
           "            SRAM Uncorrectable SEC-DED    : 0\n            DRAM Correctable              : 0\n" \
           "            DRAM Uncorrectable            : 0"


def run(outputs, devices=8, **params):
    return check.evaluate(check.parse(outputs), {**check.DEFAULTS, **params}, node(devices))


def test_healthy_h100_node_passes():
    [f] = run(health_outputs())
    assert f.status is Status.PASS, f.summary
    assert "8 GPUs healthy" in f.summary and "535.183.01" in f.summary


def test_the_real_h100_capture_flags_its_power_braked_gpu_2_only():
    [f] = run(health_outputs(H100_Q))
    assert f.status is Status.FAIL and f.details["failed_devices"] == [2]
    assert "GPU 2 clocks slowed down: HW Power Brake Slowdown, SW Thermal Slowdown Active" in f.summary


def test_volatile_uncorrectable_ecc_fails_on_that_gpu_only():
    q = edit_gpu(H100_HEALTHY, 3, VOL_DRAM, VOL_DRAM[:-1] + "2")
    [f] = run(health_outputs(q))
    assert f.status is Status.FAIL and f.details["failed_devices"] == [3]
    assert "GPU 3 2 uncorrectable ECC" in f.summary and "nvidia-smi -r -i 3" in f.remediation


def test_aggregate_only_warns():
    agg = "        Aggregate\n            SRAM Correctable              : 0\n            SRAM Uncorrectable Parity     : 0"
    q = edit_gpu(H100_HEALTHY, 1, agg, agg[:-1] + "1")
    [f] = run(health_outputs(q))
    assert f.status is Status.WARN and f.details["failed_devices"] == [1]


@pytest.mark.parametrize("old,new,words", [
    ("        Pending                           : No\n        Remapping Failure",
     "        Pending                           : Yes\n        Remapping Failure", "row remap pending"),
    ("Remapping Failure Occurred        : No", "Remapping Failure Occurred        : Yes", "row remapping failure"),
    ("Reset Required                    : No", "Reset Required                    : Yes", "Reset Required"),
    ("        HW Slowdown                       : Not Active", "        HW Slowdown                       : Active",
     "HW Slowdown Active"),
    ("                Current                   : 16x", "                Current                   : 8x", "PCIe link x8, expected x16"),
])
def test_each_gpu_fault_fails_naming_gpu(old, new, words):
    q = edit_gpu(H100_HEALTHY, 5, old, new)
    [f] = run(health_outputs(q))
    assert f.status is Status.FAIL, f.summary
    assert f.details["failed_devices"] == [5] and words in f.summary


def test_remap_pending_key_is_read_under_remapped_rows_not_mig_or_ecc_mode():
    """`Pending` also appears under MIG Mode and ECC Mode: only Remapped Rows' counts."""
    q = edit_gpu(H100_HEALTHY, 0, "    MIG Mode\n        Current                           : Disabled\n"
                            "        Pending                           : Disabled",
                 "    MIG Mode\n        Current                           : Disabled\n"
                 "        Pending                           : Yes")
    [f] = run(health_outputs(q))
    assert f.status is Status.PASS


def test_idle_gpu_at_gen1_is_not_a_fault_but_a_busy_one_warns():
    [f] = run(health_outputs(A10_Q), devices=1)
    assert f.status is Status.PASS  # the real A10 sample: Gen 1 of 4 at idle
    busy = A10_Q.replace("        Idle                              : Active", "        Idle                              : Not Active")
    [f] = run(health_outputs(busy), devices=1)
    assert f.status is Status.WARN and "PCIe Gen1 while busy, expected Gen4" in f.summary


def test_hw_power_brake_as_gpud_derives_it_fails():
    slow = A10_Q.replace("        HW Slowdown                       : Not Active", "        HW Slowdown                       : Active") \
                .replace("            HW Power Brake Slowdown       : Not Active", "            HW Power Brake Slowdown       : Active")
    [f] = run(health_outputs(slow), devices=1)
    assert f.status is Status.FAIL and "HW Slowdown, HW Power Brake Slowdown Active" in f.summary


def test_missing_gpu_fails_with_count():
    [f] = run(health_outputs(), devices=9)
    assert f.status is Status.FAIL and "8 GPUs listed by nvidia-smi, expected 9" in f.summary


def test_cut_short_report_is_a_parse_error():
    """gpud's 'invalid' capture says Attached GPUs 8 and prints one block."""
    with pytest.raises(ParseError, match="cut short"):
        check.parse(health_outputs(fixture_body("nvidia-smi_-q__H100_1gpu_INVALID__gpud-fixture.txt")))


def test_xid_79_fails_on_the_gpu_at_that_bus_address():
    # the log sample's GPU is at 0000:91:00: give that bus id to GPU 2 of the H100 report
    report_bus = H100_HEALTHY.split("\nGPU ")[3].split("\n")[0]
    q = H100_HEALTHY.replace(f"GPU {report_bus}\n", "GPU 00000000:91:00.0\n")
    [f] = run(health_outputs(q, kernel_log(XID79)))
    assert f.status is Status.FAIL and f.details["failed_devices"] == [2]
    assert "Xid 79 GPU has fallen off the bus" in f.summary and "Reboot the node" in f.remediation


def test_xid_119_repeated_lines_give_one_problem_and_unknown_bus_is_still_reported():
    [f] = run(health_outputs(log=kernel_log(XID119)))
    assert f.status is Status.FAIL
    assert f.summary.count("Xid 119") == 1 and "(PCI 0000:9b:00, missing from nvidia-smi)" in f.summary
    assert f.details["failed_devices"] == []


def test_application_xid_warns():
    line = "[...] NVRM: Xid (PCI:0000:01:00): 94, pid=7062, Contained: CE User Channel (0x9). RST: No, D-RST: No"
    [f] = run(health_outputs(at_bus(H100_HEALTHY, 0, "00000000:01:00.0"), kernel_log(line)))
    assert f.status is Status.WARN and "GPU 0 Xid 94 Contained ECC error" in f.summary
    [f] = run(health_outputs(log=kernel_log(line)))  # the same line naming a GPU nvidia-smi does not list
    assert f.status is Status.FAIL and "(PCI 0000:01:00, missing from nvidia-smi)" in f.summary


def test_unreadable_kernel_log_is_said_not_failed():
    log = out("@@unreadable\ndmesg: read kernel buffer failed: Operation not permitted\n")
    [f] = run(health_outputs(log=log))
    assert f.status is Status.PASS and "kernel log not readable (dmesg: read kernel buffer failed" in f.summary


def test_nvidia_smi_missing_or_failing_fails_naming_it():
    [f] = run({nv.QUERY_PROBE: out("", rc=127, stderr="sh: 1: nvidia-smi: not found"), nv.KERNEL_PROBE: kernel_log()})
    assert f.status is Status.FAIL and "nvidia-smi not found" in f.summary
    msg = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    [f] = run({nv.QUERY_PROBE: out(msg + "\n", rc=9), nv.KERNEL_PROBE: kernel_log()})
    assert f.status is Status.FAIL and msg in f.summary


@pytest.mark.parametrize("name, bus, said", [
    ("nvidia-smi__gpu_is_lost__owod-issue81.txt", "0000:02:00.0", "GPU is lost"),
    ("nvidia-smi__gpu_unknown_error_off_the_bus__open-gpu-kernel-modules-issue387.txt", "0000:0B:00.0", "Unknown Error"),
])
def test_a_gpu_the_driver_cannot_reach_is_named_with_a_reboot(name, bus, said):
    """Real nvidia-smi lines for a lost GPU: the finding names the GPU's bus id and asks for a
    reboot (then a reseat), not a driver reload."""
    [f] = run({nv.QUERY_PROBE: out(fixture_body(name), rc=15), nv.KERNEL_PROBE: kernel_log()})
    assert f.status is Status.FAIL and f"cannot reach GPU {bus}: {said}" in f.summary
    assert f.details["lost_gpus"] == [bus] and f.remediation.startswith(f"Reboot the node to recover GPU {bus}")
    assert f.action == "reboot_node"


def test_hang_is_an_error_not_a_verdict():
    with pytest.raises(ParseError):
        check.parse({nv.QUERY_PROBE: CommandOutput(rc=124, timed_out=True), nv.KERNEL_PROBE: kernel_log()})


def test_xid_findings_are_graded_as_the_xid_table_says():
    """gpu.health's Xid actions come from preflight/nvidia/xid.py, by the Xid's number: an
    application-level Xid is a job restart, Xid 79 a reboot, Xid 48 a reset, an unknown one watched;
    with several, the worst wins."""
    bus = H100_HEALTHY.split("\nGPU ")[1].split("\n")[0]  # GPU 0's, as -q prints it: 00000000:18:00.0
    pci = bus[4:].rsplit(".", 1)[0]

    def graded(*xids, at=pci):
        lines = "\n".join(f"[...] NVRM: Xid (PCI:{at}): {n}, pid=7062, some text" for n in xids)
        [f] = run(health_outputs(log=kernel_log(lines)))
        return f.action
    assert graded(13) == "restart_process"
    assert graded(79) == "reboot_node"
    assert graded(48) == "reset_device"
    assert graded(999) == "monitor"
    assert graded(999, 13, 48) == "reset_device"
    assert graded(13, at="0000:01:00") == "reboot_node"  # a GPU the log names that nvidia-smi does not list


# ---- the kernel log beyond Xid lines: real samples (tests/fixtures/nvidia/*mesg*, journalctl__*) --------------

FALLEN_NO_XID = fixture_body("dmesg__fallen_off_bus_no_xid_multiline__nvsentinel-issue155.txt")
INIT_TWO = fixture_body("dmesg__rminitadapter_failed_two_gpus__gpu-operator-issue649.txt")
INIT_JOURNAL = fixture_body("journalctl__rminitadapter_failed__cuda-samples-issue104.txt")
NOUVEAU = fixture_body("dmesg__nouveau_bound_AD107__dasharo-issue1597.txt")
NOUVEAU_OWNS = fixture_body("dmesg__nvrm_probe_not_called_nouveau__bigdata-issue133.txt")


def test_gpu_fallen_off_the_bus_without_an_xid_fails_that_gpu():
    # three lines, the address only on the first (driver 570): tied to GPU 3 at 0000:b3:00
    [f] = run(health_outputs(at_bus(H100_HEALTHY, 3, "00000000:B3:00.0"), kernel_log(FALLEN_NO_XID)))
    assert f.status is Status.FAIL and f.details["failed_devices"] == [3]
    assert "GPU 3 GPU has fallen off the bus (no Xid logged) in the kernel log" in f.summary
    assert "Reboot the node" in f.remediation


def test_fallen_off_the_bus_beside_xid_79_is_one_gpu_and_the_nvswitch_sxids_are_named():
    [f] = run(health_outputs(at_bus(H100_HEALTHY, 2, "00000000:91:00.0"), kernel_log(XID79)))
    assert f.status is Status.FAIL and f.details["failed_devices"] == [2]
    assert "GPU 2 Xid 79" in f.summary and "GPU 2 GPU has fallen off the bus in the kernel log" in f.summary
    assert f.summary.count("NVSwitch fatal SXid") == 3  # three NVSwitches, each once
    assert "(NVSwitch at PCI 0000:06:00)" in f.summary and "missing from nvidia-smi" not in f.summary


def test_rminitadapter_failed_names_each_gpu_and_a_gpu_missing_from_nvidia_smi_fails_the_node():
    # two GPUs the driver could not initialise: one nvidia-smi still lists (GPU 5), one it does not
    [f] = run(health_outputs(at_bus(H100_HEALTHY, 5, "00000000:04:01.0"), kernel_log(INIT_TWO)))
    assert f.status is Status.FAIL and f.details["failed_devices"] == [5]
    assert "GPU 5 RmInitAdapter failed: the driver could not initialise the GPU in the kernel log" in f.summary
    assert "(PCI 0000:04:02, missing from nvidia-smi)" in f.summary and f.summary.count("RmInitAdapter failed!") == 2
    [f] = run(health_outputs(log=kernel_log(INIT_JOURNAL, source="journalctl -k -b")))  # journalctl's prefix
    assert f.status is Status.FAIL and "(PCI 0000:13:00, missing from nvidia-smi)" in f.summary


def test_nouveau_bound_to_an_nvidia_gpu_fails_with_the_blacklist_fix():
    [f] = run(health_outputs(at_bus(H100_HEALTHY, 0, "00000000:01:00.0"), kernel_log(NOUVEAU)))
    assert f.status is Status.FAIL and f.details["failed_devices"] == [0]
    assert "GPU 0 the nouveau driver is bound to this NVIDIA GPU" in f.summary and "blacklist nouveau" in f.remediation
    [f] = run(health_outputs(log=kernel_log(NOUVEAU_OWNS)))  # the NVIDIA driver's own words, no address
    assert f.status is Status.FAIL and f.summary.count("another driver (nouveau) holds the NVIDIA GPUs") == 1


def test_xid_63_and_the_remap_state_agree():
    line = "[...] NVRM: Xid (PCI:0000:01:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row marked for remapping, reset gpu to activate."
    q = at_bus(H100_HEALTHY, 0, "00000000:01:00.0")
    [f] = run(health_outputs(q, kernel_log(line)))  # the real H100 report: Remapped Rows Pending: No
    assert f.status is Status.WARN and "Xid 63" in f.summary and "applied since: Remapped Rows: Pending: No" in f.summary
    pending = edit_gpu(q, 0, "        Pending                           : No\n        Remapping Failure", 
                       "        Pending                           : Yes\n        Remapping Failure")
    [f] = run(health_outputs(pending, kernel_log(line)))
    assert f.status is Status.FAIL and "Remapped Rows: Pending: Yes" in f.summary


def test_each_kernel_log_finding_gets_its_rule_action():
    cases = [(at_bus(H100_HEALTHY, 0, "00000000:01:00.0"), NOUVEAU, "fix_config"),
             (at_bus(H100_HEALTHY, 3, "00000000:B3:00.0"), FALLEN_NO_XID, "reboot_node"),
             (H100_HEALTHY, INIT_JOURNAL, "reboot_node")]
    for q, log, want in cases:
        [f] = run(health_outputs(q, kernel_log(log)))
        assert f.action == want, f.summary
