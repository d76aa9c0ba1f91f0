#!/usr/bin/env bash
# One-shot check of the CUDA programs on ONE GPU, in under 10 minutes in all (the device
# tool lends about 15). From the repository root on a machine with a CUDA GPU:
#
#   bash benchmarks/gpu_check.sh             # TARGET=h200 by default; writes gpu-out/
#   bash benchmarks/gpu_check.sh --dry-run   # no GPU: compile every program it would run
#
# It runs, each on one GPU with a time limit:
#   S1  SD3 MMDiT d24 training at full size: bf16, batch 16, 256x256, flash attention
#   S3  the SD3 8B pipeline at full size (1024x1024, 30 steps, guidance): 2 images timed
#   S4  Llama-2-70B-width training with 2 layers (fp16, batch 2 x accumulation 2, seq 2048)
#   S5  Llama-2-70B-width generation with 2 layers: 128 -> 2048 tokens, static cache, graphs
# and writes OUT/summary.md: status, step time, throughput, MFU and peak memory of each.
set -euo pipefail
DRY_RUN=0
if [ "${1:-}" = "--dry-run" ]; then
  DRY_RUN=1
elif [ -n "${1:-}" ]; then
  echo "usage: bash benchmarks/gpu_check.sh [--dry-run]" >&2
  exit 2
fi
OUT="${OUT:-gpu-out}"
TARGET="${TARGET:-h200}"
PYTHON="${PYTHON:-python3}"
BENCHC=("$PYTHON" -m benchc)
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
ONE_GPU=(--set cluster.nodes=1 --set cluster.devices_per_node=1 --set parallel.data=1)

if [ "$DRY_RUN" -eq 0 ]; then
  "$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT/gpu.csv" || true
fi

# name, spec, experiment, seconds allowed, then the spec's settings for one GPU
run_check() {
  local name=$1 spec=$2 experiment=$3 seconds=$4
  shift 4
  "${BENCHC[@]}" compile "$spec" --target "$TARGET" -o "$OUT/build/$name" "${ONE_GPU[@]}" "$@" >/dev/null
  local point="$OUT/build/$name/$experiment/$TARGET/default"
  bash -n "$point/launch.sh"
  if [ "$DRY_RUN" -eq 1 ]; then
    echo "$name: $(BENCHC_DRY_RUN=1 PYTHON="$PYTHON" bash "$point/launch.sh" --metrics "$OUT/$name.json")"
    return 0
  fi
  echo "== $name (up to $seconds s)"
  timeout --signal=TERM --kill-after=20 "$seconds" env PYTHON="$PYTHON" \
    bash "$point/launch.sh" --metrics "$OUT/$name.json" >"$OUT/$name.log" 2>&1 \
    || echo "$name ended with status $? (see $OUT/$name.log)"
}

run_check s1 specs/sd3.bench sd3_mmdit_train 150 --set train.batch=16 --set train.steps=30
run_check s3 specs/sd3-infer.bench sd3_large_infer 150 --set infer.steps=3 --set infer.warmup=1
run_check s4 specs/beluga-train.bench beluga_70b_train 120 --set model.llama.layers=2 \
  --set train.global_batch=4 --set parallel.sharding=none --set train.steps=8 --set train.warmup=3
run_check s5 specs/beluga-infer.bench beluga_70b_infer 150 --set model.llama.layers=2 \
  --set parallel.tensor=1

if [ "$DRY_RUN" -eq 1 ]; then
  echo "dry run: 4 programs compiled for $TARGET under $OUT/build"
  exit 0
fi
"$PYTHON" - "$OUT" <<'PY'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
rows = ["| workload | status | step median (s) | throughput | MFU | peak memory (GiB) |",
        "|---|---|---|---|---|---|"]
for name in ("s1", "s3", "s4", "s5"):
    path = out / f"{name}.json"
    if not path.exists():
        rows.append(f"| {name} | no metrics (see {name}.log) | | | | |")
        continue
    m = json.loads(path.read_text())
    if m["status"] != "ok":
        rows.append(f"| {name} | {m['status']}: {(m.get('error') or {}).get('message', '')[:80]} | | | | |")
        continue
    mfu = m["flops"]["mfu"]
    rows.append(f"| {name} | ok on {m['device_name']} | {m['step_time_s']['median']:.4g} | "
                f"{m['throughput']['job']:.4g} {m['throughput']['unit']} | "
                f"{'-' if mfu is None else f'{mfu:.1%}'} | {m['peak_memory_bytes'] / 2**30:.1f} |")
(out / "summary.md").write_text("\n".join(rows) + "\n")
print("\n".join(rows))
PY
