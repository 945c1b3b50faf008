"""A simulated node's non-root login user and sudoers (netns mode only).

Production Ascend nodes are reached with a personal or service account that uses `sudo` for the
vendor tools. A node spec with `login_user:` gets that account inside the node only: the node's
/etc is an overlay (preflight.sim.sshd), and this module writes the files its upper layer holds —
passwd, shadow and group (the host's plus the user and, when asked, the HwHiAiUser group), hosts (so
sudo resolves the node's own name) and sudoers.d — under the node's `etc-login/`. Nothing of the
host's /etc changes.

sudoers per node (`sudo:`): `nopasswd` (NOPASSWD: ALL), `password` (ALL, a password required, so
`sudo -n` refuses), `none` (no rule at all). The real `sudo` binary (Debian's package) runs them.
"""
from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

LOGIN_UID = 20001  # the login user's uid on every node (one account, as a directory service gives)
NPU_GROUP = "HwHiAiUser"  # the driver's run group: device files are root:HwHiAiUser 0660
NPU_GID = 21001
SUDO_MODES = ("nopasswd", "password", "none")
SUDOERS = {"nopasswd": "{user} ALL=(ALL) NOPASSWD: ALL\n", "password": "{user} ALL=(ALL) ALL\n", "none": ""}
ETC_DIR = "etc-login"  # in the node's directory: the files copied into its /etc overlay


def npu_gid() -> int:
    """HwHiAiUser's gid: the host's when it has the group, else ours (it then exists only inside nodes)."""
    try:
        return grp.getgrnam(NPU_GROUP).gr_gid
    except KeyError:
        return NPU_GID


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    return text if text.endswith("\n") or not text else text + "\n"


def write_etc(node_dir: Path, hostname: str, user: str, sudo: str, groups: list[str]) -> Path:
    """The upper-layer files for the node's /etc; returns the folder (owned by root, modes as /etc's)."""
    if sudo not in SUDO_MODES:
        raise ValueError(f"sudo must be one of {', '.join(SUDO_MODES)}")
    try:
        pwd.getpwnam(user)
        raise ValueError(f"login_user {user!r} exists on the host; pick a name only the nodes have")
    except KeyError:
        pass
    etc = node_dir / ETC_DIR
    (etc / "sudoers.d").mkdir(parents=True, exist_ok=True)
    home = node_dir / "home" / user
    home.mkdir(parents=True, exist_ok=True)
    gid = npu_gid()
    os.chown(home, LOGIN_UID, LOGIN_UID)
    passwd = _read("/etc/passwd") + f"{user}:x:{LOGIN_UID}:{LOGIN_UID}:preflight sim login:{home}:/bin/bash\n"
    # '*': no password can log in, and the account is not locked (sshd refuses keys for '!')
    shadow = _read("/etc/shadow") + f"{user}:*:19000:0:99999:7:::\n"
    lines = _read("/etc/group").splitlines()
    if not any(ln.startswith(f"{NPU_GROUP}:") for ln in lines):
        lines.append(f"{NPU_GROUP}:x:{gid}:")
    lines.append(f"{user}:x:{LOGIN_UID}:")
    out = []
    for ln in lines:
        name, _, rest = ln.partition(":")
        if name in groups and name != user:
            members = ln.rsplit(":", 1)[1]
            ln = ln + ("," if members else "") + user
        out.append(ln)
    hosts = _read("/etc/hosts") + f"127.0.1.1 {hostname}\n"
    for name, text, mode in (("passwd", passwd, 0o644), ("shadow", shadow, 0o640), ("group", "\n".join(out) + "\n", 0o644),
                             ("hosts", hosts, 0o644)):
        (etc / name).write_text(text, encoding="utf-8")
        os.chmod(etc / name, mode)
    rule = etc / "sudoers.d" / "preflight-sim"
    rule.write_text(SUDOERS[sudo].format(user=user), encoding="utf-8")
    os.chmod(rule, 0o440)
    os.chmod(etc / "sudoers.d", 0o755)
    return etc


def open_path_for_logins(directory: Path) -> None:
    """The login user reads the node's tree (the tools' outputs, hccn.conf) through the cluster
    directory: give every ancestor inside the temp directory search permission (o+x, not listing)."""
    import tempfile

    tmp = Path(tempfile.gettempdir()).resolve()
    for p in [directory, *directory.parents]:
        if p == tmp or tmp not in p.parents:
            break
        mode = p.stat().st_mode
        if not mode & 0o001:
            os.chmod(p, (mode & 0o7777) | 0o011)


DEVICE_MARKS = {"npu/.davinci_manager": 0o660, "hccn/.root_only": 0o600}
"""Files under the node's out/ that the simulated tools test (`[ -r ]`) before answering, as the
real ones check their caller: npu-smi opens the driver's device files (root:HwHiAiUser 0660),
hccn_tool accepts user root only. tree.write_tree creates them; a login node's are owned by root."""


def own_device_marks(node_dir: Path) -> None:
    for rel in DEVICE_MARKS:
        os.chown(node_dir / "out" / rel, 0, npu_gid() if rel.startswith("npu/") else 0)
