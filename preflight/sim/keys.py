"""SSH keys for the simulated cluster, generated in-process (no ssh-keygen per node).

Why in-process: ed25519 generation costs microseconds in `cryptography` (a paramiko dependency),
while 128 ssh-keygen processes cost seconds of the two shared cores.
"""
from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def generate(path: Path, comment: str) -> str:
    """Write an OpenSSH ed25519 private key (0600) and `.pub`; return the public line."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private)
    os.chmod(path, 0o600)
    line = public.decode() + " " + comment
    Path(f"{path}.pub").write_text(line + "\n", encoding="utf-8")
    return public.decode()


def ensure(path: Path, comment: str) -> str:
    """Reuse the key at path if it is there (the client key survives `down`), else generate it."""
    pub = Path(f"{path}.pub")
    if path.exists() and pub.exists():
        return " ".join(pub.read_text(encoding="utf-8").split()[:2])
    return generate(path, comment)
