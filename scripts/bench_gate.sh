#!/usr/bin/env bash
# Wall time of `divfuzz gate` on the shipped corpus: once with a cold Inductor cache (a fresh CI
# machine) and once warm. The test suite does not assert timings; this script measures them.
# Usage: scripts/bench_gate.sh [cpu|cuda]
set -euo pipefail
device="${1:-cpu}"
cache="$(mktemp -d)"
trap 'rm -rf "$cache"' EXIT
for run in cold warm; do
  start=$(date +%s.%N)
  TORCHINDUCTOR_CACHE_DIR="$cache" divfuzz gate --device "$device" --json "$cache/gate-$run.json" >/dev/null
  end=$(date +%s.%N)
  printf '%s cache: %.0f s, %s\n' "$run" "$(echo "$end - $start" | bc)" \
    "$(python -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["result"], d["counts"])' "$cache/gate-$run.json")"
done
