"""Every node is reachable over SSH, its host key is the one you trust, and the key login works.

Why it matters: a launcher (torchrun, mpirun, a MindSpeed script) that cannot reach one node hangs
the whole job at rendezvous; a changed host key can mean a reinstalled node or an attack.

How it is judged: the connection attempt itself. States (docs/SPEC.md): `unreachable` (DNS failure,
refused, no answer within connect_timeout, no SSH banner), `auth_failed` (which keys were offered),
`hostkey_rejected` (unknown key: its fingerprint and the ssh-keyscan line to trust it after
checking; changed key: never accepted, the ssh-keygen -R line if the change is legitimate),
`timeout` (cut off by --deadline).

How to fix: start sshd (`systemctl start ssh`), check the address and port in the inventory,
install the client key (`ssh-copy-id -i KEY user@host`), or record the host key in known_hosts.
"""
from __future__ import annotations

from preflight.checkapi import Policy

ID = "ssh.connect"
SCOPE = "node"
POLICY = Policy(gate=True)
# What to do with a fail/warn (preflight/actions.py).
ACTIONS = {"": ("fix_config", "ssh reachability is configured in the inventory and the node's sshd")}
DEFAULTS: dict = {}
# The runner produces this check's results from the connection attempt; it sends no probe.
