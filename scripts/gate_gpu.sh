#!/usr/bin/env bash
# Write the CUDA baseline for the installed torch, then run the gate three times and check that
# the three JSON results are identical (timings excluded). Prints each run's wall time.
# Usage: scripts/gate_gpu.sh [DEVICE]   (default cuda; run from the repository root)
set -euo pipefail
DEVICE="${1:-cuda}"
DIVFUZZ="${DIVFUZZ:-divfuzz}"
PYTHON="${PYTHON:-python}"
OUT="${OUT:-gate-gpu-out}"
mkdir -p "$OUT"
# Keyed by torch minor and GPU architecture, e.g. corpus/baseline-cuda-2.11-sm_90.json.
BASELINE=$("$PYTHON" -c 'import sys; from pathlib import Path; from fuzzer.gate.replay import default_baseline_path; print(default_baseline_path(Path("corpus"), sys.argv[1]))' "$DEVICE")
"$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'

start=$(date +%s%N)
$DIVFUZZ gate --device "$DEVICE" --update-baseline --baseline "$BASELINE"
echo "update-baseline: $(( ($(date +%s%N) - start) / 1000000 )) ms -> $BASELINE"

for i in 1 2 3; do
  start=$(date +%s%N)
  set +e
  $DIVFUZZ gate --device "$DEVICE" --baseline "$BASELINE" --json "$OUT/run$i.json" \
      --junit "$OUT/run$i.xml" --markdown "$OUT/run$i.md" --repro-dir "$OUT/repros$i"
  rc=$?
  set -e
  echo "run $i: exit $rc, wall $(( ($(date +%s%N) - start) / 1000000 )) ms"
done

"$PYTHON" - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
runs = []
for i in (1, 2, 3):
    d = json.loads((out / f"run{i}.json").read_text())
    t = d.pop("timings")
    print(f"run {i}: result {d['result']}, gate total {t['total_s']:.1f} s, replay {t['replay_s']:.1f} s, worker start {t['worker_startup_s']:.1f} s")
    runs.append(d)
same = runs[0] == runs[1] == runs[2]
print("three results identical (timings excluded):", same)
sys.exit(0 if same and runs[0]["result"] == "pass" else 1)
PY
