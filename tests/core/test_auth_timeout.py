"""`auth_timeout`: a server that finishes the key exchange but never answers the authentication
request (an sshd stuck on a PAM or LDAP lookup) ends as that node's `timeout` within the node's
auth_timeout, naming it, instead of holding the node until the run's deadline. The server is
paramiko's own server side (a real SSH implementation) whose publickey handler never returns in
time; the client is preflight's SSHTransport unchanged."""
from __future__ import annotations

import socket
import subprocess
import threading
import time

import paramiko
import pytest

from preflight.model import NodeStateKind
from preflight.node import Node
from preflight.transport import ConnectError, ssh


class StuckAuth(paramiko.ServerInterface):
    def __init__(self, release: threading.Event):
        self.release = release

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        self.release.wait(30)  # the directory lookup that never comes back
        return paramiko.AUTH_FAILED


@pytest.fixture
def stuck_server(tmp_path):
    release = threading.Event()
    host_key = paramiko.RSAKey.generate(2048)
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    transports = []

    def serve():
        try:
            conn, _ = lsock.accept()
        except OSError:
            return
        t = paramiko.Transport(conn)
        t.add_server_key(host_key)
        transports.append(t)
        t.start_server(server=StuckAuth(release))

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        yield lsock.getsockname()[1]
    finally:
        release.set()
        lsock.close()
        for t in transports:
            t.close()
        th.join(10)


def test_a_server_that_never_answers_authentication_is_a_timeout_within_auth_timeout(stuck_server, tmp_path):
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=30)
    node = Node("n1", "127.0.0.1", port=stuck_server, user="ops", identity_file=str(key),
                host_key_policy="off", auth_timeout=2.0, connect_timeout=5, banner_timeout=5)
    t0 = time.monotonic()
    with pytest.raises(ConnectError) as info:
        ssh.SSHTransport().connect(node, threading.Event())
    took = time.monotonic() - t0
    assert info.value.state is NodeStateKind.TIMEOUT, (info.value.state, info.value.reason)
    assert "auth" in info.value.reason.lower(), info.value.reason
    assert took < 2.0 + 8, took
