"""Test helpers: read the vendor samples in tests/fixtures (header kept in the file, body returned)."""
from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_path(name: str) -> Path:
    for sub in ("", "ascend", "nvidia", "slurm"):
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
