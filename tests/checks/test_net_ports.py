"""net.ports on `ss -ltnp` and /proc/net/tcp texts captured on the test machine (tests/net/test_helpers.py)."""
import pytest

from preflight.checks import env_comm, net_ports as P
from preflight.checkapi import CommandOutput, ParseError, Status
from preflight.node import Node
from tests.checks.test_env_comm import ROUTE_LOCAL, ROUTE_OK, env0, master_out
from tests.net.test_helpers import IP_JSON, PROC, SS

NODE = Node(name="node01", host="192.0.2.2", backend="ascend")
SS_HEADER = SS.splitlines(keepends=True)[0]
SYSCTL_DEFAULT = "ip_local_port_range=32768 60999 \nip_local_reserved_ports= \n"
SYSCTL_RESERVED = "ip_local_port_range=32768 60999 \nip_local_reserved_ports=60000-60015 \n"


def ss_line(port, users='users:(("python3",pid=6151,fd=3))', addr="0.0.0.0"):
    return f"LISTEN 0      128          {addr}:{port}      0.0.0.0:*    {users}\n"


def run(env, listen=SS_HEADER, sysctl=SYSCTL_RESERVED, master=True, params=None, node=NODE):
    outs = {"launch_env": env0(**env), "ip_addr": CommandOutput(stdout=IP_JSON),
            P.LISTEN_PROBE: CommandOutput(stdout=listen), P.SYSCTL_PROBE: CommandOutput(stdout=sysctl)}
    if "MASTER_ADDR" in env:
        outs["master_addr"] = master_out((env["MASTER_ADDR"],), ROUTE_LOCAL if master else ROUTE_OK)
    (f,) = P.evaluate(P.parse(outs, {"env.comm": env_comm.parse(outs)}), {**P.DEFAULTS, **(params or {})}, node)
    return f


MASTER = {"MASTER_ADDR": "192.0.2.2", "MASTER_PORT": "29500"}


def test_probes():
    p = P.probes(NODE, P.DEFAULTS)
    assert p[P.LISTEN_PROBE].cmd.startswith("LC_ALL=C ss -ltnp") and "ip_local_reserved_ports" in p[P.SYSCTL_PROBE].cmd


def test_all_free_passes_and_lists_plan():
    f = run(MASTER)
    assert f.status is Status.PASS
    assert f.details["planned"] == ["MASTER_PORT 29500", "HCCL host ports (default base) 60000-60015"]


def test_captured_ss_sample_port_60003_taken():
    f = run(MASTER, listen=SS)  # 60003 held by python3 pid 6151, 29500 held too
    assert f.status is Status.FAIL
    assert "port 60003 (HCCL host ports (default base) 60000-60015) is in use: python3 (pid 6151)" in f.summary
    assert "port 29500 (MASTER_PORT 29500) is in use" in f.summary and "kill 6151" in f.remediation


def test_master_port_only_checked_on_master():
    f = run({**MASTER, "MASTER_ADDR": "192.0.2.9"}, listen=SS_HEADER + ss_line(29500), master=False)
    assert f.status is Status.PASS and f.details["master"] is False
    f = run(MASTER, listen=SS_HEADER + ss_line(29500))
    assert f.status is Status.FAIL and "MASTER_PORT" in f.summary


def test_proc_fallback_names_unknown_owner():
    f = run({}, listen=PROC)  # the captured table has 0xEA63 = 60003 listening
    assert f.status is Status.FAIL and "port 60003" in f.summary and "owner unknown" in f.summary
    f = run({}, listen=PROC.replace(":EA63 ", ":EA73 "))  # 60019: outside the range
    assert f.status is Status.PASS and f.details["source"] == "/proc/net/tcp"


def test_invisible_owner_message():
    f = run({}, listen=SS_HEADER + ss_line(60005, users=""))
    assert f.status is Status.FAIL and "process not visible to this user" in f.summary and "ss -ltnp 'sport = :60005'" in f.remediation


def test_base_port_and_range_variables():
    f = run({"HCCL_IF_BASE_PORT": "50000"}, listen=SS_HEADER + ss_line(60003), params={"warn_ephemeral": False})
    assert f.status is Status.PASS and f.details["planned"] == ["HCCL_IF_BASE_PORT 50000-50015"]
    f = run({"HCCL_HOST_SOCKET_PORT_RANGE": "61000-61050", "HCCL_IF_BASE_PORT": "50000"}, listen=SS_HEADER + ss_line(61010))
    assert f.status is Status.FAIL and "HCCL_HOST_SOCKET_PORT_RANGE 61000-61050" in f.summary
    f = run({"HCCL_HOST_SOCKET_PORT_RANGE": "auto"}, listen=SS_HEADER + ss_line(60003))
    assert f.status is Status.PASS and f.details["planned"] == []


def test_nvidia_has_no_hccl_range():
    f = run({}, listen=SS_HEADER + ss_line(60003), node=Node(name="g", host="h", backend="nvidia"))
    assert f.status is Status.PASS


def test_ephemeral_unreserved_warns_with_sysctl_fix():
    f = run({}, sysctl=SYSCTL_DEFAULT)
    assert f.status is Status.WARN and "inside the ephemeral port range 32768-60999" in f.summary
    assert "sysctl -w net.ipv4.ip_local_reserved_ports=60000-60015" in f.remediation
    assert run({}, sysctl=SYSCTL_DEFAULT, params={"warn_ephemeral": False}).status is Status.PASS


def test_master_port_inside_hccl_range_fails():
    f = run({"MASTER_ADDR": "192.0.2.2", "MASTER_PORT": "60001"})
    assert f.status is Status.FAIL and "MASTER_PORT 60001 lies inside" in f.summary


def test_extra_ports():
    f = run({}, listen=SS_HEADER + ss_line(8080), params={"extra_ports": [8080, "9000-9001"]})
    assert f.status is Status.FAIL and "port 8080 (extra port 8080)" in f.summary
    f = run({}, params={"extra_ports": ["x"]})
    assert f.status is Status.FAIL and "extra_ports" in f.summary


def test_unreadable_listeners_is_parse_error():
    with pytest.raises(ParseError):
        run({}, listen="@@preflight-proc-net-tcp\n")
