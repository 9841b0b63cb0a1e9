#!/usr/bin/env bash
# The H100 model table of issue 14: `minimize --module` on tiny, randomly initialised real models
# (transformers Qwen2, GPT-2, BERT; timm ConvNeXt and ViT; torchvision ResNet-50), each in bf16
# inference and one `--train` step. No download: every config is built in tests/modules/*.py.
#
#   scripts/gpu_models.sh 1        # call 1: the transformers (6 runs, < 9 minutes)
#   scripts/gpu_models.sh 2        # call 2: the vision models (6 runs, < 9 minutes)
#   scripts/gpu_models.sh qwen2-infer bert-train ...   # any subset, by RUN name
#   scripts/gpu_models.sh table    # only print the table of what is under $D
#
# Runs go $PAR at a time (default two) on the one GPU (Inductor's compile is CPU-bound; 16 cores): each gets
# --budget $BUDGET as a deadline for the whole command (its worker is killed 90 s of grace later,
# naming the phase it was in) and is stopped by `timeout` at $LIMIT s (past budget + grace + the
# worker's start), so a set of six ends within 3 x $LIMIT s. Wall times are therefore measured two-up, not alone. Each run's folder
# $D/RUN/ holds what --module writes (capture.json, NN-rung/culprit.json, ...), its log, and
# wall.txt + rc.txt; scripts/models_table.py reads them into one markdown table ($OUT/models.md).
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
D=${DIVFUZZ_GPU_DIR:-/tmp/dv-models}
BUDGET=${BUDGET:-45s}
LIMIT=${LIMIT:-160}
mkdir -p "$D"
SET1="qwen2-infer qwen2-train gpt2-infer gpt2-train bert-infer bert-train"
SET2="convnext-infer convnext-train vit-infer vit-train resnet50-infer resnet50-train"
module_of() {
  case "$1" in
    qwen2) echo tests/modules/tiny_qwen2.py ;;
    gpt2) echo tests/modules/tiny_gpt2.py ;;
    bert) echo tests/modules/tiny_bert.py ;;
    convnext) echo tests/modules/timm_convnext.py ;;
    vit) echo tests/modules/timm_vit.py ;;
    resnet50) echo tests/modules/tv_resnet50.py ;;
    *) return 1 ;;
  esac
}
one() {  # one RUN (model-infer | model-train) into $D/RUN
  local run=$1 model=${1%-*} mode=${1##*-} file
  file=$(module_of "$model") || { echo "unknown model in $run"; return 2; }
  case "$mode" in infer) set -- ;; train) set -- --train ;; *) echo "unknown mode in $run"; return 2 ;; esac
  rm -rf "${D:?}/$run"; mkdir -p "$D/$run"
  local t0=$SECONDS
  timeout "$LIMIT" python3 -m divfuzz.fuzzer minimize --module "$file:make_case" --device cuda --budget "$BUDGET" \
    --out "$D/$run" "$@" > "$D/$run/log.txt" 2>&1
  echo $? > "$D/$run/rc.txt"
  echo $((SECONDS - t0)) > "$D/$run/wall.txt"
  echo "=== $run: exit $(cat "$D/$run/rc.txt"), $(cat "$D/$run/wall.txt") s"; tail -6 "$D/$run/log.txt"
}
case "${1:-}" in
  1) RUNS=$SET1 ;;
  2) RUNS=$SET2 ;;
  table) RUNS= ;;
  "") echo "usage: $0 1|2|table|RUN..."; exit 2 ;;
  *) RUNS="$*" ;;
esac
if [ -n "$RUNS" ]; then
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
  python3 -c "import transformers, timm, torchvision; print('transformers', transformers.__version__, 'timm', timm.__version__, 'torchvision', torchvision.__version__)" 2>&1 | tail -1
  set -- $RUNS
  while [ $# -gt 0 ]; do  # $PAR at a time (default 2)
    for _ in $(seq "${PAR:-2}"); do
      if [ $# -gt 0 ]; then one "$1" & shift; fi
    done
    wait
  done
fi
python3 scripts/models_table.py "$D" | tee "${OUT:-$D}/models.md"
for run in $RUNS; do  # each repro of this call, standalone, side by side: exits 1 while it still diverges
  for f in "$D/$run"/[0-9][0-9]-*/repro.py; do
    [ -f "$f" ] && { timeout 30 python3 "$f" > /dev/null 2>&1; echo "$f exits $?"; } &
  done
done
wait
if [ -n "${OUT:-}" ]; then  # what the table was read from, small files only (no inputs.bin), as one archive
  (cd "$D" && find . -name '*.json' -o -name '*.txt' -o -name repro.py | tar -czf "$OUT/models.tar.gz" -T -)
fi
true
