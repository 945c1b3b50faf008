"""The SSH transport and runner against real sshd nodes, one fault at a time (issue 3, item 9).

One 6-node netns cluster serves the module; each test breaks one node (or one inventory setting),
checks that exactly that node gets the SPEC state with a precise reason, and repairs it.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import paramiko
import pytest
import yaml

from preflight.inventory import load
from preflight.model import NodeStateKind, Status
from preflight.runner import Options, Runner
from tests.simfixtures import requires_netns
from preflight.transport.batch import ProbeSpec
from preflight.transport.hostkeys import KnownHosts
from preflight.transport.ssh import SSHTransport

pytestmark = requires_netns

SIM_SPEC = {"nodes": 6}
SIM_MODE = "netns"


def write_inventory(cluster, tmp_path: Path, name: str = "inv.yaml", defaults=None, nodes=None) -> str:
    """The sim's inventory with some defaults or node entries changed."""
    doc = yaml.safe_load(Path(cluster.inventory_path).read_text())
    doc["defaults"].update(defaults or {})
    for entry in doc["nodes"]:
        entry.update((nodes or {}).get(entry["name"], {}))
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def connect_only(inv_path: str, **opts):
    KnownHosts.forget_all()  # each test may point at another known_hosts file
    inv = load(inv_path)
    return Runner(inv, SSHTransport(), Options(checks=["ssh.connect"], **opts)).run()


def state_of(report, node: str):
    return next(n for n in report.nodes if n.name == node)


def connect_result(report, node: str):
    return next(r for r in report.results if r.check == "ssh.connect" and r.node == node)


def no_leftover(cluster, node: str, pattern: str) -> bool:
    out = cluster.exec(node, f"ps -eo args | grep -v grep | grep -c -- {pattern!r} || true")
    return out.stdout.strip() == "0"


def session(cluster, node: str):
    KnownHosts.forget_all()
    inv = load(cluster.inventory_path, limit=node)
    t = SSHTransport()
    return t, t.connect(inv.nodes[0], threading.Event())


def test_all_nodes_ok(sim_cluster):
    report = connect_only(sim_cluster.inventory_path)
    assert [n.state for n in report.nodes] == [NodeStateKind.OK] * 6
    assert report.exit_code == 0


def test_unknown_host_key_rejected_and_known_hosts_unchanged(sim_cluster, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    report = connect_only(write_inventory(sim_cluster, tmp_path, defaults={"known_hosts": str(empty)}))
    st = state_of(report, "node01")
    assert st.state is NodeStateKind.HOSTKEY_REJECTED
    assert "unknown host key" in st.error and "SHA256:" in st.error and "ssh-keyscan" in st.error
    assert empty.read_text() == ""
    assert report.exit_code == 3


def test_accept_new_records_keys_then_strict_passes(sim_cluster, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    os.chmod(kh, 0o644)
    inv = write_inventory(sim_cluster, tmp_path, defaults={"known_hosts": str(kh), "host_key_policy": "accept-new"})
    assert connect_only(inv).exit_code == 0
    assert len(kh.read_text().splitlines()) == 6
    assert kh.stat().st_mode & 0o777 == 0o644
    strict = write_inventory(sim_cluster, tmp_path, "strict.yaml", defaults={"known_hosts": str(kh)})
    assert connect_only(strict).exit_code == 0


def test_changed_host_key_rejected_even_with_accept_new(sim_cluster, tmp_path):
    lines = Path(sim_cluster.known_hosts).read_text().splitlines()
    other = paramiko.Ed25519Key.from_private_key_file(sim_cluster.client_key)  # any other ed25519 key
    host = lines[0].split()[0]
    forged = [f"{host} ssh-ed25519 {other.get_base64()}"] + lines[1:]
    kh = tmp_path / "known_hosts"
    kh.write_text("\n".join(forged) + "\n")
    inv = write_inventory(sim_cluster, tmp_path, defaults={"known_hosts": str(kh), "host_key_policy": "accept-new"})
    report = connect_only(inv)
    st = state_of(report, "node01")
    assert st.state is NodeStateKind.HOSTKEY_REJECTED and "CHANGED" in st.error and "ssh-keygen -R" in st.error
    assert all(state_of(report, f"node0{i}").state is NodeStateKind.OK for i in range(2, 7))
    assert kh.read_text().splitlines()[0] == forged[0]


def test_unauthorised_key_is_auth_failed_without_retry(sim_cluster, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    inv = write_inventory(sim_cluster, tmp_path, nodes={"node02": {"identity_file": str(tmp_path / "k")}})
    log = sim_cluster.node("node02").dir / "ssh" / "sshd.log"
    before = log.stat().st_size if log.exists() else 0
    report = connect_only(inv)
    st = state_of(report, "node02")
    assert st.state is NodeStateKind.AUTH_FAILED
    assert "root@" in st.error and "rejected" in st.error and str(tmp_path / "k") in st.error
    assert state_of(report, "node01").state is NodeStateKind.OK
    with open(log, "rb") as f:  # what node02's sshd saw of this run (LogLevel VERBOSE)
        f.seek(before)
        seen = f.read().decode(errors="replace")
    assert seen.count("Connection from ") == 1, seen  # one connection: no retry after the rejection
    assert seen.count("Failed publickey for root") == 1, seen  # the one key, offered once


def test_refused_port_is_unreachable_quickly(sim_cluster, tmp_path):
    inv = write_inventory(sim_cluster, tmp_path, nodes={"node03": {"port": 2222}})
    t0 = time.monotonic()
    report = connect_only(inv)
    st = state_of(report, "node03")
    assert st.state is NodeStateKind.UNREACHABLE and "refused" in st.error
    assert time.monotonic() - t0 < 5
    assert [r.status for r in report.results if r.node == "node03"] == [Status.ERROR]


def test_address_that_never_answers_times_out_at_connect_timeout(sim_cluster, tmp_path):
    sim_cluster.exec("node04", "iptables -I INPUT -p tcp --dport 22 -j DROP")
    try:
        inv = write_inventory(sim_cluster, tmp_path, defaults={"connect_timeout": 1.5})
        t0 = time.monotonic()
        report = connect_only(inv)
        st = state_of(report, "node04")
        assert st.state is NodeStateKind.UNREACHABLE and "no answer within 1.5s" in st.error
        assert time.monotonic() - t0 < 8
    finally:
        sim_cluster.exec("node04", "iptables -D INPUT -p tcp --dport 22 -j DROP")


def pf_json(*args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    """`preflight run ... --format json` as a user runs it (a real process, its stderr kept), timed."""
    env = {k: v for k, v in os.environ.items() if k != "PREFLIGHT_DEBUG"}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "preflight.cli", "run", *args, "--format", "json"],
                          capture_output=True, text=True, timeout=timeout, env=env)
    return proc, time.monotonic() - t0


def test_sshd_without_banner_is_unreachable_with_reason_and_nothing_on_stderr(sim_cluster, tmp_path):
    sim_cluster.inject("node05", "silent_banner")
    try:
        inv = write_inventory(sim_cluster, tmp_path, defaults={"banner_timeout": 1.5})
        proc, _ = pf_json(inv, "--checks", "ssh.connect")
        st = {n["name"]: n for n in json.loads(proc.stdout)["nodes"]}["node05"]
        assert st["state"] == "unreachable" and "no SSH banner within 1.5s" in st["error"], st
        assert proc.returncode == 3 and proc.stderr == "", proc.stderr  # paramiko's traceback: none
        debug, _ = pf_json(inv, "--checks", "ssh.connect", "--debug")  # and all of it with --debug
        assert "Error reading SSH protocol banner" in debug.stderr and "paramiko.transport" in debug.stderr
    finally:
        sim_cluster.reset("node05")
        sim_cluster.start_sshd("node05")


def test_deadline_bounds_the_process_against_a_silent_sshd(sim_cluster, tmp_path):
    """Handshakes blocked on a silent sshd (banner and connect timeouts 10 s each) do not hold the
    process: the report and the exit come within --deadline + 2 s of the process start."""
    sim_cluster.inject("node05", "silent_banner")
    try:
        inv = write_inventory(sim_cluster, tmp_path, defaults={"banner_timeout": 10, "connect_timeout": 10})
        proc, elapsed = pf_json(inv, "--checks", "npu.health", "--deadline", "3")
        assert elapsed < 3 + 2, elapsed
        report = json.loads(proc.stdout)
        assert proc.returncode == 3 and report["exit_code"] == 3
        states = {n["name"]: n for n in report["nodes"]}
        assert states["node05"]["state"] == "timeout" and "deadline" in states["node05"]["error"]
        assert proc.stderr == "", proc.stderr
    finally:
        sim_cluster.reset("node05")
        sim_cluster.start_sshd("node05")


def test_hung_probe_ends_at_its_timeout_and_leaves_nothing(sim_cluster):
    t, s = session(sim_cluster, "node01")
    try:
        t0 = time.monotonic()
        out = s.run([ProbeSpec("a", "sleep 317", 1), ProbeSpec("b", "echo after", 5)], threading.Event())
    finally:
        t.close()
    assert out["a"].timed_out and out["a"].error.startswith("timed out")
    assert out["b"].stdout == "after\n"
    assert time.monotonic() - t0 < 6
    assert no_leftover(sim_cluster, "node01", "sleep 317")


def test_ten_mib_on_both_streams_is_capped_without_deadlock(sim_cluster):
    t, s = session(sim_cluster, "node02")
    try:
        cmd = "head -c 10485760 /dev/zero | tr '\\0' x; head -c 10485760 /dev/zero | tr '\\0' y >&2"
        out = s.run([ProbeSpec("big", cmd, 30), ProbeSpec("small", "echo ok", 5)], threading.Event())
    finally:
        t.close()
    big = out["big"]
    assert big.rc == 0 and big.truncated
    assert big.stdout.startswith("x" * 1000) and "truncated by preflight: more than 1048576 bytes" in big.stdout
    assert big.stderr.startswith("y" * 1000) and len(big.stderr) < 2 * 1024 * 1024
    assert out["small"].stdout == "ok\n"


def test_non_utf8_output_keeps_its_bytes_readable_and_report_stays_valid_json(sim_cluster):
    t, s = session(sim_cluster, "node03")
    try:
        out = s.run([ProbeSpec("bin", "printf 'ok\\377\\376\\000end\\033[31m'", 5)], threading.Event())
    finally:
        t.close()
    text = out["bin"].stdout
    assert text.startswith("ok\\xff\\xfe") and "end" in text and "\ufffd" not in text
    json.loads(json.dumps({"t": text}))


def test_connection_dropped_mid_probe_is_reported_as_lost(sim_cluster):
    t, s = session(sim_cluster, "node06")
    result = {}

    def go():
        result.update(s.run([ProbeSpec("a", "echo first", 5), ProbeSpec("b", "sleep 29", 20)], threading.Event()))

    th = threading.Thread(target=go)
    th.start()
    time.sleep(1.0)
    sim_cluster.exec("node06", "pkill -KILL -f 'sshd: root@notty'")
    th.join(15)
    t.close()
    assert not th.is_alive()
    assert result["a"].stdout == "first\n"
    assert result["b"].rc is None and "connection lost" in result["b"].error


def test_sigterm_writes_partial_report_exits_130_and_kills_remote_probes(sim_cluster, tmp_path):
    sim_cluster.inject("node02", "npu_smi_hang")
    out = tmp_path / "report.json"
    try:
        proc = subprocess.Popen([sys.executable, "-m", "preflight.cli", "run", sim_cluster.inventory_path,
                                 "--checks", "npu.health", "--format", "json", "--output", str(out), "--quiet"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(4)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 130
        report = json.loads(out.read_text())
        assert oct(out.stat().st_mode & 0o777) == "0o600"
        assert report["exit_code"] == 130 and report["verdict"] == "incomplete"
        states = {n["name"]: n["state"] for n in report["nodes"]}
        assert states["node01"] == "ok" and states["node02"] == "timeout"
        time.sleep(1)
        assert no_leftover(sim_cluster, "node02", "npu-smi")
    finally:
        sim_cluster.reset("node02")


def test_deadline_cuts_off_a_hung_node_and_keeps_the_others(sim_cluster):
    sim_cluster.inject("node03", "npu_smi_hang")
    try:
        KnownHosts.forget_all()
        inv = load(sim_cluster.inventory_path)
        t0 = time.monotonic()
        report = Runner(inv, SSHTransport(), Options(checks=["npu.health"], deadline=4)).run()
        assert time.monotonic() - t0 < 12
        assert state_of(report, "node03").state is NodeStateKind.TIMEOUT
        assert [r.status for r in report.results if r.node == "node03" and r.check == "npu.health"] == [Status.ERROR]
        assert all(r.status is Status.PASS for r in report.results if r.node == "node01")
        assert report.exit_code == 3
        time.sleep(1)
        assert no_leftover(sim_cluster, "node03", "npu-smi")
    finally:
        sim_cluster.reset("node03")


@pytest.fixture(scope="module")
def big_cluster(sim_cluster_factory):
    c = sim_cluster_factory({"nodes": 64}, mode="netns")
    try:
        yield c
    finally:
        c.down(purge=True)


def test_64_nodes_with_8_down_the_other_56_complete(big_cluster):
    down = [f"node{i:02d}" for i in range(3, 64, 8)]
    for n in down:
        big_cluster.inject(n, "sshd_down")
    try:
        proc = subprocess.run([sys.executable, "-m", "preflight.cli", "run", big_cluster.inventory_path,
                               "--checks", "npu,hccn.link", "--format", "json", "--quiet"],
                              capture_output=True, text=True, timeout=120)
        report = json.loads(proc.stdout)
        assert proc.returncode == 3 and report["exit_code"] == 3
        states = {n["name"]: n["state"] for n in report["nodes"]}
        assert sorted(k for k, v in states.items() if v != "ok") == down
        ok_results = [r for r in report["results"] if r["node"] not in down]
        assert len(ok_results) == 56 * 4 and all(r["status"] == "pass" for r in ok_results)
        skipped = [r for r in report["results"] if r["node"] in down and r["check"] != "ssh.connect"]
        assert all(r["status"] == "skip" and r["summary"] == "node unreachable" for r in skipped)
    finally:
        for n in down:
            big_cluster.reset(n)


def test_a_bug_in_one_node_worker_is_exit_4_with_the_message_and_the_others_intact(sim_cluster):
    """The inventory refuses a malformed proxy_jump; one slipped past it (built in code) makes the
    transport raise ValueError in node03's worker: exit 4, one ssh.connect row naming the bug."""
    import dataclasses

    KnownHosts.forget_all()
    inv = load(sim_cluster.inventory_path)
    nodes = tuple(dataclasses.replace(n, proxy_jump="host:notaport") if n.name == "node03" else n
                  for n in inv.nodes)
    report = Runner(dataclasses.replace(inv, nodes=nodes), SSHTransport(), Options(checks=["npu.health"])).run()
    assert report.exit_code == 4 and report.verdict == "incomplete"
    rows = [r for r in report.results if r.node == "node03"]
    assert [(r.check, r.status) for r in rows] == [("ssh.connect", Status.ERROR), ("npu.health", Status.SKIP)]
    assert "internal error" in rows[0].summary and "ValueError" in rows[0].summary and "notaport" in rows[0].summary
    assert "deadline" not in rows[0].summary
    assert report.internal_errors and report.internal_errors[0].startswith("node03: internal error")
    for n in ("node01", "node02", "node04", "node05", "node06"):
        assert [r.status for r in report.results if r.node == n] == [Status.PASS, Status.PASS], n


def test_not_ready_report_into_a_closed_pipe_keeps_its_exit_code(big_cluster, tmp_path):
    """`preflight run ... | head -c 100`: the reader leaves after 100 bytes of a report far larger
    than a pipe holds (so the write meets EPIPE); the exit code is still the report's (1)."""
    big_cluster.inject("node01", "npu_health", device=0, status="Critical")
    try:
        args = [sys.executable, "-m", "preflight.cli", "run", big_cluster.inventory_path, "--checks", "npu,hccn.link",
                "--format", "json"]
        whole = tmp_path / "report.json"
        assert subprocess.run([*args, "--output", str(whole), "--quiet"], timeout=300).returncode == 1
        assert whole.stat().st_size > 65536  # more than a pipe holds (64 KiB): the write cannot fit before EPIPE
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        head = proc.stdout.read(100)
        proc.stdout.close()
        err = proc.stderr.read()
        rc = proc.wait(timeout=300)
    finally:
        big_cluster.reset("node01")
    assert head.startswith(b'{"schema":"preflight.report/1"')
    assert b"Traceback" not in err and b"BrokenPipe" not in err and b"Exception ignored" not in err, err
    assert rc == 1, rc
