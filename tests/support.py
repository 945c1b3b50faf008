"""Test helpers: read the vendor samples in tests/fixtures (header kept in the file, body returned)."""
from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_path(name: str) -> Path:
    for sub in ("", "ascend", "nvidia", "slurm", "net"):
        p = FIXTURES / sub / name
        if p.exists():
            return p
    raise FileNotFoundError(name)


def fixture_body(name: str) -> str:
    """The text after the `# ---` line: byte for byte what the tool printed."""
    text = fixture_path(name).read_text()
    head, sep, body = text.partition("# ---\n")
    return body if sep else text


def fixture_names(prefix: str) -> list[str]:
    return sorted(p.name for p in FIXTURES.glob(f"*/{prefix}*"))


@contextlib.contextmanager
def loopback_listener(hold: bool, greeting: bytes = b""):
    """A loopback TCP port that accepts and then closes at once (`hold=False`: sshd refusing a
    session) or never speaks (`hold=True`: a hung sshd), after sending `greeting` if any (an SSH
    banner: an sshd that stalls after it). Yields (port, an Event set once a client came);
    bounded: the accept thread ends when the socket closes."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held, hit = [], threading.Event()

    def serve():
        while True:
            try:
                conn = srv.accept()[0]
            except OSError:
                return
            if greeting:
                conn.sendall(greeting)
            held.append(conn) if hold else conn.close()
            hit.set()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        yield srv.getsockname()[1], hit
    finally:
        srv.close()
        for c in held:
            c.close()
        th.join(5)
