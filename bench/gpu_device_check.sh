#!/bin/sh
# One short prepared run on a real NVIDIA machine (issue 28 item 8): the capture of
# bench/gpu_capture.sh, then `preflight gate --local` (the gate's fast set, as a Slurm prolog runs
# it) with a minimal local inventory, timed: CPU, peak RSS, wall (bench/measure.py: wait4's rusage,
# no /usr/bin/time needed), and the deep tier's torch import (cuda.torch) timed beside it.
#
# Run from preflight's source tree at the repository root:
#   OUT=/some/dir [WHEELS=dir-of-wheels] [PYTHON=python3] [TORCH_PYTHON=python-with-torch] sh bench/gpu_device_check.sh
# Python: 3.10 or newer (preflight's floor). The capture needs the standard library only; the gate needs click, PyYAML,
# rich (with markdown-it-py, mdurl, pygments; typing_extensions on 3.10), orjson and ClusterShell: when one is missing and
# WHEELS names a folder of wheels (for this node's Python and platform), they are unpacked under $OUT/site.
# Everything lands under $OUT; bounded: about 6 minutes at most (each step under `timeout`).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-device-check-$(date -u +%Y%m%dT%H%M%SZ)}
PY=${PYTHON:-python3}
TPY=${TORCH_PYTHON:-$PY}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$ROOT" || exit 2
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/steps.log"; }

{ date -u; uname -a; "$PY" -V; "$TPY" -V; nvidia-smi --version; nvidia-smi -L; } >"$OUT/env.txt" 2>&1

# 1. Python packages the gate imports
missing=$("$PY" -c "
import importlib.util as u
print(' '.join(m for m in ('click', 'yaml', 'rich', 'orjson', 'ClusterShell') if u.find_spec(m) is None))" 2>&1)
log "missing python modules: ${missing:-none}"
if [ -n "$missing" ] && [ -d "${WHEELS:-/nonexistent}" ]; then
  # a wheel is a zip laid out as site-packages (PEP 427): unpacked, no pip and no network needed
  timeout 120 "$PY" -c "import glob, sys, zipfile
for w in sorted(glob.glob(sys.argv[2] + '/*.whl')):
    zipfile.ZipFile(w).extractall(sys.argv[1]); print(w)" "$OUT/site" "$WHEELS" >"$OUT/wheels.log" 2>&1
  log "wheels unpacked from $WHEELS into $OUT/site: rc $? ($(wc -l <"$OUT/wheels.log") files)"
  export PYTHONPATH="$PYTHONPATH:$OUT/site"
fi

# 2. the capture (every probe of the NVIDIA checks, raw, plus parse/evaluate of each check)
OUT="$OUT/capture" PYTHON="$PY" timeout 300 sh bench/gpu_capture.sh >"$OUT/capture.log" 2>&1
log "gpu_capture.sh: rc $? (output in capture/, log in capture.log)"

# 3. a minimal local inventory: this node's GPU count, the python that has torch
n=$("$PY" -c "import json; print(json.load(open('$OUT/capture/meta.json'))['gpus'])" 2>/dev/null)
[ -n "$n" ] && [ "$n" != None ] && [ "$n" != 0 ] || n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "$n" != 0 ] || n=1
cat >"$OUT/inventory.yaml" <<EOF
defaults:
  backend: nvidia
  devices: $n
  python: $TPY
nodes:
  - {name: elsewhere, host: 192.0.2.1}
EOF
log "inventory: devices $n, python $TPY"

# 4. the gate's answer, once as the operator reads it and once as JSON
timeout 60 "$PY" -m preflight.cli gate --local "$OUT/inventory.yaml" --no-color >"$OUT/gate_table.txt" 2>&1
log "gate --local (table): rc $?"
timeout 60 "$PY" -m preflight.cli gate --local "$OUT/inventory.yaml" --format json --output "$OUT/gate.json" >"$OUT/gate_json.log" 2>&1
log "gate --local (json): rc $?"

# 5. what it costs, three times (a prolog's form: --quiet), then the deep tier's torch import
for i in 1 2 3; do
  timeout 90 "$PY" bench/measure.py --out "$OUT/gate_cost_$i.json" -- "$PY" -m preflight.cli gate --local "$OUT/inventory.yaml" --quiet >/dev/null
  log "gate cost $i: $(cat "$OUT/gate_cost_$i.json" 2>/dev/null)"
done
timeout 120 "$PY" bench/measure.py --out "$OUT/cuda_torch_cost.json" -- "$PY" -m preflight.cli gate --local "$OUT/inventory.yaml" --checks cuda.env,cuda.torch --format json >/dev/null
log "cuda.env + cuda.torch (torch imported) cost: $(cat "$OUT/cuda_torch_cost.json" 2>/dev/null)"
log "done: $OUT"
