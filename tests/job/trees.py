"""Real (small) Megatron checkpoint trees on disk, named exactly as Megatron-LM names them.

Names follow megatron/training/checkpointing.py (NVIDIA/Megatron-LM): `get_checkpoint_name` gives
`iter_{:07d}/mp_rank_{tp:02d}[_{pp:03d}][_{ep:03d}]/model_optim_rng.pt` (the pp part only when
pipeline parallelism is used, the ep part only when expert parallelism is), and
`get_checkpoint_tracker_filename` the tracker `latest_checkpointed_iteration.txt`. The distributed
format (megatron/core/dist_checkpointing) writes `metadata.json` (CheckpointingConfig: sharded_backend,
sharded_backend_version, common_backend, common_backend_version), `common.pt` and torch DCP's
`.metadata` and `__R_N.distcp` files in the iteration directory.
"""
from __future__ import annotations

import json
from pathlib import Path


def megatron_tree(root: Path, iteration: int = 1000, tp: int = 1, pp: int = 1, ep: int = 1, fmt: str = "torch",
                  file_bytes: int = 4096, tracker: str | None = None, ranks=None) -> Path:
    """Write a checkpoint under root; `ranks` limits which (tp, pp, ep) rank directories are written."""
    root.mkdir(parents=True, exist_ok=True)
    it = root / f"iter_{iteration:07d}"
    it.mkdir(exist_ok=True)
    (root / "latest_checkpointed_iteration.txt").write_text(tracker if tracker is not None else str(iteration))
    if fmt == "torch_dist":
        (it / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist", "sharded_backend_version": 1,
                                                      "common_backend": "torch", "common_backend_version": 1}))
        (it / "common.pt").write_bytes(b"\0" * 256)
        (it / ".metadata").write_bytes(b"\0" * 256)
        for r in range(tp * pp):
            (it / f"__{r}_0.distcp").write_bytes(b"\0" * file_bytes)
        return it
    for t in range(tp):
        for p in range(pp):
            for e in range(ep):
                if ranks is not None and (t, p, e) not in ranks:
                    continue
                name = f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "") + (f"_{e:03d}" if ep > 1 else "")
                (it / name).mkdir(exist_ok=True)
                (it / name / "model_optim_rng.pt").write_bytes(b"\0" * file_bytes)
    return it


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "megatron" / "package_info.py__0.13.0rc2.txt"


def _git(path: Path, branch: str) -> None:
    import subprocess

    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin", "HOME": str(path)}
    for args in (["init", "-q", "-b", branch], ["add", "-A"], ["commit", "-q", "-m", "tree"]):
        subprocess.run(["git", "-C", str(path), *args], check=True, env=env, capture_output=True)


def megatron_source(root: Path, version: str = "0.8.0", branch: str | None = None) -> Path:
    """A Megatron-LM tree whose megatron/core/package_info.py is the real file with its numbers set;
    a git checkout on `branch` when given."""
    major, minor, patch = version.split(".")
    text = FIXTURE.read_text().split("# ---\n", 1)[1]
    text = text.replace("MINOR = 13", f"MINOR = {minor}").replace("MAJOR = 0", f"MAJOR = {major}")
    text = text.replace("PATCH = 0", f"PATCH = {patch}").replace("PRE_RELEASE = 'rc2'", "PRE_RELEASE = ''")
    core = root / "megatron" / "core"
    core.mkdir(parents=True, exist_ok=True)
    (root / "megatron" / "__init__.py").write_text("")
    (core / "__init__.py").write_text("from .package_info import __version__\n")
    (core / "package_info.py").write_text(text)
    if branch:
        _git(root, branch)
    return root


def mindspeed_checkout(root: Path, version: str = "0.8.0", branch: str | None = None, broken: str | None = None) -> Path:
    """A MindSpeed source checkout as `pip install -e MindSpeed` leaves it: the package directory,
    its dist-info, and (with `branch`) a git repository. Its megatron_adaptor imports megatron.core
    (as the real one patches it) or raises `broken`. Returns the directory to put on PYTHONPATH."""
    pkg = root / "mindspeed"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    body = f"raise ImportError({broken!r})\n" if broken else "import megatron.core  # MindSpeed patches it\n"
    (pkg / "megatron_adaptor.py").write_text(body)
    info = root / f"mindspeed-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: mindspeed\nVersion: {version}\n")
    if branch:
        _git(root, branch)
    return root
