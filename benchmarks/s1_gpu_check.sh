#!/usr/bin/env bash
# Prepared GPU check for the S1 CUDA program (issue 3): SD3 MMDiT d24, bf16, batch 16 per
# device, 256x256, flash SDPA, on ONE GPU. Meant for the device tool: run once from the repo
# root on a machine with a CUDA GPU; figures land in $OUT (default ./gpu-out).
#   bash benchmarks/s1_gpu_check.sh
# It installs benchc's run dependencies without replacing a CUDA torch already there.
set -euo pipefail
OUT="${OUT:-gpu-out}"
mkdir -p "$OUT"
TARGET="${TARGET:-h200}"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'" \
  || python3 -m pip install -q torch
python3 -m pip install -q -e '.[run]' 2>&1 | tail -2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.csv" || true
benchc compile specs/sd3.bench --target "$TARGET" -o "$OUT/build" \
  --set train.batch=16 --set cluster.nodes=1 --set cluster.devices_per_node=1 \
  --set parallel.data=1
POINT="$OUT/build/sd3_mmdit_train/$TARGET/default"
PYTHON=python3 bash "$POINT/launch.sh" --metrics "$PWD/$OUT/metrics.json" 2>&1 | tee "$OUT/log.txt"
python3 - "$OUT/metrics.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
s = m["step_time_s"]
print(f"device {m['device_name']}: step median {s['median']*1e3:.1f} ms "
      f"(p10 {s['p10']*1e3:.1f}, p90 {s['p90']*1e3:.1f}), {m['throughput']['job']:.1f} images/s, "
      f"MFU {m['flops']['mfu']:.3f}, peak memory {m['peak_memory_bytes']/2**30:.1f} GiB")
PY
