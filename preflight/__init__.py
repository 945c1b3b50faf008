"""preflight: is this cluster ready to train? Pre-launch checks for Ascend NPU and NVIDIA GPU clusters."""
from pathlib import Path as _Path

__version__ = "0.1.0"

# Installed, `checks/` is the subpackage preflight.checks (package-dir mapping in pyproject.toml).
# Run from a source checkout, make the top-level folder answer to that name too.
_src_checks = _Path(__file__).resolve().parent.parent / "checks"
if not (_Path(__file__).parent / "checks").is_dir() and (_src_checks / "__init__.py").is_file():
    __path__.append(str(_src_checks.parent))  # noqa: F821 - package __path__
