#!/usr/bin/env bash
# One GPU call for the perf oracle (issue 13), from the repo root on a CUDA host: the noise floor
# (A/A), the GPU perf tests, seed 001's block and seed 001's shape of model through
# `minimize --module --oracle perf --train` (every scheduling switch probed), then a short perf campaign.
# Usage: scripts/gpu_perf_session.sh [campaign-seconds]
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
D=/tmp/dvp; mkdir -p "$D"; OUT=${OUT:-$D/out}; mkdir -p "$OUT"
nvidia-smi -L; nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
python3 -c "import torch._inductor.config as c; print({k: c._config[k].default for k in c._config if 'mix_order' in k})"
echo "=== A/A noise floor"; timeout 150 python3 scripts/perf_noise.py --device cuda --cases 40 2>&1 | tail -12
echo "=== GPU perf tests"; timeout 150 python3 -m pytest -q -p no:cacheprovider -p no:logging -m gpu -s tests/test_perf_gpu.py 2>&1 | grep -E "describe|ratio|A/A|assert|Error|passed|failed|^E " | tail -30
echo "=== seed 001 block, defaults"
timeout 100 python3 -m divfuzz.fuzzer minimize --module tests/modules/seed001_block.py:block_h100 --oracle perf --train --device cuda --budget 60s --out "$OUT/seed001" 2>&1 | tail -20
echo "=== seed 001's shape of model (4 layers, 8 x 2048 tokens, bf16), training step"
timeout 260 python3 -m divfuzz.fuzzer minimize --module tests/modules/seed001_block.py:lm_h100 --oracle perf --train --device cuda --budget 220s --out "$OUT/seed001-lm" 2>&1 | tail -20
echo "=== perf campaign"
timeout $(( ${1:-60} + 90 )) python3 -m divfuzz.fuzzer fuzz --oracle perf --device cuda --budget "${1:-60}s" --seed 1 --no-live --out "$D/perf" 2>&1 | tail -30
cp -r "$D/perf" "$OUT/perf" 2>/dev/null
echo "end at $SECONDS s"
