"""How SSHTransport names connection failures, and which ones it retries (never auth or host key).

The socket layer is replaced here only to produce errors that cannot be made on loopback without
touching a resolver (DNS); the real refused / blackhole / banner / auth / host-key cases run
against real sshd in tests/integration/test_transport_faults.py.
"""
from __future__ import annotations

import errno
import socket
import threading
import time

import pytest

from preflight.model import NodeStateKind
from preflight.node import Node
from preflight.transport import ConnectError
from preflight.transport import ssh
from tests.support import loopback_listener


def fail_with(monkeypatch, exc):
    calls = []

    def create_connection(addr, timeout=None):
        calls.append(addr)
        raise exc

    monkeypatch.setattr(ssh.socket, "create_connection", create_connection)
    return calls


def connect(node: Node):
    with pytest.raises(ConnectError) as info:
        ssh.SSHTransport().connect(node, threading.Event())
    return info.value


def test_dns_failure_is_unreachable_naming_the_host(monkeypatch):
    calls = fail_with(monkeypatch, socket.gaierror(socket.EAI_NONAME, "Name or service not known"))
    err = connect(Node("n1", "node01.example.invalid"))
    assert err.state is NodeStateKind.UNREACHABLE
    assert "cannot resolve node01.example.invalid" in err.reason and len(calls) == 1


def test_refused_is_retried_briefly_then_reported(monkeypatch):
    calls = fail_with(monkeypatch, ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    t0 = time.monotonic()
    err = connect(Node("n1", "10.0.0.1", port=2222))
    assert err.state is NodeStateKind.UNREACHABLE and "connection refused" in err.reason
    assert len(calls) == 1 + len(ssh.RETRY_DELAYS_S) and time.monotonic() - t0 < 2


def test_connect_timeout_is_not_retried(monkeypatch):
    calls = fail_with(monkeypatch, socket.timeout("timed out"))
    err = connect(Node("n1", "10.0.0.1", connect_timeout=3))
    assert "no answer within 3s" in err.reason and len(calls) == 1


def test_no_route_is_named(monkeypatch):
    fail_with(monkeypatch, OSError(errno.EHOSTUNREACH, "No route to host"))
    assert "no route to host" in connect(Node("n1", "10.0.0.1")).reason


@pytest.fixture
def closing_listener():
    """A loopback port whose peer accepts and closes at once (sshd refusing a session: MaxStartups,
    tcp_wrappers)."""
    with loopback_listener(hold=False) as (port, _):
        yield port


def test_peer_closing_at_once_is_closed_by_peer_not_a_banner_timeout(closing_listener, tmp_path):
    import json
    import subprocess
    import sys

    inv = tmp_path / "inv.yaml"
    inv.write_text(f"nodes:\n  - name: n1\n    host: 127.0.0.1\n    port: {closing_listener}\n    banner_timeout: 7\n")
    proc = subprocess.run([sys.executable, "-m", "preflight.cli", "run", str(inv), "--checks", "ssh.connect",
                           "--format", "json", "--ssh-config", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=60)
    node = json.loads(proc.stdout)["nodes"][0]
    assert node["state"] == "unreachable" and "connection closed by peer" in node["error"], node
    assert "banner within" not in node["error"]
    assert proc.stderr == "", proc.stderr


def test_out_of_file_descriptors_is_not_unreachable(monkeypatch):
    """EMFILE is this host's limit: it propagates (the runner makes it exit 4 naming the limit)."""
    calls = fail_with(monkeypatch, OSError(errno.EMFILE, "Too many open files"))
    with pytest.raises(OSError) as info:
        ssh.SSHTransport().connect(Node("n1", "10.0.0.1"), threading.Event())
    assert not isinstance(info.value, ConnectError) and info.value.errno == errno.EMFILE and len(calls) == 1


def test_forks_lowered_to_what_the_descriptor_limit_covers(tmp_path):
    """Run in a child whose hard RLIMIT_NOFILE is 200: the soft limit is raised to it and --forks
    1024 becomes (200 - 64) / 2 = 68."""
    import subprocess
    import sys
    inv = tmp_path / "inv.yaml"
    inv.write_text("nodes:\n  - name: n[001-999]\n    host: h[001-999]\n")
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (100, 200)); "
            "from preflight.inventory import load; from preflight.runner import Runner, Options; "
            "from preflight.transport.local import LocalTransport; "
            "r = Runner(load(sys.argv[1], ssh_config='/nonexistent'), LocalTransport(), Options(forks=1024)); "
            "print(r.forks, r.keep_sessions, resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    out = subprocess.run([sys.executable, "-c", code, str(inv)], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["68", "False", "200"], out.stderr


@pytest.fixture
def banner_then_silence():
    """A loopback 'sshd' that sends its banner and then never answers the key exchange (sshd
    overloaded after accept, or something in the path holding the connection)."""
    with loopback_listener(hold=True, greeting=b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n") as (port, _):
        yield port


def test_a_key_exchange_that_never_comes_is_unreachable_and_starts_no_timer_thread(banner_then_silence,
                                                                                  monkeypatch):
    """start_client's own time limit returns without a word: the node was an internal error
    ('No existing session', exit 4). The handshake's time limit is a deadline, not the
    threading.Timer paramiko starts per connection (a thread each: ~0.3 ms of client CPU)."""
    timers = []

    class CountingTimer(threading.Timer):
        def __init__(self, *args, **kw):
            timers.append(self)
            super().__init__(*args, **kw)

    monkeypatch.setattr(threading, "Timer", CountingTimer)  # the name paramiko.packet looks up
    node = Node("n1", "127.0.0.1", port=banner_then_silence, banner_timeout=1.5, connect_timeout=1)
    t0 = time.monotonic()
    err = connect(node)
    assert err.state is NodeStateKind.UNREACHABLE
    assert "sent its banner but finished no key exchange within 2.5s" in err.reason, err.reason
    assert time.monotonic() - t0 < 10
    assert timers == []
    end = time.monotonic() + 5  # the transport thread ends on its own (its socket is closed)
    while any(t.name.startswith("paramiko") or "Transport" in type(t).__name__ for t in threading.enumerate()):
        assert time.monotonic() < end, [t for t in threading.enumerate()]
        time.sleep(0.05)
