"""Real podman on simulated nodes: the job's container for the container tests (issue 13, item 5).

Why this shape: Debian's podman runs on this kind of machine with runc, `cgroup_manager =
"cgroupfs"`, a private cgroup namespace and no default ulimits (crun refuses the hybrid cgroups);
the config goes into each node's /etc overlay (/etc/containers, preflight.sim.sshd), so podman
reads it inside the node with or without sudo, and storage ("vfs": no mounts to undo) lives in the
cluster's directory. Images are built offline: `podman import` of a small root filesystem this
module assembles — the node's simulated CANN toolkit tree and a `torch` package of a chosen
version; the interpreter and the shell tools come from the host's /usr, mounted read-only by the
run arguments (`run_args`), as a job's container mounts the host's driver. For the all-reduce the
image has the job's own interpreter at JOB_PYTHON, a path no host has: it runs this machine's
Python with its real torch (mounted read-only at JOB_SITE), so a rank that starts proves it runs
inside the container. Every runtime event goes to `events.log` in the cluster's directory
(`events()`), which is how the tests count runtime calls.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import subprocess
import tarfile
from pathlib import Path

from .cluster import Cluster
from .logins import ETC_DIR

CONTAINERS_CONF = """[containers]
default_ulimits = []
cgroupns = "private"
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"
events_logfile_path = "{events}"
"""
HOST_USR = ("/usr/bin", "/usr/lib", "/usr/lib64", "/usr/share", "/usr/sbin")
# The public CANN image's ENV lines, verbatim (the toolkit's part; the NNAL/ATB lines are left out:
# the simulated nodes have no NNAL): Ascend/cann-container-image, cann/8.3.rc1-910b-ubuntu22.04-py3.11/
# Dockerfile (commit 776486ba), its last stage. `cann_env()` applies them in order as Docker does.
CANN_IMAGE_ENV = (
    "PATH=/usr/local/python3.11.13/bin:${PATH}",
    "ASCEND_TOOLKIT_HOME=/usr/local/Ascend/ascend-toolkit/latest",
    "LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64/common/:/usr/local/Ascend/driver/lib64/driver/:$LD_LIBRARY_PATH",
    "LD_LIBRARY_PATH=${ASCEND_TOOLKIT_HOME}/lib64:${ASCEND_TOOLKIT_HOME}/lib64/plugin/opskernel:${ASCEND_TOOLKIT_HOME}/lib64/plugin/nnengine:${ASCEND_TOOLKIT_HOME}/opp/built-in/op_impl/ai_core/tbe/op_tiling:$LD_LIBRARY_PATH",
    "LD_LIBRARY_PATH=${ASCEND_TOOLKIT_HOME}/tools/aml/lib64:${ASCEND_TOOLKIT_HOME}/tools/aml/lib64/plugin:$LD_LIBRARY_PATH",
    "PYTHONPATH=${ASCEND_TOOLKIT_HOME}/python/site-packages:${ASCEND_TOOLKIT_HOME}/opp/built-in/op_impl/ai_core/tbe:$PYTHONPATH",
    "PATH=${ASCEND_TOOLKIT_HOME}/bin:${ASCEND_TOOLKIT_HOME}/compiler/ccec_compiler/bin:${ASCEND_TOOLKIT_HOME}/tools/ccec_compiler/bin:$PATH",
    "ASCEND_AICPU_PATH=${ASCEND_TOOLKIT_HOME}",
    "ASCEND_OPP_PATH=${ASCEND_TOOLKIT_HOME}/opp",
    "TOOLCHAIN_HOME=${ASCEND_TOOLKIT_HOME}/toolkit",
    "ASCEND_HOME_PATH=${ASCEND_TOOLKIT_HOME}",
)
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # the ubuntu:22.04 base image's PATH


def cann_env(lines: tuple[str, ...] = CANN_IMAGE_ENV) -> dict[str, str]:
    """The image's environment after its ENV lines, each `${X}`/`$X` expanded as Docker does
    (from the values so far; unset is empty)."""
    import re

    env = {"PATH": BASE_PATH}
    for line in lines:
        name, _, value = line.partition("=")
        env[name] = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), ""), value)
    return env

JOB_PYTHON = "/opt/jobpy/bin/python3"
JOB_SITE = "/opt/jobpy/site"


def _base_python() -> str:
    """This machine's interpreter itself (not a venv's link to it)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _torch_site() -> str | None:
    """The site-packages directory holding this machine's torch, if it has one."""
    spec = importlib.util.find_spec("torch")
    return os.path.dirname(os.path.dirname(spec.origin)) if spec and spec.origin else None


def available() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "needs root (rootful podman in the nodes' namespaces)"
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            return False, f"{tool} not installed (apt-get install podman runc)"
    return True, ""


def pyver() -> str:
    out = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


class JobImages:
    """Podman config, images and containers for one simulated cluster; `close()` removes them."""

    def __init__(self, cluster: Cluster):
        self.c = cluster
        self.root = cluster.dir / "containers"
        self.images: list[str] = []
        self.containers: list[tuple[str, str]] = []  # (node, name)

    def configure(self) -> None:
        """Write each node's /etc/containers and restart its sshd so the overlay carries it."""
        storage = (f'[storage]\ndriver = "vfs"\ngraphroot = "{self.root / "storage"}"\n'
                   f'runroot = "{self.root / "run"}"\n')
        for n in self.c.nodes:
            etc = n.dir / ETC_DIR / "containers"
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "containers.conf").write_text(CONTAINERS_CONF.replace("{events}", str(self.root / "events.log")),
                                                 encoding="utf-8")
            (etc / "storage.conf").write_text(storage, encoding="utf-8")
            self.c.stop_sshd(n.name)
            self.c.start_sshd(n.name)

    def run_args(self, node: str, network: str = "host", devices: bool = True, driver: bool = True) -> list[str]:
        """What the job's `podman run` passes: the host's /usr (the interpreter), the driver, the
        device files (the sim's stand-ins, one per logical device), the network mode."""
        n = self.c.node(node)
        args = ["--network", network]
        for p in HOST_USR:
            if os.path.isdir(p) and not os.path.islink(p):
                args += ["-v", f"{p}:{p}:ro"]
        base = sys.base_prefix
        if not base.startswith("/usr"):  # an interpreter outside /usr (pyenv): its own tree
            args += ["-v", f"{base}:{base}:ro"]
        site = _torch_site()
        if site:
            args += ["-v", f"{site}:{JOB_SITE}:ro"]
        if driver:
            args += ["-v", "/usr/local/Ascend/driver:/usr/local/Ascend/driver:ro",
                     "-v", "/usr/local/Ascend/firmware:/usr/local/Ascend/firmware:ro"]
        if devices:
            dev = n.dir / "dev"
            dev.mkdir(exist_ok=True)
            names = [f"davinci{i}" for i in range(n.devices)] + ["davinci_manager", "devmm_svm", "hisi_hdc"]
            for name in names:
                (dev / name).touch()
                args += ["-v", f"{dev / name}:/dev/{name}"]
        return args

    def deployed_run_args(self, node: str, driver_file: bool = True) -> list[str]:
        """A job container as real deployments start it (Ascend/cann-container-image README's
        `docker run`): the devices, the driver's lib64 and version.info and npu-smi mounted (here
        read-only), the data mounted; no firmware tree. `driver_file=False` leaves the driver's
        version.info to the image. The interpreter and shell tools come from the host's /usr, as
        in run_args."""
        args = [a for a in self.run_args(node, driver=False)]
        args += ["-v", "/usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/:ro",
                 "-v", "/usr/local/sbin/npu-smi:/usr/local/bin/npu-smi:ro"]
        if driver_file:
            args += ["-v", "/usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info:ro"]
        data = str(self.c.dir / "mnt" / "data")
        return args + ["-v", f"{data}:{data}:ro"]

    def build(self, node: str, tag: str, torch: str, env: dict[str, str] | None = None,
              driver_version: str | None = None) -> str:
        """`podman import` (on the node) of a root filesystem with the node's toolkit and torch;
        `env`: the image's ENV (`--change ENV`); `driver_version`: the image carries its own copy of
        the node's driver/version.info with this Version (an image that bakes the driver in)."""
        n = self.c.node(node)
        rootfs = self.root / "rootfs" / tag.replace(":", "_").replace("/", "_")
        shutil.rmtree(rootfs, ignore_errors=True)
        for d in ("usr/local", "etc", "tmp", "proc", "sys", "dev", "run", "root"):
            (rootfs / d).mkdir(parents=True, exist_ok=True)
        for link in ("bin", "lib", "lib64", "sbin"):
            os.symlink(f"usr/{link}", rootfs / link)
        shutil.copytree(n.dir / "ascend" / "ascend-toolkit", rootfs / "usr/local/Ascend/ascend-toolkit", symlinks=True)
        if driver_version:
            info = (n.dir / "ascend" / "driver" / "version.info").read_text(encoding="utf-8")
            (rootfs / "usr/local/Ascend/driver").mkdir(parents=True)
            (rootfs / "usr/local/Ascend/driver/version.info").write_text(
                "\n".join(f"Version={driver_version}" if ln.startswith("Version=") else ln for ln in info.splitlines()) + "\n",
                encoding="utf-8")
        pkg = rootfs / f"usr/local/lib/python{pyver()}/dist-packages/torch"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(f'__version__ = "{torch}"\n', encoding="utf-8")
        meta = pkg.parent / f"torch-{torch}.dist-info"  # what importlib.metadata reads (sw.consistency)
        meta.mkdir()
        (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {torch}\n", encoding="utf-8")
        for name in ("passwd", "group"):
            shutil.copy(f"/etc/{name}", rootfs / "etc" / name)
        job_py = rootfs / JOB_PYTHON.lstrip("/")
        job_py.parent.mkdir(parents=True)
        job_py.write_text(f'#!/bin/sh\nPYTHONPATH={JOB_SITE} exec {_base_python()} "$@"\n', encoding="utf-8")
        job_py.chmod(0o755)
        tar = rootfs.with_suffix(".tar")
        with tarfile.open(tar, "w") as tf:
            tf.add(rootfs, arcname=".")
        import shlex

        changes = " ".join(f"--change {shlex.quote(f'ENV {k}={v}')}" for k, v in (env or {}).items())
        self.exec(node, f"podman import -q {changes} {tar} {tag}")
        self.images.append(tag)
        return tag

    def start(self, node: str, name: str, image: str, args: list[str]) -> None:
        import shlex

        self.containers.append((node, name))
        self.exec(node, f"podman run -d --name {shlex.quote(name)} {' '.join(map(shlex.quote, args))} "
                        f"{shlex.quote(image)} sleep infinity")

    def exec(self, node: str, cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        r = self.c.exec(node, cmd, timeout=120)
        if check and r.returncode != 0:
            raise RuntimeError(f"{node}: {cmd}: {r.stderr.strip()[-400:]}")
        return r

    def ps(self, node: str) -> list[str]:
        """Every container podman knows (running or not), by name."""
        out = self.exec(node, "podman ps -a --format '{{.Names}}'").stdout
        return sorted(ln.strip() for ln in out.splitlines() if ln.strip())

    def events(self, kind: str, since: str) -> list[str]:
        """Names of the containers that had a runtime event `kind` (exec, create, ...) since the
        ISO time `since`, one entry per event, from the cluster's events.log."""
        import json

        path = self.root / "events.log"
        out = []
        for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("Status") == kind and str(e.get("Time", "")) >= since:
                out.append(str(e.get("Name", "")))
        return out

    def close(self) -> None:
        node = self.c.nodes[0].name
        for _, name in self.containers:
            self.exec(node, f"podman rm -f -t 0 {name}", check=False)
        for tag in self.images:
            self.exec(node, f"podman rmi -f {tag}", check=False)
        shutil.rmtree(self.root, ignore_errors=True)


__all__ = ["JobImages", "available"]
