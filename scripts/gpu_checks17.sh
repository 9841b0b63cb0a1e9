#!/usr/bin/env bash
# Device checks of this stop's CUDA-touching changes, in one call (from the repo root on a CUDA host):
# the onnxrt backend's export device, `gate --oracle perf` on CUDA, then model runs (gpu_models.sh).
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/dv17}; mkdir -p "$OUT"
echo "=== onnxrt, 40 cases, no minimization"
timeout 100 python3 -m fuzzer fuzz --device cuda --backend onnxrt --max-cases 40 --seed 12 --no-minimize --no-live --out /tmp/ox2 2>&1 | grep -E "cases in|statuses"
python3 - <<'PY'
import collections, json, sqlite3
db = sqlite3.connect("/tmp/ox2/divfuzz.sqlite")
c = collections.Counter()
for status, v in db.execute("select status, verdict_json from cases where status like '%error%'"):
    c[(status, (json.loads(v).get("error_message") or "")[:160])] += 1
for k, n in c.most_common(6):
    print(n, k)
PY
echo "=== gate --oracle perf on CUDA (4 corpus specs)"
timeout 200 python3 -m fuzzer gate --oracle perf --device cuda --spec seed-gate-bf16 --spec min-fp16-ulp-layer-norm \
  --spec norm-linear-bfloat16-bwd --spec seed-gelu-erf-bf16 --json "$OUT/gate-perf.json" --markdown "$OUT/gate-perf.md" 2>&1 | tail -14
echo "gate rc=${PIPESTATUS[0]}"
echo "=== models"
PAR=${PAR:-3} LIMIT=${LIMIT:-170} BUDGET=${BUDGET:-60s} OUT=$OUT bash scripts/gpu_models.sh "$@" 2>&1 | grep -v "^  " | grep -v "resource_tracker\|warnings.warn\|UserWarning" | tail -40
echo "end at $SECONDS s"
