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
