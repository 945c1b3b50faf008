from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from preflight.checks import cann_env as check
from preflight.checkapi import CommandOutput, Status
from preflight.container import Container
from preflight.registry import discover
from tests.checks.ascend_helpers import node
from tests.support import fixture_body

DRIVER = fixture_body("driver_version.info__23.0.7__mindcluster-fixture.txt")
FIRMWARE = fixture_body("firmware_version.info__7.1.0.11.220__mindcluster-fixture.txt")
TOOLKIT = fixture_body("ascend_toolkit_install.info__7.0.T10__mindcluster-fixture.txt")
TOOLKIT_83 = fixture_body("ascend_toolkit_install.info__8.3.RC2__vllm-ascend-6512.txt")
# The launch environment of the vllm-ascend A3 container sample (env after sourcing set_env.sh).
A3_ENV = dict(ln.split("=", 1) for ln in fixture_body("env_after_set_env_sh__A3_container__vllm-ascend-4930.txt").splitlines())
TK = "/usr/local/Ascend/ascend-toolkit/latest"


def set_env_out(info=TOOLKIT, path="/usr/local/Ascend/ascend-toolkit/set_env.sh", dirs=check.TOOLKIT_VARS, ld=None):
    """The output shape of check.set_env_script (documented there), with the A3 sample's values."""
    lines = [f"@@set_env {path}", "@@rc 0"] if path else ["@@set_env_missing"]
    for var in check.TOOLKIT_VARS:
        lines.append(f"@@var {var}={A3_ENV[var] if path else ''}")
        if var in dirs and path:
            lines.append(f"@@dir {var}")
    lines.append(f"@@var LD_LIBRARY_PATH={A3_ENV['LD_LIBRARY_PATH'] if ld is None else ld}")
    if info:
        lines += [f"@@info {TK}/aarch64-linux/ascend_toolkit_install.info", info, "@@end"]
    return CommandOutput(stdout="\n".join(lines) + "\n")


def env0(env: dict) -> CommandOutput:
    return CommandOutput(stdout="".join(f"{k}={v}\0" for k, v in env.items()))


def outputs(set_env=None, driver=DRIVER, firmware=FIRMWARE, launch=A3_ENV):
    missing = lambda p: CommandOutput(stderr=f"cat: {p}: No such file or directory\n", rc=1)  # noqa: E731
    return {
        "set_env": set_env or set_env_out(),
        "driver_info": CommandOutput(stdout=driver) if driver else missing("/usr/local/Ascend/driver/version.info"),
        "firmware_info": CommandOutput(stdout=firmware) if firmware else missing("/usr/local/Ascend/firmware/version.info"),
        "launch_env": env0(launch),
    }


def run(outs):
    return check.evaluate(check.parse(outs), {}, node())


def compatible_driver():
    """The driver sample moved inside the firmware's 23.0.0.x range and the 8.3.RC2 code list."""
    return DRIVER.replace("Version=23.0.7", "Version=23.0.0").replace("V100R001C15SPC012B220", "V100R001C23SPC001B100")


def test_compatible_set_passes_and_exposes_versions():
    f = check.parse(outputs(set_env_out(info=TOOLKIT_83), driver=compatible_driver()))
    assert (f.toolkit_version, f.driver_version, f.firmware_version) == ("8.3.RC2", "23.0.0", "7.1.0.11.220")
    [r] = check.evaluate(f, {}, node())
    assert r.status is Status.PASS, r.summary


def test_mindcluster_fixture_set_warns_quoting_both_lines():
    [r] = run(outputs())
    assert r.status is Status.WARN
    assert "driver Version=23.0.7 outside firmware compatible_version_drv=[23.0.rc3,23.0.rc3.],[23.0.0,23.0.0.]" in r.summary
    assert "driver Innerversion=V100R001C15SPC012B220 not in toolkit 7.0.T10 compatible_version=" in r.summary


@pytest.mark.parametrize("name", ["ascend_toolkit_install.info__8.2.RC1_and_8.1.RC1__vllm-ascend-6063_1047.txt",
                                  "ascend_toolkit_install.info__8.5.0_and_8.1.RC1__vllm-ascend-4930_960.txt",
                                  "ascend_toolkit_install.info__8.3.RC2__vllm-ascend-6512.txt",
                                  "ascend_toolkit_install.info__7.0.T10__mindcluster-fixture.txt"])
def test_toolkit_info_samples(name):
    for block in fixture_body(name).strip().split("\n\n"):
        f = check.parse(outputs(set_env_out(info=block)))
        assert f.toolkit_version and f.toolkit_version in name


def test_set_env_missing_fails_naming_both_paths():
    [r] = run(outputs(set_env_out(path=None, info=None, ld="")))
    assert r.status is Status.FAIL
    assert "/usr/local/Ascend/ascend-toolkit/set_env.sh or /usr/local/Ascend/cann/set_env.sh" in r.summary


def test_missing_version_file_fails_naming_path():
    [r] = run(outputs(set_env_out(info=TOOLKIT_83), driver=compatible_driver(), firmware=None))
    assert r.status is Status.FAIL and "/usr/local/Ascend/firmware/version.info missing" in r.summary


def test_var_not_a_directory_fails():
    [r] = run(outputs(set_env_out(info=TOOLKIT_83, dirs=("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")), driver=compatible_driver()))
    assert r.status is Status.FAIL and "ASCEND_OPP_PATH=" in r.summary


def test_toolkit_lib64_missing_from_set_env_fails():
    [r] = run(outputs(set_env_out(info=TOOLKIT_83, ld="/usr/lib"), driver=compatible_driver()))
    assert r.status is Status.FAIL and f"lacks {TK}/lib64" in r.summary


def test_launch_env_not_sourced_warns_with_line_to_add():
    bare = {"PATH": "/usr/bin", "HOME": "/root"}
    [r] = run(outputs(set_env_out(info=TOOLKIT_83), driver=compatible_driver(), launch=bare))
    assert r.status is Status.WARN
    assert "not have the CANN toolkit sourced" in r.summary
    assert "source /usr/local/Ascend/ascend-toolkit/set_env.sh" in r.remediation
    assert "lacks the driver's /usr/local/Ascend/driver/lib64/common" in r.summary


def test_driver_lib_dirs_with_trailing_slash_count():
    # The A3 sample writes "/usr/local/Ascend/driver/lib64/common/": the slash must not matter.
    env = dict(A3_ENV, LD_LIBRARY_PATH=f"{TK}/lib64:/usr/local/Ascend/driver/lib64/common/:/usr/local/Ascend/driver/lib64/driver/")
    assert run(outputs(set_env_out(info=TOOLKIT_83), driver=compatible_driver(), launch=env))[0].status is Status.PASS


def test_probe_script_runs_in_sh(tmp_path: Path):
    """The set_env probe, run by `sh -c` as the runner does, on a fake ascend_home."""
    home = tmp_path / "Ascend"
    tk = home / "ascend-toolkit" / "latest"
    (tk / "aarch64-linux").mkdir(parents=True)
    (tk / "opp").mkdir()
    (tk / "aarch64-linux" / "ascend_toolkit_install.info").write_text(TOOLKIT_83)
    (home / "ascend-toolkit" / "set_env.sh").write_text(
        f"export ASCEND_TOOLKIT_HOME={tk}\nexport ASCEND_HOME_PATH={tk}\nexport ASCEND_OPP_PATH={tk}/opp\n"
        f"export LD_LIBRARY_PATH={tk}/lib64:$LD_LIBRARY_PATH\n")
    n = node(ascend_home=str(home))
    cmd = check.probes(n, {})["set_env"].cmd
    done = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=30)
    f = check.parse({**outputs(), "set_env": CommandOutput(stdout=done.stdout, rc=done.returncode)})
    assert f.set_env_path == str(home / "ascend-toolkit" / "set_env.sh")
    assert f.existing_dirs == check.TOOLKIT_VARS and f.toolkit_version == "8.3.RC2"


def test_with_a_container_versions_come_from_the_host_and_the_rest_from_the_job():
    """Each probe's place (SPEC §2.10): driver and firmware on the host, the toolkit and the launch
    environment in the job's container, plus the driver file as the container sees it."""
    info = discover()["cann.env"]
    plain = check.probes(node(), {})
    assert check.JOB_DRIVER not in plain
    n = replace(node(), container=Container(runtime="podman", name="job"))
    probes = check.probes(n, {})
    placed = {name: p.job if p.job is not None else info.where == "job" for name, p in probes.items()}
    assert placed == {"set_env": True, "driver_info": False, "firmware_info": False, "launch_env": True,
                      check.JOB_DRIVER: True}
    assert probes[check.JOB_DRIVER].cmd == probes["driver_info"].cmd  # the same file, read in both places


def test_container_showing_the_hosts_driver_passes():
    outs = {**outputs(set_env_out(info=TOOLKIT_83), driver=compatible_driver()),
            check.JOB_DRIVER: CommandOutput(stdout=compatible_driver())}
    (f,) = run(outs)
    assert f.status is Status.PASS and f.details["job_driver_version"] == "23.0.0"


def test_container_with_another_driver_fails_naming_both():
    # the image carries its own copy of the sample driver (23.0.7) while the host runs 23.0.0
    outs = {**outputs(set_env_out(info=TOOLKIT_83), driver=compatible_driver()), check.JOB_DRIVER: CommandOutput(stdout=DRIVER)}
    (f,) = run(outs)
    assert f.status is Status.FAIL
    assert ("the job's container shows driver Version=23.0.7 (V100R001C15SPC012B220), the host has 23.0.0 "
            "(V100R001C23SPC001B100)") in f.summary
    assert "/usr/local/Ascend/driver:/usr/local/Ascend/driver:ro" in f.remediation


def test_container_without_the_driver_warns():
    gone = CommandOutput(stderr="cat: /usr/local/Ascend/driver/version.info: No such file or directory\n", rc=1)
    (f,) = run({**outputs(set_env_out(info=TOOLKIT_83), driver=compatible_driver()), check.JOB_DRIVER: gone})
    assert f.status is Status.WARN and "the job's container does not see the driver" in f.summary
