#!/usr/bin/env bash
# One GPU campaign for a closing note, from the repo root on a CUDA host, with its report and each
# bucket's files in one archive, $OUT/NAME.tar.gz (the device tool brings back a few files): the
# reports, the buckets and the timings only, never the store's database or a compile cache.
# Usage: scripts/gpu_campaign.sh NAME SECONDS [divfuzz fuzz options...]
#   e.g. scripts/gpu_campaign.sh perf 530 --oracle perf --seed 11
#        scripts/gpu_campaign.sh onnxrt 300 --backend onnxrt --seed 12
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
NAME=$1; SECS=$2; shift 2
OUT=${OUT:-/tmp/dvc-out}; D=/tmp/dvc/$NAME; mkdir -p "$OUT" "$D"
nvidia-smi -L
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
timeout $(( SECS + 120 )) python3 -m divfuzz.fuzzer fuzz --device cuda --budget "${SECS}s" --no-live --out "$D" "$@" 2>&1 | tail -40
echo "rc=${PIPESTATUS[0]}"
python3 -m divfuzz.fuzzer report --out "$D" > "$D/report.md" 2>&1
python3 -m divfuzz.fuzzer report --out "$D" --html "$D/report.html" > /dev/null 2>&1
cp "$D/report.md" "$OUT/$NAME-report.md"
(cd /tmp/dvc && tar -czf "$OUT/$NAME.tar.gz" "$NAME/report.md" "$NAME/report.html" "$NAME/buckets" $(cd /tmp/dvc && ls "$NAME"/*timings*.json 2>/dev/null))
echo "end at $SECONDS s"
