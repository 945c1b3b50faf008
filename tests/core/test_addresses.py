"""Two inventory nodes that are one machine: the load-time warning (preflight.addresses) and where
the user sees it (stderr of `preflight run`, a real process against a refused loopback port)."""
from __future__ import annotations

import os
import socket
import subprocess
import threading
import time

from preflight import addresses
from preflight.node import Node


def n(name, host, port=22, line=None, jump=None) -> Node:
    return Node(name=name, host=host, port=port, source_line=line, proxy_jump=jump)


def test_names_that_resolve_alike_are_one_endpoint():
    table = {"a.example": "10.0.0.5", "alias.example": "10.0.0.5", "c.example": "10.0.0.7"}
    nodes = [n("a", "a.example", line=3), n("b", "alias.example", line=5), n("c", "c.example"), n("d", "10.0.0.5", 2222)]
    found = addresses.shared(nodes, lambda host, port: table.get(host, host))
    assert found == [("10.0.0.5:22", ["a", "b"])]
    [line] = addresses.warnings("inv.yaml", nodes, lambda host, port: table.get(host, host))
    assert line.startswith("inv.yaml: nodes a (line 3), b (line 5) resolve to the same address 10.0.0.5:22")
    assert "smoke.allreduce never pairs them" in line


def test_real_resolver_literal_and_localhost():
    nodes = [n("a", "127.0.0.1"), n("b", "localhost"), n("c", "127.0.0.2")]
    groups = dict((w, names) for w, names in addresses.shared(nodes))
    assert groups == {"127.0.0.1:22": ["a", "b"]} or socket.getaddrinfo("localhost", 22)[0][4][0] != "127.0.0.1"


def test_behind_different_jump_hosts_a_private_address_is_two_machines():
    nodes = [n("a", "10.0.0.5", jump="gw1"), n("b", "10.0.0.5", jump="gw2"), n("c", "10.0.0.5", jump="gw1")]
    assert addresses.shared(nodes, lambda host, port: None) == [("10.0.0.5:22 via gw1", ["a", "c"])]


def test_a_hung_lookup_is_bounded_and_compared_as_written():
    gate = threading.Event()

    def slow(host, port):
        if host == "hangs.example":
            gate.wait(30)
        return {"x.example": "10.0.0.9"}.get(host)
    t0 = time.monotonic()
    found = addresses.shared([n("a", "hangs.example"), n("b", "hangs.example"), n("c", "x.example")], slow, timeout=0.3)
    gate.set()
    assert time.monotonic() - t0 < 3 and found == [("hangs.example:22", ["a", "b"])]


def test_run_says_it_on_stderr_and_still_runs(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"nodes:\n  - {{name: n1, host: 127.0.0.1, port: {port}, connect_timeout: 1}}\n"
                   f"  - {{name: n2, host: 127.0.0.1, port: {port}, connect_timeout: 1}}\n"
                   f"  - {{name: n3, host: 127.0.0.3, port: {port}, connect_timeout: 1}}\n")
    env = {k: v for k, v in os.environ.items() if k != "PREFLIGHT_DEBUG"}
    res = subprocess.run(["preflight", "run", str(inv), "--checks", "ssh.connect", "--format", "json",
                          "--ssh-config", str(tmp_path / "none")], capture_output=True, text=True, timeout=60, env=env)
    warn = [ln for ln in res.stderr.splitlines() if "warning:" in ln]
    assert warn == [f"preflight: warning: {inv}: nodes n1 (line 2), n2 (line 3) resolve to the same address "
                    f"127.0.0.1:{port}: one machine listed 2 times? Its results count 2 times; "
                    f"smoke.allreduce never pairs them"], res.stderr
    assert res.returncode == 3 and '"n3"' in res.stdout  # the run goes on (3: nodes not reached), every node reported
