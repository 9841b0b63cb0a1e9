#!/usr/bin/env bash
# One GPU call for the re-layered tree (run from the repo root on a CUDA host with torch, triton,
# hypothesis, numpy, rich and click): the GPU tests and the CUDA gate side by side, then the
# workers curve alone (cold caches), then a short default campaign whose store comes back in $OUT.
# Usage: scripts/gpu_session.sh [curve-budget-seconds]
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
D=/tmp/dv; mkdir -p "$D"; OUT=${OUT:-$D/out}; mkdir -p "$OUT"
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(), 'sm_%d%d' % torch.cuda.get_device_capability(), 'cores', len(__import__('os').sched_getaffinity(0)))"
t0=$SECONDS
(timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -x 2>&1 | tail -15 > "$D/gpu-tests.log") &
(timeout 200 python3 -m fuzzer gate --device cuda --workers 6 --json "$D/gate.json" > "$D/gate.log" 2>&1) &
wait
echo "=== pytest -m gpu ($((SECONDS - t0)) s for both)"; cat "$D/gpu-tests.log"
echo "=== gate cuda"; tail -6 "$D/gate.log"
echo "=== workers curve"
timeout 250 python3 scripts/bench_workers.py --device cuda --workers 1,4,8,16 --budget "${1:-25}" 2>&1 | tail -16
echo "=== default campaign (workers auto, minimization on), 45 s"
timeout 120 python3 -m fuzzer fuzz --device cuda --budget 45s --seed 3 --no-live --out "$D/c60" 2>&1 | tail -25
cp -r "$D/c60" "$OUT/c60" 2>/dev/null; cp "$D/gate.json" "$OUT/" 2>/dev/null
echo "end at $SECONDS s"
