#!/usr/bin/env bash
# `divfuzz fuzz --cluster` on one multi-GPU host: a Dask scheduler and one Dask worker per GPU
# (CUDA_VISIBLE_DEVICES=i, SLOTS threads each, so SLOTS divfuzz slots per GPU), then the same
# campaign through the cluster path with 1 GPU and with NGPUS GPUs, each leg with its own cold
# Inductor cache. Prints each leg's cases/s and the scaling factor.
#
# Usage (from the repository root): scripts/gpu_cluster.sh [1|N|both]   (default both)
#   BUDGET=240   seconds per leg (each leg fits one 10-minute call: run "1" and "2" apart if needed)
#   NGPUS=2      GPUs of the multi-GPU leg
#   SLOTS=12     slots (Dask worker threads) per GPU: the knee of the H100 workers curve (16 cores)
#   Each GPU's Dask worker is pinned (taskset) to its own 1/NGPUS of the host's cores, so a node is one
#   GPU and its share of the cores, as on a fleet of one-GPU hosts; both legs use the same share.
#   DRIVER_CORES=0  cores kept for the driver (taskset), as on a fleet where it has a host of its own;
#                0: the driver shares the host's cores with the nodes
#   DEVICE=cuda  (cpu for a smoke test on a host without a GPU)
#   SEED=1  OUT=cluster-out  PYTHON=python3
#   WHEELS=DIR   install dask + distributed from this folder first (no index: the host has no internet)
set -euo pipefail
MODE="${1:-both}"
BUDGET="${BUDGET:-240}"
NGPUS="${NGPUS:-2}"
SLOTS="${SLOTS:-12}"
DEVICE="${DEVICE:-cuda}"
CORES=$(nproc)
DRIVER_CORES="${DRIVER_CORES:-0}"
SHARE=$(( (CORES - DRIVER_CORES) / NGPUS > 0 ? (CORES - DRIVER_CORES) / NGPUS : 1 ))
DRIVER=()
if [ "$DRIVER_CORES" -gt 0 ]; then DRIVER=(taskset -c "0-$((DRIVER_CORES - 1))"); fi
SEED="${SEED:-1}"
OUT="${OUT:-cluster-out}"
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# divfuzz's isolated workers are child processes of the Dask workers, which Dask makes daemonic by default.
export DASK_DISTRIBUTED__WORKER__DAEMON=False
mkdir -p "$OUT"

if [ -n "${WHEELS:-}" ]; then
  "$PYTHON" -m pip install --quiet --no-index --find-links "$WHEELS" dask distributed
fi
"$PYTHON" -c 'import torch, distributed; print("torch", torch.__version__, "dask", distributed.__version__, "GPUs", torch.cuda.device_count(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")'
echo "host: $CORES cores; the driver gets ${DRIVER_CORES} of its own (0: shares), each GPU's node $SHARE and $SLOTS slots"

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

leg() {  # leg GPUS: a fresh scheduler and GPUS workers, one campaign, its rate into $OUT/leg-GPUS.txt
  local gpus="$1" dir="$OUT/leg-$1gpu" port=$((8786 + $1))
  rm -rf "$dir"; mkdir -p "$dir"
  "$PYTHON" -m distributed.cli.dask_scheduler --host 127.0.0.1 --port "$port" --dashboard-address :0 \
      --scheduler-file "$dir/scheduler.json" >"$dir/scheduler.log" 2>&1 &
  local sched=$!; PIDS+=("$sched")
  for ((i = 0; i < gpus; i++)); do
    CUDA_VISIBLE_DEVICES=$i TORCHINDUCTOR_CACHE_DIR="$dir/inductor-cache-$i" \
      taskset -c "$((DRIVER_CORES + i * SHARE))-$((DRIVER_CORES + i * SHARE + SHARE - 1))" "$PYTHON" -m distributed.cli.dask_worker --scheduler-file "$dir/scheduler.json" --nworkers 1 \
        --nthreads "$SLOTS" --memory-limit 0 --name "gpu$i" >"$dir/worker$i.log" 2>&1 &
    PIDS+=("$!")
  done
  # Wait until every worker has joined (the scheduler file appears first).
  "$PYTHON" - "$dir/scheduler.json" "$gpus" <<'PY'
import sys, time
from pathlib import Path
path, want = Path(sys.argv[1]), int(sys.argv[2])
deadline = time.time() + 180
while not path.exists():
    if time.time() > deadline: sys.exit("no scheduler file after 180 s")
    time.sleep(0.5)
from distributed import Client
client = Client(scheduler_file=str(path), timeout=60)
client.wait_for_workers(want, timeout=180)
print(f"{want} Dask worker(s) joined:", sorted(client.scheduler_info(n_workers=-1)["workers"]))
client.close()
PY
  local start end
  start=$(date +%s.%N)
  "${DRIVER[@]}" "$PYTHON" -m divfuzz.fuzzer fuzz --cluster-file "$dir/scheduler.json" --device "$DEVICE" --budget "${BUDGET}s" --no-minimize \
      --no-live --seed "$SEED" --out "$dir/out" 2>&1 | tee "$dir/fuzz.log"
  end=$(date +%s.%N)
  "$PYTHON" - "$dir" "$gpus" "$start" "$end" <<'PY'
import re, sqlite3, sys
from pathlib import Path
d, gpus, start, end = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
log = (d / "fuzz.log").read_text()
m = re.search(r"run \d+(?: \(resumed\))?: (\d+) cases in (\d+) s", log)
cases, secs = int(m.group(1)), int(m.group(2))
db = sqlite3.connect(d / "out" / "divfuzz.sqlite")
by_device = db.execute("SELECT ran_on, COUNT(*) FROM cases GROUP BY ran_on ORDER BY ran_on").fetchall()
line = f"{gpus} GPU(s): {cases} cases in {secs} s = {cases / secs:.2f} cases/s (command wall {end - start:.0f} s); by device {by_device}"
print(line)
(d.parent / f"leg-{gpus}.txt").write_text(f"{cases / secs}\n{line}\n")
PY
  cleanup; PIDS=()
}

case "$MODE" in
  1) leg 1 ;;
  both) leg 1; leg "$NGPUS" ;;
  *) leg "$MODE" ;;
esac

if [ -f "$OUT/leg-1.txt" ] && [ -f "$OUT/leg-$NGPUS.txt" ]; then
  "$PYTHON" - "$OUT" "$NGPUS" <<'PY'
import sys
from pathlib import Path
out, n = Path(sys.argv[1]), sys.argv[2]
one, many = (float((out / f"leg-{k}.txt").read_text().split()[0]) for k in ("1", n))
print((out / "leg-1.txt").read_text().splitlines()[1])
print((out / f"leg-{n}.txt").read_text().splitlines()[1])
print(f"scaling: {many / one:.2f}x on {n} GPUs against 1 (goal: at least 1.8x)")
PY
fi
