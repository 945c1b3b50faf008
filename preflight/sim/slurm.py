"""Real Slurm on the simulated cluster: munged and slurmctld on the control side, one slurmd per node.

Why real daemons: draining, selecting and fanning out through Slurm are only trustworthy when
Slurm itself answers (its states, its reasons, its refusals, its prolog rules). Debian's
slurm-wlm and munge packages provide them; nothing here imitates Slurm.

What was found to work on a container-like test machine (no systemd, cgroup v2 not delegated):

- each slurmd runs in its node's network namespace entered with `nsenter --net=/run/netns/NODE`
  (not `ip netns exec`, which remounts /sys and hides /sys/fs/cgroup from slurmd), then in a
  private mount+UTS namespace that looks like the node (sshd.node_script: the node's tree on the
  Ascend paths, its /etc/hccn.conf, its host name), so a Prolog or HealthCheckProgram that slurmd
  runs sees exactly what an SSH session on that node sees;
- `ProctrackType=proctrack/linuxproc` and `TaskPlugin=task/none` (no cgroup plugins),
  `MailProg=/bin/true` (no mailer), every daemon in the foreground (`-D`) so its PID is ours;
- `SlurmctldHost=<this host's short name>(<bridge address>)`: slurmctld only runs where the
  host name matches, and slurmds in the namespaces reach it on the bridge;
- one munged per cluster with its own key and socket (`AuthInfo=socket=`), so clusters of
  concurrent sessions never share credentials, and a free SlurmctldPort per cluster.

Everything lives in <cluster dir>/slurm/ (slurm.conf, munge key and socket, state, spool, logs);
`Cluster.down` stops the daemons by PID (they are in the cluster record) and removes the dir.
Clients use the cluster's slurm.conf through `SLURM_CONF` (Cluster.slurm_env()).
"""
from __future__ import annotations

import ipaddress
import os
import secrets
import shlex
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from . import procs, sshd
from .procs import SimError

if TYPE_CHECKING:
    from .cluster import Cluster

MUNGED = "/usr/sbin/munged"
SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
DAEMONS = ("munged", "slurmctld", "slurmd")
SLURMD_PORT = 6818  # each slurmd has its own network namespace, so the default port is free in each


def available() -> tuple[bool, str]:
    """Whether the test bed can run Slurm here, and why not."""
    for path, pkg in ((MUNGED, "munge"), (SLURMCTLD, "slurmctld"), (SLURMD, "slurmd")):
        if not os.path.exists(path):
            return False, f"{path} not found (apt-get install -y slurm-wlm munge; package {pkg})"
    for tool in ("srun", "sbatch", "scontrol", "sinfo"):
        if not shutil.which(tool):
            return False, f"{tool} not on PATH (apt-get install -y slurm-client)"
    if os.geteuid() != 0:
        return False, "Slurm in the test bed needs root (slurmd per network namespace)"
    return True, ""


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def conf_text(sdir: Path, control_name: str, control_addr: str, ctld_port: int,
              nodes: list[tuple[str, str]], extra: Mapping[str, str] | None = None) -> str:
    """slurm.conf for the test bed. `extra` adds or replaces top-level keys (Prolog=, HealthCheckProgram=...)."""
    settings: dict[str, str] = {
        "ClusterName": "pfsim",
        "SlurmctldHost": f"{control_name}({control_addr})",
        "SlurmctldPort": str(ctld_port),
        "SlurmdPort": str(SLURMD_PORT),
        "SlurmUser": "root",
        "SlurmdUser": "root",
        "AuthType": "auth/munge",
        "AuthInfo": f"socket={sdir / 'munge.sock'}",
        "CredType": "cred/munge",
        "StateSaveLocation": str(sdir / "state"),
        "SlurmdSpoolDir": str(sdir / "spool" / "%n"),
        "SlurmctldPidFile": str(sdir / "slurmctld.pid"),
        "SlurmdPidFile": str(sdir / "spool" / "slurmd-%n.pid"),
        "SlurmctldLogFile": str(sdir / "log" / "slurmctld.log"),
        "SlurmdLogFile": str(sdir / "log" / "slurmd-%n.log"),
        "ProctrackType": "proctrack/linuxproc",
        "TaskPlugin": "task/none",
        "MailProg": "/bin/true",
        "ReturnToService": "2",
        "SchedulerType": "sched/backfill",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core",
        "JobAcctGatherType": "jobacct_gather/none",
        "AccountingStorageType": "accounting_storage/none",
        "MpiDefault": "none",
        "SlurmdTimeout": "30",
        "MessageTimeout": "20",
    }
    settings.update(extra or {})
    lines = [f"{k}={v}" for k, v in settings.items() if v != ""]
    lines += [f"NodeName={name} NodeAddr={addr} CPUs=1 State=UNKNOWN" for name, addr in nodes]
    lines.append("PartitionName=sim Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def slurm_dir(c: "Cluster") -> Path:
    return c.dir / "slurm"


def env(c: "Cluster") -> dict[str, str]:
    """The environment a Slurm client needs to talk to this cluster's slurmctld."""
    return dict(os.environ, SLURM_CONF=str(slurm_dir(c) / "slurm.conf"))


def write_conf(c: "Cluster", extra: Mapping[str, str] | None = None) -> Path:
    sdir = slurm_dir(c)
    sl = c.rec["slurm"]
    text = conf_text(sdir, sl["control_name"], sl["control_addr"], sl["ctld_port"],
                     [(n.name, n.host) for n in c.nodes], extra)
    path = sdir / "slurm.conf"
    tmp = sdir / ".slurm.conf.tmp"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    sl["extra"] = dict(extra or {})
    c._save()
    return path


def start(c: "Cluster", timeout: float = 60.0) -> None:
    """Start munged, slurmctld and every node's slurmd; return once every node is idle."""
    ok, why = available()
    if not ok:
        raise SimError(f"slurm: {why}")
    if c.mode != "netns":
        raise SimError("slurm in the test bed needs netns mode (one slurmd per network namespace)")
    sdir = slurm_dir(c)
    if sdir.exists():
        shutil.rmtree(sdir)
    for sub in ("state", "log", "spool"):
        (sdir / sub).mkdir(parents=True)
    for n in c.nodes:
        (sdir / "spool" / n.name).mkdir()
    control_addr = str(ipaddress.ip_network(c.rec["subnet"]).network_address + 1)
    c.rec["slurm"] = {"dir": str(sdir), "control_name": socket.gethostname().split(".")[0],
                      "control_addr": control_addr, "ctld_port": _free_port(control_addr), "extra": {}}
    conf = write_conf(c)
    key = sdir / "munge.key"
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secrets.token_bytes(1024))
    _spawn(c, "munged", None, [MUNGED, "-F", "--force", f"--socket={sdir / 'munge.sock'}",
                                f"--key-file={key}", f"--pid-file={sdir / 'munged.pid'}",
                                f"--seed-file={sdir / 'munged.seed'}", f"--log-file={sdir / 'log' / 'munged.log'}"],
           sdir / "log" / "munged.out")
    _wait(lambda: (sdir / "munge.sock").exists(), 10, "munged did not create its socket", sdir / "log" / "munged.out")
    _spawn(c, "slurmctld", None, [SLURMCTLD, "-D", "-f", str(conf)], sdir / "log" / "slurmctld.out")
    _wait(lambda: _scontrol_ping(c), 20, "slurmctld did not answer", sdir / "log" / "slurmctld.out")
    for n in c.nodes:
        start_slurmd(c, n.name)
    wait_idle(c, [n.name for n in c.nodes], timeout)


def start_slurmd(c: "Cluster", name: str) -> None:
    n = c.node(name)
    sdir = slurm_dir(c)
    conf = sdir / "slurm.conf"
    # /etc/slurm/slurm.conf on the node is the cluster's, as on a real node: programs slurmd runs
    # without SLURM_CONF in their environment (HealthCheckProgram) find it where Slurm looks
    script = sshd.node_script(n.dir, n.name, c.node_binds(n),
                              f"exec {SLURMD} -D -N {shlex.quote(n.name)} -f {shlex.quote(str(conf))}",
                              etc_links={"slurm/slurm.conf": conf},
                              hide=tuple(next(e for e in c.rec["nodes"] if e["name"] == name).get("hide_tools", ())))
    argv = ["nsenter", f"--net=/run/netns/{n.namespace}", "unshare", "--mount", "--uts",
            "--propagation", "private", "sh", "-c", script]
    _spawn(c, "slurmd", n.name, argv, sdir / "log" / f"slurmd-{n.name}.out")


def reconfigure(c: "Cluster", extra: Mapping[str, str]) -> None:
    """Rewrite slurm.conf with these extra keys and have every daemon re-read it (`scontrol reconfigure`)."""
    write_conf(c, extra)
    cp = subprocess.run(["scontrol", "reconfigure"], env=env(c), capture_output=True, text=True, timeout=30)
    if cp.returncode != 0:
        raise SimError(f"scontrol reconfigure failed: {cp.stderr.strip()[:200]}")


def node_states(c: "Cluster") -> dict[str, str]:
    """Node name -> sinfo's long state (idle, drained, down*, ...)."""
    cp = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=env(c), capture_output=True, text=True, timeout=20)
    out = {}
    for line in cp.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            out[parts[0]] = parts[1]
    return out


def wait_idle(c: "Cluster", names: list[str], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = node_states(c)
        if all(states.get(n) == "idle" for n in names):
            return
        time.sleep(0.3)
    late = [f"{n}={states.get(n, '?')}" for n in names if states.get(n) != "idle"]
    raise SimError(f"slurm nodes not idle after {timeout:.0f}s: {', '.join(late[:5])}")


def resume_all(c: "Cluster") -> None:
    """Back to a clean Slurm state between tests: every node that is not idle is resumed."""
    for name, state in node_states(c).items():
        if state != "idle":
            subprocess.run(["scontrol", "update", f"NodeName={name}", "State=RESUME"], env=env(c),
                           capture_output=True, text=True, timeout=20)


def _scontrol_ping(c: "Cluster") -> bool:
    cp = subprocess.run(["scontrol", "ping"], env=env(c), capture_output=True, text=True, timeout=20)
    return cp.returncode == 0 and "UP" in cp.stdout


def _spawn(c: "Cluster", what: str, node: str | None, argv: list[str], log: Path) -> None:
    p = procs.spawn(argv, log)
    c.rec["procs"].append(procs.describe(p.pid, what, node))
    c._save()
    time.sleep(0.05)
    if p.poll() is not None:
        raise SimError(f"{what}{' on ' + node if node else ''} exited at once: {_tail(log)}")


def _wait(ready: Any, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.1)
    raise SimError(f"slurm: {what} within {timeout:.0f}s: {_tail(log)}")


def _tail(log: Path) -> str:
    try:
        return " ".join(log.read_text(errors="replace")[-300:].split())
    except OSError:
        return "(no log)"
