"""A tiny paramiko helper for the sim tests: strict host keys, the cluster's client key."""
from __future__ import annotations

import paramiko

from preflight.sim import Cluster


class Shell:
    """One SSH connection per node, reused across a module's tests."""

    def __init__(self, cluster: Cluster):
        self.c = cluster
        self.clients: dict[str, paramiko.SSHClient] = {}

    def client(self, node: str) -> paramiko.SSHClient:
        if node not in self.clients:
            n = self.c.node(node)
            cl = paramiko.SSHClient()
            cl.load_host_keys(str(self.c.known_hosts))
            cl.set_missing_host_key_policy(paramiko.RejectPolicy())
            user = "root" if n.namespace else self.c.rec and _user()
            cl.connect(n.host, port=n.port, username=user, key_filename=str(self.c.client_key),
                       look_for_keys=False, allow_agent=False, timeout=10, banner_timeout=10, auth_timeout=10)
            self.clients[node] = cl
        return self.clients[node]

    def run(self, node: str, cmd: str, timeout: float = 20) -> tuple[int, str, str]:
        _, out, err = self.client(node).exec_command(cmd, timeout=timeout)
        o, e = out.read().decode(), err.read().decode()
        return out.channel.recv_exit_status(), o, e

    def close(self) -> None:
        for cl in self.clients.values():
            cl.close()
        self.clients.clear()


def _user() -> str:
    import getpass
    return getpass.getuser()
