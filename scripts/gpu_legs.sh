#!/usr/bin/env bash
# `divfuzz bench --legs` on a GPU host, offline: one GPU, every GPU, and a local Dask cluster with
# one worker per GPU, each leg a default campaign on the same seed with its own cold compile cache
# (divfuzz.fuzzer.campaign.bench_legs), then each leg's breakdown (the compile by phase included).
#
# Usage (from the repository root): scripts/gpu_legs.sh [LEGS]   (default one,all,dask)
#   BUDGET=120   seconds per leg (3 legs and their start-up fit one 10-minute call at 120)
#   CASES=       bound each leg by cases instead (a smoke test: CASES=8 DEVICE=cpu WORKERS=1)
#   SEED=1  OUT=legs-out  DEVICE=cuda  PYTHON=python3
#   WORKERS=auto   or N: slots per GPU
#   MINIMIZE=0     1: keep minimization (a default campaign: an analysis pool beside the slots, on a fleet on its nodes)
#   WHEELS=DIR     install dask[distributed] and the packages it needs from DIR first, offline
set -euo pipefail
LEGS="${1:-one,all,dask}"
BUDGET="${BUDGET:-120}"
SEED="${SEED:-1}"
OUT="${OUT:-legs-out}"
DEVICE="${DEVICE:-cuda}"
PYTHON="${PYTHON:-python3}"
WORKERS="${WORKERS:-auto}"

if [ -n "${WHEELS:-}" ]; then
  "$PYTHON" -m pip install --quiet --no-index --find-links "$WHEELS" "dask[distributed]==2026.8.0"
fi
# divfuzz importable as `divfuzz` (the checkout is the package): an editable install, offline.
"$PYTHON" -c "import divfuzz.fuzzer" 2>/dev/null || "$PYTHON" -m pip install --quiet --no-deps --no-build-isolation --no-index -e .
# Which of torch's compile timers this torch records: `bench --breakdown` splits the compile by them.
"$PYTHON" - "$DEVICE" <<'PY'
import sys
import torch
from torch._dynamo.utils import compilation_time_metrics
device = "cuda" if sys.argv[1].startswith("cuda") else "cpu"
x = torch.randn(256, 64, device=device, requires_grad=True)
torch.compile(lambda x: torch.nn.functional.gelu(x).sum(-1).softmax(0))(x).sum().backward()
names = ("_compile.compile_inner", "OutputGraph.call_user_compiler", "create_aot_dispatcher_function", "backward._backward_impl",
         "compile_fx_inner", "compile_file", "async_compile.precompile", "async_compile.wait", "CachingAutotuner.benchmark_all_configs")
print("torch", torch.__version__, "GPUs", torch.cuda.device_count(), "| phase timers:",
      ", ".join(f"{n} {'yes' if n in compilation_time_metrics else 'NO'}" for n in names))
print("other timers:", ", ".join(sorted(k for k in compilation_time_metrics if k not in names))[:1500])
PY
"$PYTHON" -c 'import distributed; print("dask distributed", distributed.__version__)' || echo "no Dask: the dask leg will exit 2 (pass WHEELS=.whl)"
rm -rf "$OUT"
BOUND=(--budget "${BUDGET}s")
if [ -n "${CASES:-}" ]; then BOUND=(--cases "$CASES"); fi
MIN=(--no-minimize)
if [ "${MINIMIZE:-0}" = 1 ]; then MIN=(); fi
"$PYTHON" -m divfuzz.fuzzer bench --device "$DEVICE" --legs "$LEGS" "${BOUND[@]}" --seed "$SEED" --workers "$WORKERS" "${MIN[@]}" --out "$OUT"
for leg in ${LEGS//,/ }; do
  if [ -d "$OUT/leg-$leg/out" ]; then
    echo; echo "== leg $leg"
    "$PYTHON" -m divfuzz.fuzzer bench --breakdown "$OUT/leg-$leg/out"
  fi
done
