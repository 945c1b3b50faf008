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
