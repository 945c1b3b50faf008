"""The results the runner writes itself, not a check: a node not reached, a check whose probes
were not run (root, sudo, the job's container), a check that raised or could not read its output."""
from __future__ import annotations

from typing import Any

from ..checkapi import Finding, ParseError
from ..model import CommandOutput, NodeStateKind, Result, Status
from ..node import Node
from ..registry import CheckInfo

NODE_UNREACHABLE = "node unreachable"

REMEDY = {
    NodeStateKind.UNREACHABLE: "check that the node is up and sshd listens on that address and port "
                               "(systemctl status ssh; ss -ltn | grep :22)",
    NodeStateKind.AUTH_FAILED: "install the client's public key on the node: ssh-copy-id -i KEY.pub user@host",
    NodeStateKind.HOSTKEY_REJECTED: "verify the node's host key out of band, then record it in known_hosts "
                                    "(the command is in the message)",
    NodeStateKind.TIMEOUT: "raise --deadline, or find why the node is slow (a hung npu-smi or mount): "
                           "run the check alone with --limit NODE",
}


HOST_KEY_WORDS = {"strict": "host key verified", "accept-new": "host key verified or newly recorded",
                  "off": "host key NOT checked (host_key_policy: off)"}


def connected(node: Node) -> str:
    """Identical on every healthy node, so the checklist folds them into one line."""
    return f"connected as {node.user or 'the current user'}; {HOST_KEY_WORDS.get(node.host_key_policy, '')}"


def result(check: str, node: str | None, f: Finding, duration: float) -> Result:
    return Result(check, f.node if f.node is not None else node, f.status, f.summary, dict(f.details),
                  f.remediation, duration, f.action)


PRIVILEGE_WORDS = ("sudo", "needs root")  # how batch.NEEDS_ROOT and batch.SUDO_REFUSED begin


class ProbesNotRun(Exception):
    """A check with probes not run: root the login user lacks (no become), sudo -n refused, or the
    job's container runtime could not start them. Nothing of the check can be judged on that node."""

    def __init__(self, why: str, commands: list[str], user: str, group: str | None):
        super().__init__(why)
        self.why, self.commands, self.user, self.group = why, commands, user, group

    @classmethod
    def of(cls, outputs: dict[str, CommandOutput], node: Node, info: CheckInfo) -> "ProbesNotRun | None":
        # a host check that looks into the container itself (container.runtime) reads the runtime's answer
        not_run = {name: o.denied for name, o in outputs.items()
                   if o.denied and (info.where == "job" or o.denied.startswith(PRIVILEGE_WORDS))}
        denied = list(not_run.values())
        if not denied:
            return None
        return cls(denied[0], sorted(not_run),
                   node.user or "the login user", info.privilege_group)

    def finding(self) -> Finding:
        if not self.why.startswith(PRIVILEGE_WORDS):  # the job's container (RUNTIME_ERROR_RC)
            fix = ("start the job's container on this node (or name the running one in `container: name:`), or "
                   "load its image there (`container: image:` is run with --pull=never); see container.runtime")
        elif self.why.startswith("sudo"):
            fix = (f"let {self.user} run preflight's root probes without a password: they run as "
                   f"`sudo -n /bin/sh -c <probe>`, so the rule names /bin/sh, e.g. in /etc/sudoers.d/preflight "
                   f"(visudo -f): `{self.user} ALL=(root) NOPASSWD: /bin/sh`; or log in as root")
        else:
            fix = ("set `become: sudo` for the node (with a NOPASSWD sudo rule for the login user), or log in as root"
                   + (f", or add {self.user} to the {self.group} group (usermod -aG {self.group} {self.user})"
                      if self.group else ""))
        return Finding(Status.ERROR, self.why, {"not_run": self.commands}, remediation=fix)


def error_finding(info: CheckInfo, exc: BaseException, outputs: dict[str, CommandOutput]) -> Finding:
    if isinstance(exc, ProbesNotRun):
        return exc.finding()
    if isinstance(exc, ParseError):
        details: dict[str, Any] = {"output": exc.text} if exc.text else {}
        return Finding(Status.ERROR, f"could not read the output: {exc.message}", details)
    return Finding(Status.ERROR, f"internal error in {info.id}: {type(exc).__name__}: {exc}",
                   {"internal": True})

