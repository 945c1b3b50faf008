"""cann.env: the CANN toolkit's set_env.sh works, versions are readable and compatible, and the
launch environment has the toolkit and the driver libraries.

What it checks:
* set_env.sh exists (`<ascend_home>/ascend-toolkit/set_env.sh`, or the newer
  `<ascend_home>/cann/set_env.sh`); sourced in a clean non-interactive bash it sets
  ASCEND_HOME_PATH, ASCEND_TOOLKIT_HOME and ASCEND_OPP_PATH to existing directories and puts the
  toolkit's lib64 into LD_LIBRARY_PATH;
* the toolkit version (`ascend_toolkit_install.info`), the driver's (`driver/version.info`) and
  the firmware's (`firmware/version.info`) are readable (a missing file fails, naming it);
* they are compatible: the driver inside the firmware's `compatible_version_drv` ranges, the
  firmware inside the driver's `compatible_version_fw`, the driver's `Innerversion` code inside
  the toolkit's `compatible_version` list; otherwise it warns quoting both lines;
* the launch environment (what the launcher's shell sees, plus the inventory's env_files) already
  has the toolkit sourced and the driver's lib64/common and lib64/driver in LD_LIBRARY_PATH
  (those belong to the driver, not to set_env.sh); otherwise it warns with the line to add.

Where the job runs in a container (`container:`), each fact is read where it lives: set_env.sh,
the toolkit version and the launch environment inside the job's container (the image's ENV
counts); the driver and firmware versions on the host (a job container mounts the driver and
npu-smi, not the firmware tree: Ascend/cann-container-image's README). The driver version file as
the container sees it must be the host's: a different one (an image carrying its own driver copy)
fails, naming both versions; none at all warns (the driver is not mounted).

Why it matters: without the sourced toolkit, torch_npu cannot find libascendcl/opp and every rank
dies at import; a driver/firmware/toolkit mismatch gives device-id and HCCL errors at runtime
(e.g. `rtGetDeviceIndexByPhyId execute failed`); `source set_env.sh` in ~/.bashrc is skipped by
non-interactive SSH shells, which is how launchers start ranks.

How to fix: install the toolkit (or point ascend_home at it); mount the host's driver into the job's
container read-only (`-v /usr/local/Ascend/driver:/usr/local/Ascend/driver:ro`); add
`source <ascend_home>/ascend-toolkit/set_env.sh` to an env_files script or to the top of ~/.bashrc
(before its interactive-only guard); export the driver lib64 dirs; upgrade driver, firmware and
toolkit to a compatible set (see the compatibility table of the CANN release notes).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Mapping

from preflight import launchenv
from preflight.checkapi import Policy, CommandOutput, Finding, ParseError, Probe, Status, cmd, passed, require_ok, sh
from preflight.checkhelpers import Shell, q
from preflight.ascend import versions

ID = "cann.env"
SCOPE = "node"
POLICY = Policy(
    backend="ascend",
    where="job",  # on a node with a container: inside the job's container
    gate=True,
)
# What to do with a fail/warn (preflight/actions.py): the CANN environment is configuration.
ACTIONS = {"": ("fix_config", "set_env.sh, LD_LIBRARY_PATH and driver/firmware versions (docs/FAILURES.md row 22)")}
DEFAULTS: dict = {}
SET_ENV_CANDIDATES = ("ascend-toolkit/set_env.sh", "cann/set_env.sh")
JOB_DRIVER = "driver_info_job"  # with a container: the driver's version.info as the job sees it
TOOLKIT_VARS = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_OPP_PATH")
DRIVER_LIB_DIRS = ("driver/lib64/common", "driver/lib64/driver")
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _home(node) -> str:
    return node.ascend_home.rstrip("/")


def set_env_script(node) -> Shell:
    """Shell text for the clean shell: find set_env.sh, source it, report the variables, whether
    their directories exist, and the toolkit install.info. Output lines (one shape, framed):
    `@@set_env <path>` + `@@rc <n>` or `@@set_env_missing`; `@@var NAME=value`; `@@dir NAME`
    when that directory exists; `@@info <path>`, the file, `@@end`."""
    return _set_env_script(_home(node))


def _set_env_script(home: str) -> Shell:
    # ascend_home goes in once, as the quoted word of `h=`; the script uses "$h" from there on
    # (inside "${ASCEND_TOOLKIT_HOME:-...}" a quoted word would be literal: that was an injection)
    return sh(
        "h={home}; found=; for f in {cands}; do if [ -f \"$f\" ]; then found=$f; echo \"@@set_env $f\"; "
        ". \"$f\" >/dev/null 2>&1; echo \"@@rc $?\"; break; fi; done; "
        "[ -n \"$found\" ] || echo @@set_env_missing; "
        "for v in {names} LD_LIBRARY_PATH; do eval \"x=\\${{$v-}}\"; "
        "printf '@@var %s=%s\\n' \"$v\" \"$x\"; if [ -n \"$x\" ] && [ -d \"$x\" ]; then echo \"@@dir $v\"; fi; done; "
        "for f in \"${{ASCEND_TOOLKIT_HOME:-$h/ascend-toolkit/latest}}\"/*-linux/ascend_toolkit_install.info; do "
        "if [ -f \"$f\" ]; then echo \"@@info $f\"; cat \"$f\"; echo; echo @@end; break; fi; done",
        home=home, cands=[f"{home}/{c}" for c in SET_ENV_CANDIDATES], names=list(TOOLKIT_VARS))


def probes(node, params) -> dict[str, Probe]:
    """The toolkit and the launch environment where the job runs (the Policy's where="job");
    driver and firmware versions from the host; with a container, also the driver version file as
    the container sees it (JOB_DRIVER), to compare with the host's."""
    home = _home(node)
    driver = home + "/driver/version.info"
    job_side = {JOB_DRIVER: cmd("cat {f}", f=driver, where="job")} if getattr(node, "container", None) else {}
    return {
        "set_env": _set_env_probe(home),
        "driver_info": cmd("cat {f}", f=driver, where="host"),
        "firmware_info": cmd("cat {f}", f=home + "/firmware/version.info", where="host"),
        **launchenv.probe(node),
        **job_side,
    }


@functools.lru_cache(maxsize=64)
def _set_env_probe(home: str) -> Probe:
    """Made once an ascend_home (every node of a cluster shares one): the quoted script is long."""
    return cmd("env -i HOME=\"$HOME\" PATH={path} bash --noprofile --norc -c {script}", path=CLEAN_PATH,
               script=_set_env_script(home))


@dataclass(frozen=True)
class Facts:
    set_env_path: str | None  # None: neither candidate exists
    set_env_rc: int | None
    env: dict[str, str]  # TOOLKIT_VARS and LD_LIBRARY_PATH after sourcing, in the clean shell
    existing_dirs: tuple[str, ...]  # of TOOLKIT_VARS, those naming an existing directory
    toolkit_info_path: str | None
    toolkit: dict[str, str] = field(default_factory=dict)  # ascend_toolkit_install.info
    driver: dict[str, str] = field(default_factory=dict)  # driver/version.info
    firmware: dict[str, str] = field(default_factory=dict)  # firmware/version.info
    missing_files: tuple[str, ...] = ()  # version files that are not there
    launch_env: dict[str, str] | None = None  # None: could not be read
    job_driver: dict[str, str] | None = None  # with a container: its driver/version.info ({}: absent); None: no container

    @property
    def toolkit_version(self) -> str | None:
        return self.toolkit.get("version")

    @property
    def driver_version(self) -> str | None:
        return self.driver.get("Version")

    @property
    def firmware_version(self) -> str | None:
        return self.firmware.get("Version")


def _read_set_env(text: str) -> tuple:
    path = rc = info_path = None
    env: dict[str, str] = {}
    dirs: list[str] = []
    info_lines: list[str] | None = None
    for line in text.splitlines():
        if info_lines is not None:
            if line == "@@end":
                break
            info_lines.append(line)
        elif line.startswith("@@set_env "):
            path = line.split(" ", 1)[1]
        elif line.startswith("@@rc "):
            rc = int(line.split()[1])
        elif line.startswith("@@var "):
            key, _, value = line[6:].partition("=")
            env[key] = value
        elif line.startswith("@@dir "):
            dirs.append(line.split()[1])
        elif line.startswith("@@info "):
            info_path, info_lines = line.split(" ", 1)[1], []
    if "LD_LIBRARY_PATH" not in env:
        raise ParseError("cann.env: the set_env.sh probe printed no variables", text)
    return path, rc, env, tuple(dirs), info_path, "\n".join(info_lines or [])


def _version_file(out: CommandOutput | None, path: str, missing: list[str]) -> dict[str, str]:
    out = require_ok(out, f"cat {path}")
    if out.rc != 0:
        missing.append(path)
        return {}
    return versions.parse_info(out.stdout)


def _launch(out: CommandOutput | None) -> dict[str, str] | None:
    try:
        return launchenv.parse(out)
    except ParseError:
        return None


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    set_env = require_ok(outputs.get("set_env"), "sourcing set_env.sh")
    path, rc, env, dirs, info_path, info_text = _read_set_env(set_env.stdout)
    missing: list[str] = []
    driver_path = _cat_path(outputs, "driver_info")
    driver = _version_file(outputs.get("driver_info"), driver_path, missing)
    firmware = _version_file(outputs.get("firmware_info"), _cat_path(outputs, "firmware_info"), missing)
    toolkit = versions.parse_info(info_text) if info_path else {}
    job_driver = None
    if JOB_DRIVER in outputs:  # a container: what it shows (an error there is the check's error, as for its other probes)
        job_out = require_ok(outputs.get(JOB_DRIVER), f"cat {driver_path} in the job's container")
        job_driver = versions.parse_info(job_out.stdout) if job_out.rc == 0 else {}
    return Facts(path, rc, env, dirs, info_path, toolkit, driver, firmware, tuple(missing),
                 _launch(outputs.get(launchenv.PROBE_NAME)), job_driver)


def _cat_path(outputs, name: str) -> str:
    """The path a `cat` probe read, recovered from its error text (`cat: <path>: No such file`)."""
    out = outputs.get(name)
    text = (out.stderr or out.stdout) if out else ""
    return text.split(":")[1].strip() if text.startswith("cat:") and text.count(":") >= 2 else name


def _lib_dirs(ld_path: str | None) -> set[str]:
    return {p.rstrip("/") for p in (ld_path or "").split(":") if p}


# ---- judgement --------------------------------------------------------------------------------


def _install_problems(facts: Facts, node) -> list[tuple[Status, str, str]]:
    """(status, message, fix) for set_env.sh, the variables, and the version files."""
    home = _home(node)
    if facts.set_env_path is None:
        paths = " or ".join(f"{home}/{c}" for c in SET_ENV_CANDIDATES)
        return [(Status.FAIL, f"set_env.sh not found: looked for {paths}",
                 f"Install the CANN toolkit (Ascend-cann-toolkit_<ver>_linux-<arch>.run --install) or set "
                 f"ascend_home in the inventory to where it is installed")]
    found = []
    if facts.set_env_rc not in (0, None):
        found.append((Status.FAIL, f"sourcing {facts.set_env_path} exited with {facts.set_env_rc}",
                      f"Run `bash -c {q('source ' + q(facts.set_env_path))}` on the node and fix the error it prints"))
    for var in TOOLKIT_VARS:
        value = facts.env.get(var, "")
        if var not in facts.existing_dirs:
            what = f"{var}={value}, not an existing directory" if value else f"{var} not set"
            found.append((Status.FAIL, f"after sourcing {facts.set_env_path}: {what}",
                          f"Reinstall the CANN toolkit so that {facts.set_env_path} sets {var} to its install dir"))
    tk_home = facts.env.get("ASCEND_TOOLKIT_HOME", "").rstrip("/")
    if tk_home and f"{tk_home}/lib64" not in _lib_dirs(facts.env.get("LD_LIBRARY_PATH")):
        found.append((Status.FAIL, f"after sourcing {facts.set_env_path}: LD_LIBRARY_PATH lacks {tk_home}/lib64",
                      f"Reinstall the CANN toolkit; {facts.set_env_path} must add {tk_home}/lib64"))
    for path in facts.missing_files + (() if facts.toolkit_info_path else (f"{tk_home or home + '/ascend-toolkit/latest'}/<arch>-linux/ascend_toolkit_install.info",)):
        found.append((Status.FAIL, f"{path} missing",
                      f"Reinstall the package that owns {path} (driver, firmware or CANN toolkit run package)"))
    return found


def _compat_problems(facts: Facts) -> list[tuple[Status, str, str]]:
    """Driver/firmware/toolkit compatibility, each quoting both lines it compared."""
    drv, fw, tk = facts.driver, facts.firmware, facts.toolkit
    return list(_compat(drv.get("Version"), drv.get("compatible_version_fw"), drv.get("Innerversion"),
                        fw.get("Version"), fw.get("compatible_version_drv"),
                        tk.get("compatible_version"), tk.get("version")))


def _compat(drv_version: str | None, drv_fw_ranges: str | None, drv_inner: str | None, fw_version: str | None,
            fw_drv_ranges: str | None, tk_codes: str | None, tk_version: str | None) -> tuple[tuple[Status, str, str], ...]:
    fix = ("Install a matching driver/firmware/toolkit set (the CANN release notes list the compatible "
           "versions): upgrade with the Ascend-hdk-*-npu-driver/firmware run packages, then reboot")
    found = []
    if drv_version and fw_drv_ranges:
        ranges = versions.parse_ranges(fw_drv_ranges)
        if ranges and not any(versions.in_version_range(drv_version, lo, hi) for lo, hi in ranges):
            found.append((Status.WARN, f"driver Version={drv_version} outside firmware "
                          f"compatible_version_drv={fw_drv_ranges}", fix))
    if fw_version and drv_fw_ranges:
        ranges = versions.parse_ranges(drv_fw_ranges)
        if ranges and not any(versions.in_version_range(fw_version, lo, hi) for lo, hi in ranges):
            found.append((Status.WARN, f"firmware Version={fw_version} outside driver "
                          f"compatible_version_fw={drv_fw_ranges}", fix))
    if drv_inner and tk_codes:
        if versions.code_compatible(drv_inner, tk_codes) is False:
            found.append((Status.WARN, f"driver Innerversion={drv_inner} not in toolkit "
                          f"{tk_version} compatible_version={tk_codes}", fix))
    return tuple(found)


def _launch_problems(facts: Facts, node) -> list[tuple[Status, str, str]]:
    env = facts.launch_env
    if env is None:
        return [(Status.WARN, "launch environment could not be read", f"Run `{launchenv.command(node, 'env')}` "
                 "on the node and fix the env_files it cannot source")]
    found = []
    libs = _lib_dirs(env.get("LD_LIBRARY_PATH"))
    tk_home = (facts.env.get("ASCEND_TOOLKIT_HOME") or "").rstrip("/")
    sourced = bool(env.get("ASCEND_TOOLKIT_HOME") or env.get("ASCEND_HOME_PATH")) and (
        not tk_home or f"{tk_home}/lib64" in libs)
    if not sourced and facts.set_env_path:
        found.append((Status.WARN, "launch environment does not have the CANN toolkit sourced "
                      "(ASCEND_TOOLKIT_HOME unset or its lib64 not in LD_LIBRARY_PATH)",
                      f"Add `source {q(facts.set_env_path)}` to an env_files script of the inventory, or at the "
                      f"top of ~/.bashrc before its interactive-only guard"))
    home = _home(node)
    absent = [f"{home}/{d}" for d in DRIVER_LIB_DIRS if f"{home}/{d}" not in libs]
    if absent:
        found.append((Status.WARN, f"launch environment LD_LIBRARY_PATH lacks the driver's {' '.join(absent)}",
                      f"Add `export LD_LIBRARY_PATH={q(':'.join(absent))}:\"$LD_LIBRARY_PATH\"` to the launch "
                      f"environment (an env_files script, or ~/.bashrc before its interactive-only guard)"))
    return found


def _container_problems(facts: Facts, node) -> list[tuple[Status, str, str]]:
    """The job's container sees the host's driver: its driver/version.info is the host's."""
    seen = facts.job_driver
    if seen is None or not facts.driver:
        return []
    path = f"{_home(node)}/driver/version.info"
    mount = f"-v {q(f'{_home(node)}/driver:{_home(node)}/driver:ro')}"
    if not seen:
        return [(Status.WARN, f"the job's container does not see the driver ({path} absent there)",
                 f"Mount the host's driver into the job's container read-only (`{mount}`), as the CANN images' "
                 "README runs them")]
    if seen.get("Version") != facts.driver.get("Version") or seen.get("Innerversion") != facts.driver.get("Innerversion"):
        return [(Status.FAIL, f"the job's container shows driver Version={seen.get('Version')} "
                 f"({seen.get('Innerversion')}), the host has {facts.driver.get('Version')} "
                 f"({facts.driver.get('Innerversion')}): the image carries its own driver files",
                 f"Mount the host's driver into the job's container (`{mount}`) instead of a copy in the image")]
    return []


def evaluate(facts: Facts, params, node) -> list[Finding]:
    problems = (_install_problems(facts, node) + _compat_problems(facts) + _launch_problems(facts, node)
                + _container_problems(facts, node))
    versions_seen = {"toolkit_version": facts.toolkit_version, "driver_version": facts.driver_version,
                     "firmware_version": facts.firmware_version, "set_env": facts.set_env_path}
    if facts.job_driver is not None:  # the driver version file as the job's container shows it
        versions_seen["job_driver_version"] = facts.job_driver.get("Version")
    if not problems:
        return [passed(f"CANN {facts.toolkit_version}, driver {facts.driver_version}, firmware "
                       f"{facts.firmware_version}: set_env.sh works, versions compatible, launch env sourced",
                       **versions_seen)]
    status = Status.FAIL if any(s is Status.FAIL for s, _, _ in problems) else Status.WARN
    worst_first = sorted(problems, key=lambda p: p[0] is not Status.FAIL)
    return [Finding(status, "; ".join(m for _, m, _ in worst_first),
                    {**versions_seen, "problems": [m for _, m, _ in worst_first], "failed_devices": []},
                    remediation=worst_first[0][2] + (f" (and {len(problems) - 1} more: see details.problems)"
                                                     if len(problems) > 1 else ""))]
