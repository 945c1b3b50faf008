#!/bin/sh
# One-go capture on a real NVIDIA machine (issue 14, item 9; docs/NVIDIA.md §5): run from the
# repository root; everything lands under $OUT (default ./gpu-capture-<UTC date>): captures/,
# fixtures/ (ready for tests/fixtures/nvidia/), results.json (gpu.health, gpu.idle, gpu.topology,
# ib.link on those captures), smoke_nccl.json (one nccl rank of smoke.allreduce when torch sees
# CUDA), meta.json. Bounded: every command under a 90 s timeout, the smoke rank under 180 s.
set -eu
OUT=${OUT:-./gpu-capture-$(date -u +%Y%m%dT%H%M%SZ)}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
nvidia-smi --version >"$OUT/nvidia-smi_--version.txt" 2>&1 || true
exec "$PY" "$(dirname "$0")/gpu_capture.py" all --out "$OUT"
