"""container.runtime: the job's container runtime answers and the container is fit to train in.

Why: on a node whose inventory gives `container:` (docker or podman; `name:` of a running
container, or `image:` for a fresh `run --rm`), the checks that judge the job's side (cann.env's
toolkit, sw.consistency's Python stack, storage.data as mounted) look inside it, and a container
without the NPUs or the driver trains on nothing. How it is judged: the runtime answers (`<runtime> version`); the named container exists and runs, or the
image is present on the node (`inspect`); inside it, the NPUs the node should give the job are
visible (`/dev/davinciN`, one per logical device, plus `/dev/davinci_manager`, `/dev/devmm_svm`,
`/dev/hisi_hdc`) and the host's driver directory is mounted (`<ascend_home>/driver/lib64`). With a
network mode other than `host` it warns: HCCL_IF_IP must then be the container's address, not the
host's. Its details carry the image id, which names the image by content on every node.

Fails: the runtime missing or not answering, a device or the driver not visible inside. Error:
the container absent or not running, the image not on the node (nothing inside can be judged).
Skips on a node with no `container:`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from preflight.container import HOST_NETWORK
from preflight.checkapi import (Policy, CommandOutput, Finding, Probe, cmd, sh, Status, passed, require_ok, skipped,
                                tool_failure)
from preflight.checkhelpers import first_line, graded

ID = "container.runtime"
SCOPE = "node"
POLICY = Policy(
    privilege="root",  # rootful podman, dockerd's socket (docker: or the docker group, applied by the core)
)
# What to do with a fail/warn (preflight/actions.py).
ACTIONS = {
    "runtime_down": ("restart_process", "the container runtime is not running: start its service"),
    "network_mode": ("fix_config", "a non-host network mode: the job's HCCL_IF_IP must be the container's address"),
    "": ("fix_config", "the job's container or image: start it, load it, pass the NPUs and the driver in"),
}
DEFAULTS: dict = {}

VERSION, INSPECT, INSIDE = "runtime_version", "inspect", "inside"
CONTROL_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")


@dataclass(frozen=True)
class Facts:
    configured: bool
    runtime: str = ""
    label: str = ""
    runtime_error: str | None = None
    missing: str | None = None           # the container or image is not there: the runtime's words
    state: str | None = None             # a named container's State.Status
    image_id: str | None = None
    network: str | None = None
    devices: frozenset[str] = field(default_factory=frozenset)
    driver_mounted: bool = False
    expected_devices: int = 0
    driver_dir: str = ""


def probes(node, params) -> dict[str, Probe]:
    c = node.container
    if c is None:
        return {}
    out: dict[str, Probe] = {VERSION: cmd("{rt} version --format {fmt}", rt=c.runtime, fmt="{{.Client.Version}}")}
    if c.name:
        out[INSPECT] = cmd("{rt} container inspect --format {fmt} {name}", rt=c.runtime, name=c.name,
                           fmt="{{.State.Status}} {{.Image}} {{.HostConfig.NetworkMode}}")
    else:
        out[INSPECT] = cmd("{rt} image inspect --format {fmt} {image}", rt=c.runtime, image=c.image, fmt="{{.Id}}")
    inside = sh('for f in /dev/davinci* {devices}; do [ -e "$f" ] && echo "dev $f"; done; [ -d {driver} ] && echo driver',
                devices=list(CONTROL_DEVICES[1:]), driver=f"{node.ascend_home.rstrip('/')}/driver/lib64")
    out[INSIDE] = Probe(inside, job=True)
    return out


def parse(outputs: Mapping[str, CommandOutput]) -> Facts:
    if VERSION not in outputs:
        return Facts(configured=False)
    ver = require_ok(outputs.get(VERSION), "container runtime version")
    if ver.rc != 0:
        return Facts(True, runtime_error=first_line(ver.stderr or ver.stdout) or f"rc {ver.rc}")
    ins = require_ok(outputs.get(INSPECT), "container inspect")
    if ins.rc != 0:
        return Facts(True, missing=first_line(ins.stderr or ins.stdout) or f"rc {ins.rc}")
    words = ins.stdout.split()
    state = image = network = None
    if len(words) == 3:
        state, image, network = words
    elif len(words) == 1:
        image = words[0]
    inside = outputs.get(INSIDE)
    devices: set[str] = set()
    driver = False
    if inside is not None and inside.ok:
        for line in inside.stdout.splitlines():
            if line.startswith("dev "):
                devices.add(line[4:].strip())
            driver = driver or line.strip() == "driver"
    return Facts(True, state=state, image_id=image, network=network, devices=frozenset(devices),
                 driver_mounted=driver)


def evaluate(facts: Facts, params, node) -> list[Finding]:
    c = node.container
    if not facts.configured or c is None:
        return [skipped("no container: in the inventory for this node; the job-side checks look at the host")]
    rt = c.runtime
    if facts.runtime_error:
        return [replace(tool_failure(f"{rt} does not answer on this node: {facts.runtime_error}",
                                     f"install {rt} or start its service (docker: systemctl start docker), or set "
                                     f"container: runtime: to the one the job uses", runtime=rt),
                        action=graded(ACTIONS, "runtime_down"))]
    if facts.missing:
        what = "is not on this node" if c.image else "does not exist on this node"
        fix = (f"load the image on this node ({rt} load / {rt} pull {c.image}): preflight runs it with --pull=never"
               if c.image else f"start the job's container ({rt} start {c.name}) or name the one that runs")
        return [Finding(Status.ERROR, f"{c.label} {what}: {facts.missing}", {"runtime": rt}, remediation=fix)]
    if c.name and facts.state != "running":
        return [Finding(Status.ERROR, f"{c.label} is {facts.state or 'in an unknown state'}, not running",
                        {"runtime": rt, "state": facts.state}, remediation=f"{rt} start {c.name}")]
    details = {"runtime": rt, "image_id": facts.image_id, "network": facts.network}
    wanted = [f"/dev/davinci{i}" for i in range(node.devices)] + list(CONTROL_DEVICES)
    missing = [d for d in wanted if d not in facts.devices]
    out: list[Finding] = []
    if missing:
        out.append(Finding(Status.FAIL, f"{len(missing)} device file(s) not visible in {c.label}: "
                                        f"{', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}",
                           {**details, "missing_devices": missing},
                           remediation="pass them to the container: --device /dev/davinciN for each NPU the job "
                                       "uses, and --device /dev/davinci_manager --device /dev/devmm_svm "
                                       "--device /dev/hisi_hdc"))
    if not facts.driver_mounted:
        drv = f"{node.ascend_home.rstrip('/')}/driver"
        out.append(Finding(Status.FAIL, f"the host's driver ({drv}) is not mounted in {c.label}",
                           details, remediation=f"mount it read-only: -v {drv}:{drv}:ro"))
    network = facts.network or c.network
    if network != HOST_NETWORK:
        out.append(Finding(Status.WARN, f"{c.label} uses network mode {network or 'default (bridge)'}, not host",
                           details, remediation="HCCL_IF_IP (and MASTER_ADDR, if this is the master) must then be "
                                                "the container's address; or run it with --network host",
                           action=graded(ACTIONS, "network_mode")))
    return out or [passed(f"{rt}: {c.label} {'running' if c.name else 'present'}, {node.devices} NPUs and the driver "
                          f"visible inside, host network", **details)]

