"""Contract: no inventory or node value can reach a node's shell as shell text.

Every check's probe builders (probes, followup on realistic round-1 outputs, plan on a realistic
ClusterContext) are run for a node whose every string is hostile: command substitution, backticks,
`;`, both quotes, a newline, spaces and a leading `-`. The commands they build then run in a real
`sh -c` (as the transport runs them) in a scratch directory whose PATH holds stub tools that log
their argv. The test fails when a marker file appears (a value ran as code), when a tool received a
fragment of a value instead of the whole value as one word, or when a value that should arrive
(ascend_home, python, paths, env values, env_files, MASTER_ADDR, a string parameter) never did.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from preflight import launchenv
from preflight.checkapi import ClusterContext, CommandOutput, Probe
from preflight.checks import env_comm, hccn_ip, storage_consistency
from preflight.node import Node
from preflight.registry import discover
from tests.checks.ascend_helpers import smi

ALL = discover()

# each trap alone, then all of them in one value; {M} is the marker file's absolute path
TRAPS = {
    "subst": "$(touch {M})",
    "backtick": "`touch {M}`",
    "semicolon": "; touch {M}; ",
    "single_quote": "' ; touch {M}; '",
    "double_quote": "\" ; touch {M}; \"",
    "newline": "\ntouch {M}\n",
    "spaces": "two  words\tand a tab",
    "all": "$(touch {M})`touch {M}`;touch {M};'\"; touch {M};\"'\ntouch {M}\n x  -y",
}
# tools whose argv the test reads; everything else a probe needs is the real tool
STUBS = ("cat", "stat", "df", "find", "getent", "ip", "ss", "npu-smi", "ping", "python3", "uname", "date")
REAL = ("sh", "bash", "env", "touch", "mktemp", "rm", "mkdir", "base64", "sed", "head", "tail", "sort", "awk",
        "tr", "grep", "sleep", "dd", "kill", "md5sum", "sha256sum", "wc", "cut", "timeout", "dirname")
STUB = """#!/bin/sh
# log argv (count, $0, args; NUL-separated), then print the args one per line
printf '%s\\0' "$#" "$0" "$@" >>"$PF_ARGV_LOG"
for a in "$@"; do printf '%s\\n' "$a"; done
"""
ENV_KEYS = ("HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "MASTER_ADDR", "MY_SETTING")
GRAMMAR_PARAMS = {"port_range"}  # validated where it is read; not free text


def _stub(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(STUB)
    path.chmod(0o755)


@dataclasses.dataclass
class Hostile:
    tmp: Path
    marker: Path
    node: Node
    values: dict[str, str]  # field -> its hostile value
    bin: Path
    log: Path


def hostile(tmp: Path, trap: str) -> Hostile:
    marker = tmp / "M"
    t = trap.replace("{M}", str(marker))
    scratch = tmp / "v"
    v = {
        "ascend_home": f"{scratch}/home-{t}",
        "data": f"{scratch}/data-{t}",
        "checkpoint": f"{scratch}/ckpt-{t}",
        "python": f"{scratch}/py-{t}/python3",
        "env_file": f"{scratch}/envfile-{t}/env.sh",
        "user": f"-user{t}",
        "job_load": f"{scratch}/load-{t}",
        "job_save": f"{scratch}/save-{t}",
        "megatron": f"{scratch}/megatron-{t}",
        "entry": f"{scratch}/entry-{t}/pretrain_gpt.py",
        "param": f"-param{t}",
        **{f"env:{k}": f"-{k.lower()}{t}" for k in ENV_KEYS},
    }
    _stub(Path(v["ascend_home"]) / "driver" / "tools" / "hccn_tool")
    _stub(Path(v["python"]))
    for d in ("data", "checkpoint"):
        Path(v[d]).mkdir(parents=True)
    Path(v["env_file"]).parent.mkdir(parents=True)
    Path(v["env_file"]).write_text("PF_SOURCED=yes; export PF_SOURCED\n")
    node = Node("node01", "10.0.0.1", user=v["user"], ascend_home=v["ascend_home"], python=v["python"],
                env={k: v[f"env:{k}"] for k in ENV_KEYS}, env_files=(v["env_file"],),
                paths={"data": [v["data"]], "checkpoint": v["checkpoint"]})
    bindir = tmp / "bin"
    for name in STUBS:
        _stub(bindir / name)
    for name in REAL:
        real = shutil.which(name)
        if real:
            (bindir / name).symlink_to(real)
    return Hostile(tmp, marker, node, v, bindir, tmp / "argv.log")


def _params(info, h: Hostile) -> dict:
    """The check's defaults with every free-text parameter hostile."""
    out = dict(info.defaults)
    for k, d in info.defaults.items():
        if k in GRAMMAR_PARAMS:
            continue
        if isinstance(d, str):
            out[k] = h.values["param"]
        elif isinstance(d, list) and all(isinstance(x, str) for x in d):
            out[k] = [h.values["param"]]
    return out


def _env0(env: dict[str, str]) -> str:
    return "".join(f"{k}={v}\0" for k, v in {"PATH": "/usr/bin", **env, "HCCL_IF_IP": "10.0.0.1"}.items())


def _round1(h: Hostile) -> dict[str, CommandOutput]:
    """Realistic round-1 outputs, by probe name: the launch environment carries the hostile env
    (so MASTER_ADDR's follow-up sees it), npu-smi is a real A2 table."""
    return {launchenv.PROBE_NAME: CommandOutput(stdout=_env0(h.node.env), rc=0), "npu_smi": smi()}


def _cluster_ctx(info, h: Hostile) -> ClusterContext:
    """Three hostile nodes with the facts the planning checks read; node-derived strings (data
    path, file names in a manifest) are hostile too."""
    nodes, facts = {}, {}
    rel = "sub/" + h.values["param"].lstrip("-")
    for i in (1, 2, 3):
        name = f"node0{i}"
        nodes[name] = dataclasses.replace(h.node, name=name, host=f"10.0.0.{i}")
        facts[name] = {
            "env.comm": env_comm.Facts(env={"HCCL_IF_IP": f"10.0.0.{i}"}),
            "hccn.ip": hccn_ip.Facts(None, None, {d: hccn_ip.DeviceIp(f"192.168.{d}.{i}", "255.255.255.0")
                                                  for d in range(2)}, chips={0: (0, 0), 1: (1, 0)}),
            "storage.consistency": storage_consistency.Facts((storage_consistency.PathManifest(
                h.values["data"], "ok", f"fs{i}", (storage_consistency.FileStat(rel, 4, i, "1.0", "1.0"),)),)),
        }
    job = {"load": h.values["job_load"], "save": h.values["job_save"], "megatron_path": h.values["megatron"],
           "entry": h.values["entry"]}
    return ClusterContext(nodes=nodes, facts=facts, params=_params(info, h), job=job)


def _round1_facts(info, h: Hostile, r1) -> object:
    """A used check's facts from the same realistic round 1, as the runner hands them to a
    follow-up (the error its parse raised in their place)."""
    outs = {n: r1.get(n, CommandOutput(stdout="", rc=0)) for n in info.module.probes(h.node, _params(info, h)) or {}}
    try:
        return info.module.parse(outs)
    except Exception as exc:  # noqa: BLE001
        return exc


def build_all(h: Hostile) -> dict[str, Probe]:
    """Every probe every check builds for the hostile node(s): label -> Probe."""
    built: dict[str, Probe] = {}
    r1 = _round1(h)
    for cid, info in sorted(ALL.items()):
        mod, params = info.module, _params(info, h)
        if info.has("probes"):
            first = mod.probes(h.node, params) or {}
            built.update({f"{cid}/probes/{n}": p for n, p in first.items()})
            if info.has("followup"):
                outs = {n: r1.get(n, CommandOutput(stdout="", rc=0)) for n in first}
                used = ({u: _round1_facts(ALL[u], h, r1) for u in info.uses},) if info.scope == "node" and info.uses else ()
                built.update({f"{cid}/followup/{n}": p for n, p in (mod.followup(outs, h.node, params, *used) or {}).items()})
        if info.scope == "cluster" and info.has("plan"):
            for node, probes in (mod.plan(_cluster_ctx(info, h)) or {}).items():
                built.update({f"{cid}/plan/{node}/{n}": p for n, p in probes.items()})
    for label, p in built.items():
        assert isinstance(p, Probe), f"{label}: {type(p).__name__}, not a Probe built by checkapi.cmd()"
    return built


def argv_records(log: Path) -> list[list[str]]:
    """The stub log -> [[$0, arg1, ...], ...]."""
    if not log.exists():
        return []
    items = log.read_bytes().decode(errors="replace").split("\0")
    out, i = [], 0
    while i < len(items) - 1:
        n = int(items[i])
        out.append(items[i + 1:i + 2 + n])
        i += 2 + n
    return out


@pytest.mark.parametrize("trap", sorted(TRAPS))
def test_hostile_values_arrive_as_one_literal_word(tmp_path: Path, trap: str):
    h = hostile(tmp_path, TRAPS[trap])
    built = build_all(h)
    labels = {lbl.split("/")[0] for lbl in built}
    assert {"cann.env", "env.comm", "storage.data", "storage.disk", "sw.consistency", "hccn.link",
            "net.ping_mesh", "smoke.allreduce", "storage.consistency", "hccn.ping_mesh", "ckpt.resume",
            "sw.stack"} <= labels, labels
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {"PATH": str(h.bin), "HOME": str(tmp_path), "TMPDIR": str(tmp_path), "PF_ARGV_LOG": str(h.log)}
    launch = {}
    for label, probe in sorted(built.items()):
        done = subprocess.run(["sh", "-c", probe.cmd], cwd=cwd, env=env, capture_output=True, timeout=120)
        assert not h.marker.exists(), f"{label}: a hostile value ran as shell code:\n{probe.cmd[:3000]}"
        if label.endswith("/" + launchenv.PROBE_NAME):
            launch[label] = launchenv.parse(CommandOutput(stdout=done.stdout.decode(), rc=done.returncode))
    records = argv_records(h.log)
    words = [w for r in records for w in r]
    # integrity: a word holding part of a value holds all of it (or its JSON encoding)
    for field, value in h.values.items():
        tag = value.split(TRAPS[trap].replace("{M}", str(h.marker)))[0]  # the field's own prefix
        forms = (value, value.strip(), json.dumps(value)[1:-1])  # a check may strip a value
        for w in words:
            if tag in w:
                assert any(f in w for f in forms), f"{field} split into several words: {w!r} (value {value!r})"
    # arrival: each value reached its tool as one literal word
    argv0 = {r[0] for r in records}
    assert h.values["python"] in argv0, "the interpreter path never ran as one word"
    assert str(Path(h.values["ascend_home"]) / "driver" / "tools" / "hccn_tool") in argv0
    assert str(Path(h.values["ascend_home"]) / "driver" / "version.info") in words
    assert h.values["data"] in words and h.values["checkpoint"] in words
    assert h.values["env:MASTER_ADDR"].strip() in words, "MASTER_ADDR never reached getent as one word"
    assert {h.values["megatron"], h.values["entry"]} <= set(words), "sw.stack's job paths lost"
    cfgs = [json.loads(w) for r in records if r[0] == h.values["python"] for w in r[1:] if w.startswith("{")]
    assert any(c.get("backend") == h.values["param"] for c in cfgs), "smoke.allreduce backend parameter lost"
    assert launch, "no launch-environment probe ran"
    for label, got in launch.items():
        for k in ENV_KEYS:
            assert got.get(k) == h.values[f"env:{k}"], f"{label}: {k} arrived as {got.get(k)!r}"
        assert got.get("PF_SOURCED") == "yes", f"{label}: the env_files script was not sourced"


def test_a_field_inside_template_quotes_is_refused():
    """The framework refuses the shape of the cann.env bug: a quoted value inside "${X:-...}"."""
    from preflight.checkapi import TemplateError, cmd, sh

    for template in ('echo "${{X:-{home}}}"', "echo '{home}'", 'echo "a {home} b"'):
        with pytest.raises(TemplateError):
            cmd(template, home="/opt/x$(touch /tmp/p)")
    with pytest.raises(TemplateError):
        sh("{part:raw}", part="not built by sh()")
    assert cmd('echo "$(cat {f})"', f="a b").cmd == "echo \"$(cat 'a b')\""


def test_stub_log_reader_sees_every_word(tmp_path: Path):
    """The instrument itself: a split value shows up as two words in the log."""
    h = hostile(tmp_path, TRAPS["spaces"])
    env = {"PATH": str(h.bin), "PF_ARGV_LOG": str(h.log)}
    subprocess.run(["sh", "-c", "cat a\\ b c"], env=env, check=True, capture_output=True)
    assert argv_records(h.log) == [[str(h.bin / "cat"), "a b", "c"]]
    assert os.access(h.values["python"], os.X_OK)
