"""One node's probes as one batch: every check's probes deduplicated (identical commands run once,
under the strictest settings any of them asks), refused unless built through checkapi.cmd()."""
from __future__ import annotations

import threading
from typing import Any

from ..checkapi import Probe
from ..model import CommandOutput
from ..node import Node
from ..registry import CheckInfo
from ..transport import Session
from ..transport.batch import ProbeSpec
from ..transport.wrapping import Asks, merge, runtime_refused, spec


def asks(info: CheckInfo | None) -> Asks | None:
    """What a check's policy says of its probes' privilege and place (None: a probe of the core's)."""
    if info is None:
        return None
    return Asks(info.privilege == "root", info.privilege_group or "", info.where == "job")


def only_probes(check_id: str, probes: Any) -> dict[str, Probe]:
    """A check's probe mapping, refused unless every value is a `Probe` built through checkapi's
    quoting (`cmd()`): a plain string may carry an unquoted inventory value, so it never runs."""
    out = dict(probes or {})
    for name, probe in out.items():
        if not isinstance(probe, Probe):
            raise TypeError(f"{check_id}: probe {name!r} is a {type(probe).__name__}, not a Probe; "
                            "build it with checkapi.cmd(), which quotes every value")
    return out


def run_batch(session: Session, node: Node, wanted: dict[str, dict[str, Probe]],
              cancel: threading.Event, recorder=None,
              checks: dict[str, CheckInfo] | None = None) -> dict[str, dict[str, CommandOutput]]:
    """{check: {name: cmd}} -> {check: {name: output}}, identical commands sent once."""
    by_cmd: dict[str, ProbeSpec] = {}
    sent: dict[str, dict[str, str]] = {}  # check -> probe name -> the command it became
    for cid, probes in wanted.items():
        wants, names = asks((checks or {}).get(cid)), sent.setdefault(cid, {})
        for name, probe in probes.items():
            sp = spec(probe, node, wants, key=f"p{len(by_cmd)}")
            have = by_cmd.get(sp.cmd)
            by_cmd[sp.cmd] = sp if have is None else merge(have, sp)
            names[name] = sp.cmd
    specs = list(by_cmd.values())
    outputs = session.run(specs, cancel) if specs else {}
    jobs = {sp.key for sp in specs if sp.job}
    outputs = {k: runtime_refused(o, node) if k in jobs else o for k, o in outputs.items()}
    if recorder is not None:
        recorder.add(node.name, specs, outputs, node.env)
    return {check: {name: outputs[by_cmd[c].key] for name, c in names.items()} for check, names in sent.items()}
