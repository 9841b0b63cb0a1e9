#!/usr/bin/env bash
# The gate three times on this machine against the committed baseline for its key (or first write
# it: UPDATE=1), checking that the three JSON results are identical (timings excluded); then the
# planted one-ULP and uint8-flip backends, which must fail it (exit 1). Prints each run's result
# and wall time, the bounds that moved at the baseline's severity, and both machines side by side.
# Usage: [UPDATE=1] [WORKERS=N] scripts/gate_gpu.sh [DEVICE]   (default cuda; from the repository root;
#        `cpu` with ATEN_CPU_CAPABILITY=avx2 checks the avx2 baseline on an x86 host)
set -euo pipefail
DEVICE="${1:-cuda}"
DIVFUZZ="${DIVFUZZ:-divfuzz}"
PYTHON="${PYTHON:-python}"
OUT="${OUT:-gate-gpu-out}"
WORKERS="${WORKERS:-1}"
mkdir -p "$OUT"
# Keyed by torch minor and GPU architecture or CPU capability, e.g. corpus/baseline-cuda-2.11-sm_90.json.
BASELINE=$("$PYTHON" -c 'import sys; from pathlib import Path; from divfuzz.fuzzer.gate.baseline import default_baseline_path; print(default_baseline_path(Path("corpus"), sys.argv[1]))' "$DEVICE")
"$PYTHON" -c 'import json, sys; from divfuzz.fuzzer.gate.machine import describe_machine; print("torch", __import__("torch").__version__, json.dumps(describe_machine(sys.argv[1])))' "$DEVICE"

if [ "${UPDATE:-0}" = 1 ]; then
  start=$(date +%s%N)
  $DIVFUZZ gate --device "$DEVICE" --workers "$WORKERS" --update-baseline --baseline "$BASELINE"
  echo "update-baseline: $(( ($(date +%s%N) - start) / 1000000 )) ms -> $BASELINE"
fi

for i in 1 2 3; do
  start=$(date +%s%N)
  set +e
  $DIVFUZZ gate --device "$DEVICE" --workers "$WORKERS" --baseline "$BASELINE" --json "$OUT/run$i.json" \
      --junit "$OUT/run$i.xml" --markdown "$OUT/run$i.md" --repro-dir "$OUT/repros$i"
  rc=$?
  set -e
  echo "run $i: exit $rc, wall $(( ($(date +%s%N) - start) / 1000000 )) ms"
done

for planted in ulp_bump uint8_flip; do
  set +e
  $DIVFUZZ gate --device "$DEVICE" --workers "$WORKERS" --baseline "$BASELINE" --backend "divfuzz.fuzzer.engine.planted:$planted" \
      --json "$OUT/planted-$planted.json" > "$OUT/planted-$planted.log" 2>&1
  rc=$?
  set -e
  echo "planted $planted: exit $rc (must be 1): $(grep -c '  FAIL ' "$OUT/planted-$planted.log") failing specs"
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
    for s in d["specs"]:
        for m in s["moved_bounds"]:
            print(f"  moved {s['name']}: {m}")
    runs.append(d)
for row in runs[0]["machine"]["rows"]:
    print(f"machine {row['field']}: baseline {row['baseline']} | this run {row['current']}" + ("  (differs)" if row["differs"] else ""))
same = runs[0] == runs[1] == runs[2]
print("three results identical (timings excluded):", same)
sys.exit(0 if same and runs[0]["result"] == "pass" else 1)
PY
