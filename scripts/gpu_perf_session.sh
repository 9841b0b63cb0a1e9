#!/usr/bin/env bash
# One GPU call for the perf oracle (issue 13), from the repo root on a CUDA host: the noise floor
# (A/A), the GPU perf tests, seed 001's block through `minimize --module --oracle perf --train`
# with Inductor's defaults and with the mix-order over-fusion forced, then a short perf campaign.
# Usage: scripts/gpu_perf_session.sh [campaign-seconds]
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
D=/tmp/dvp; mkdir -p "$D"; OUT=${OUT:-$D/out}; mkdir -p "$OUT"
nvidia-smi -L; nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
python3 -c "import torch._inductor.config as c; print({k: c._config[k].default for k in c._config if 'mix_order' in k})"
echo "=== A/A noise floor"; timeout 150 python3 scripts/perf_noise.py --device cuda --cases 40 2>&1 | tail -12
echo "=== GPU perf tests"; timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -s tests/test_perf_gpu.py 2>&1 | grep -v Warning | tail -14
echo "=== seed 001 block, defaults"
timeout 170 python3 -m fuzzer minimize --module tests/modules/seed001_block.py:block_h100 --oracle perf --train --device cuda --budget 130s --out "$OUT/seed001" 2>&1 | tail -20
echo "=== seed 001 block, mix-order over-fusion forced (max_reads 100, non-strict)"
timeout 120 python3 -m fuzzer minimize --module tests/modules/seed001_block.py:block_h100 --oracle perf --train --device cuda --budget 80s --out "$OUT/seed001-forced" \
  --inductor triton.mix_order_reduction_max_reads=100 --inductor triton.mix_order_reduction_non_strict_mode=true 2>&1 | tail -20
echo "=== perf campaign"
timeout $(( ${1:-60} + 90 )) python3 -m fuzzer fuzz --oracle perf --device cuda --budget "${1:-60}s" --seed 1 --no-live --out "$D/perf" 2>&1 | tail -30
cp -r "$D/perf" "$OUT/perf" 2>/dev/null
echo "end at $SECONDS s"
