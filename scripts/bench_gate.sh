#!/usr/bin/env bash
# Wall time of `divfuzz gate` on the shipped corpus as CI runs it (`.ci/run`: --workers 2): once
# with a cold Inductor cache (a fresh CI machine) and once warm. The test suite does not assert
# timings; this script measures them.
# Usage: [WORKERS=N] scripts/bench_gate.sh [cpu|cuda] [extra gate arguments, e.g. --corpus DIR]
set -euo pipefail
device="${1:-cpu}"
shift || true
cache="$(mktemp -d)"
trap 'rm -rf "$cache"' EXIT
for run in cold warm; do
  start=$(date +%s.%N)
  set +e
  TORCHINDUCTOR_CACHE_DIR="$cache" divfuzz gate --device "$device" --workers "${WORKERS:-2}" --json "$cache/gate-$run.json" "$@" >"$cache/gate-$run.log" 2>&1
  rc=$?
  set -e
  end=$(date +%s.%N)
  printf '%s cache: %.0f s, exit %s, %s\n' "$run" "$(echo "$end - $start" | bc)" "$rc" \
    "$(python -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["result"], d["counts"], "moved bounds:", d["moved_bounds"])' "$cache/gate-$run.json" 2>/dev/null || tail -c 600 "$cache/gate-$run.log")"
done
