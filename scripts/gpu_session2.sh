#!/usr/bin/env bash
# Second GPU call, on a 2-GPU host: the GPU tests alone (every GPU visible: the pinning test uses
# both), then the CUDA baseline re-recorded with nothing else on the GPUs (returned in $OUT).
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
D=/tmp/dv2; mkdir -p "$D"; OUT=${OUT:-$D/out}; mkdir -p "$OUT"
nvidia-smi -L
t0=$SECONDS
timeout 260 python3 -m pytest -q -p no:cacheprovider -m gpu -rA --durations=12 > "$D/gpu-tests.log" 2>&1
echo "=== pytest -m gpu: $((SECONDS - t0)) s"; grep -E "passed|failed|PASSED|FAILED|ERROR|SKIPPED|^[0-9.]+s " "$D/gpu-tests.log" | tail -40
cp "$D/gpu-tests.log" "$OUT/"
echo "=== gate --update-baseline (alone)"
t0=$SECONDS
timeout 150 python3 -m fuzzer gate --device cuda --workers 8 --update-baseline 2>&1 | tail -3
cp corpus/baseline-cuda-*.json "$OUT/" 2>/dev/null
echo "($((SECONDS - t0)) s); end"
