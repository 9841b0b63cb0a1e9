#!/usr/bin/env bash
# GPU check for judgement, safety and capture (run from the repo root on a CUDA host; no install
# needed where torch, hypothesis, numpy, rich and click are present). Call 1 starts the 15-minute
# campaign in its own session and runs the user modules, the gate and the GPU tests meanwhile;
# `scripts/gpu_judgement.sh wait` waits for the campaign and prints its summary and report.
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
D=${DIVFUZZ_GPU_DIR:-/tmp/dv}
mkdir -p "$D"
if [ "${1:-}" = wait ]; then
  while pgrep -f "fuzzer fuzz --device cuda" >/dev/null; do sleep 5; done
  tail -40 "$D/c15.log"
  python3 -m divfuzz.fuzzer report --out "$D/c15" > "$D/c15-report.md" 2>&1; head -c 20000 "$D/c15-report.md"
  cp "$D/c15.log" "$D/c15-report.md" "$OUT/" 2>/dev/null
  exit 0
fi
if [ "${1:-}" = campaign ]; then  # only the campaign: start it, watch it for up to 9 minutes
  setsid nohup python3 -m divfuzz.fuzzer fuzz --device cuda --workers 12 --budget 15m --seed 1 --out "$D/c15" --no-live > "$D/c15.log" 2>&1 < /dev/null &
  for _ in $(seq 108); do sleep 5; pgrep -f "fuzzer fuzz --device cuda" >/dev/null || break; done
  tail -4 "$D/c15.log"; exit 0
fi
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(), 'sm_%d%d' % torch.cuda.get_device_capability())"
setsid nohup python3 -m divfuzz.fuzzer fuzz --device cuda --workers 12 --budget 15m --seed 1 --out "$D/c15" --no-live > "$D/c15.log" 2>&1 < /dev/null &
echo "campaign started at $(date +%T)"
run() { echo "=== $*"; local t0=$SECONDS; timeout 200 python3 -m divfuzz.fuzzer minimize --device cuda --budget 60s "$@" 2>&1 | tail -14; echo "(wall $((SECONDS - t0)) s)"; }
run --module tests/modules/floordiv_fp32.py:make_case --out "$D/m-floordiv"
run --module tests/modules/logsoftmax_bf16_fp32.py:make_case --out "$D/m-logsoftmax"
run --module tests/modules/seed000_gated.py:make_case --autocast bfloat16 --out "$D/m-seed000"
run --module tests/modules/graph_breaks.py:argmax_head --out "$D/m-argmax"
run --module tests/modules/graph_breaks.py:inf_guard --train --out "$D/m-infguard"
run --module tests/modules/tiny_llama.py:make_case --out "$D/m-llama"
for f in "$D"/m-*/01-*/repro.py; do [ -f "$f" ] && { python3 "$f" cuda > /dev/null 2>&1; echo "$f exits $?"; }; done
echo "=== gate cuda"
timeout 150 python3 -m divfuzz.fuzzer gate --device cuda --json "$D/gate.json" 2>&1 | tail -8
tail -3 "$D/c15.log"
echo "end of call 1 at $(date +%T)"
