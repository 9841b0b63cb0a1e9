#!/usr/bin/env bash
# Fuzzing rate with minimization on (the analysis pool) against off: same seed, same workers.
#
#   scripts/bench_minimize_rate.sh [DEVICE] [WORKERS] [BUDGET_S] [SEED]     (defaults: cuda 8 200 7)
#
# Two real campaigns, each in a fresh folder with a cold, private Inductor cache. The rate is cases
# stored divided by the time from the run's start to its last stored case (as scripts/bench_workers.py).
# With the defaults it fits one 10-minute call: 2 x (200 s + start-up + at most 30 s of grace).
# Issue 11's goal: the rate with minimization keeps at least 70% of the rate without.
set -euo pipefail
DEVICE=${1:-cuda}; WORKERS=${2:-8}; BUDGET=${3:-200}; SEED=${4:-7}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python}
TMP=$(mktemp -d /tmp/divfuzz-minrate-XXXX)
trap 'rm -rf "$TMP"' EXIT

run() {  # $1: label, rest: extra fuzz options
  local label=$1; shift
  local out="$TMP/$label"
  local t0=$(date +%s)
  TORCHINDUCTOR_CACHE_DIR="$TMP/cache-$label" PYTHONPATH="$ROOT" "$PY" -m divfuzz.fuzzer fuzz --device "$DEVICE" --workers "$WORKERS" \
      --budget "${BUDGET}s" --seed "$SEED" --no-live --out "$out" "$@" > "$TMP/$label.log" 2>&1 || {
    echo "$label: divfuzz exited $?"; tail -n 30 "$TMP/$label.log"; exit 1; }
  local t1=$(date +%s)
  "$PY" - "$out/divfuzz.sqlite" "$label" "$((t1 - t0))" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
started = db.execute("SELECT min(started_at) FROM runs").fetchone()[0]
cases, last = db.execute("SELECT count(*), max(created_at) FROM cases").fetchone()
buckets = db.execute("SELECT count(*) FROM buckets").fetchone()[0]
root = db.execute("SELECT count(*) FROM buckets WHERE signature LIKE '%@%'").fetchone()[0]
pending = db.execute("SELECT count(*) FROM pending_analyses").fetchone()[0]
rate = cases / (last - started) if cases else 0.0
print(f"{sys.argv[2]}: {cases} cases in {last - started:.0f} s = {rate:.2f} cases/s; {buckets} buckets "
      f"({root} analysed to a root cause), {pending} analyses pending; {sys.argv[3]} s wall")
open(sys.argv[1] + ".rate", "w").write(f"{rate}\n")
PY
}

echo "device $DEVICE, $WORKERS fuzzing workers, budget ${BUDGET}s per campaign, seed $SEED"
run no-minimize --no-minimize
run minimize-pool --analysis-workers auto
grep -h "analysis\|pending" "$TMP/minimize-pool.log" | head -n 3 || true
"$PY" - "$TMP/no-minimize/divfuzz.sqlite.rate" "$TMP/minimize-pool/divfuzz.sqlite.rate" <<'PY'
import sys
off, on = (float(open(p).read()) for p in sys.argv[1:3])
print(f"minimization on / off: {on:.2f} / {off:.2f} cases/s = {on / off * 100 if off else 0:.0f}% (goal: >= 70%)")
PY
