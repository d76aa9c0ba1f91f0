#!/usr/bin/env bash
# The check of the CUDA programs on ONE GPU, in parts; each part fits one call of at most
# 8 minutes (480 s) on one GPU, program startup and compilation included. From the
# repository root on a machine with a CUDA GPU:
#
#   bash benchmarks/gpu_check.sh training             # TARGET=h200 by default; OUT=gpu-out/training
#   bash benchmarks/gpu_check.sh inference
#   bash benchmarks/gpu_check.sh training --dry-run   # no GPU: compile every program of the part,
#                                                     # bash -n each launcher, the hand-written
#                                                     # loop on the CPU (smoke); run in CI
#
# training: S1 (SD3 MMDiT d24, bf16, 256x256, one GPU, 10 warmup + 50 measured steps)
#   s1_b16_tuned  batch 16, optimize = tuned (regional compile, fused qkv, SDPA priority,
#                 fused AdamW); runs first, with a cold compile cache, so its compile_s is cold
#   s1_b16_plain  batch 16, optimize = plain (eager, default SDPA, torch's default AdamW)
#   hand_b16      benchmarks/handwritten_train.py, the project's own hand-written tuned loop,
#                 same model and shape (it may reuse the first run's compile cache)
#   s1_b32_tuned  batch 32, optimize = tuned
#   s4            optional, only in time left: S4 as before (Llama-2-70B width, 2 layers, fp16,
#                 batch 2 x accumulation 2, sequence 2048)
# inference: S5 as one tensor-parallel-8 rank of Llama-2-70B on one GPU (hidden 8192, 8 query
#   heads, 1 key/value head, head dim 128, intermediate 3,584; batch 128, 128 -> 2048 tokens,
#   static cache, CUDA graphs), each run 1 warmup + 1 timed generate pair (a 1-token call, then
#   a full call: infer.steps = 2, cut from the spec's 3 to fit; the full 2048 output tokens kept);
#   S3 at full size. In this order, so that a part cut short loses the least:
#   s5_l40_tuned  40 layers (the rank's), optimize = tuned; first, with a cold compile cache
#   s3            the SD3 8B pipeline (d38, 1024x1024, 30 steps, guidance), tuned, 1 warmup +
#                 3 timed images: startup, compile (its first call) and seconds per image
#   s5_l40_plain  40 layers, optimize = plain: the tuned/plain ratio of TPOT
#   s5_l2_tuned   2 layers, tuned: with s5_l40_tuned, the fit TPOT = a + b x layers (exact)
#   s5_l10_tuned  optional, only in time left: 10 layers, tuned, a third point of the fit
#
# Budget arithmetic (seconds of one call; each run under `timeout LIMIT`, then SIGKILL
# KILL_AFTER = 10 s later if it is still there):
#   fixed, every part: CUDA check (import torch) + nvidia-smi ~8, compiling the programs and
#     `benchc estimate` of each ~5, the summary after every event ~2: FIXED = 15
#   training:  15 + (150 + 10) + (60 + 10) + (120 + 10) + (90 + 10) = 475 <= 480
#     s1_b16_tuned 150 = startup <= 20 + compile <= 90 (the targets) + 60 steps x ~0.05 + exit,
#     with 35 to spare; s1_b16_plain 60 = startup ~11 + 60 eager steps x ~0.18 + first-step
#     costs; hand_b16 120 (compile partly cached); s1_b32_tuned 90 (its last place: the part
#     loses the least if it is cut); s4 (120, at least 90) runs only if the others left time.
#   inference: 15 + (105 + 10) + (160 + 10) + (105 + 10) + (40 + 10) = 465 <= 480
#     s5_l40_tuned 105: startup ~20 (imports; 4.8B bf16 parameters, 9.6 GB, built on the GPU)
#     + the decode step's compile under CUDA graphs 30-60 + 2 generate pairs x ~9.3 (the
#     1-token call ~0.15 s, compute-bound at 989 TFLOP/s; the full call: 2047 decode steps of
#     2.63 ms at the HBM bound, 5.4 s, so 9.0 s at the 60 % target) + exit ~3 = 72-102;
#     s3 160: startup <= 20 + the first call <= 120 (compile_s, its image included) + 3 images
#     x <= 3.8 + exit ~5 = 156 at the targets' edge; s5_l40_plain 105: as tuned, transformers'
#     generate with its own compile of the forward, ~6-7 ms a token (13-14 s a call);
#     s5_l2_tuned 40: startup ~12 + compile 10-20 + 2 pairs x ~1 + exit = 25-37;
#     s5_l10_tuned (60, at least 45) runs only if the others left time. Least times to start:
#     85, 115, 80, 30, 45.
# And a hard stop whatever the runs do: no run's time limit reaches past PART_BUDGET = 470 s
# after the part started (the limit shrinks to what is left; under 30 s left, or a run's own
# least, it is skipped and reported), leaving 10 s for the last summary.
#
# OUT/summary.md and OUT/summary.json (benchmarks/gpu_summary.py) are rewritten after every
# event: status, step median, p90/p10, throughput, MFU, fraction of the roofline bound,
# startup and compile seconds, peak memory, and the ratios tuned/plain (speedup: plain step /
# tuned step) and generated/hand-written (step / step), each with its target; for generation
# also TTFT, TPOT, decode bytes/s, HBM utilisation and the prefill's and decode's fractions
# of their bounds, the tuned/plain ratio of TPOT and the fit TPOT = a + b x layers; for S3
# the seconds per image. Targets of the inference part: s5_l40_tuned decode at least 60 % of
# the HBM bound (the program's decode_hbm_utilisation and the estimate's decode bound / TPOT);
# s3 startup_s <= 20, compile_s <= 120, s_per_image <= 3.8. A part cut short still reports
# what finished. Usage errors print the usage and exit 2.
set -euo pipefail
# shellcheck source=benchmarks/check_lib.sh
source "$(dirname "$0")/check_lib.sh"
parse_part "$@"
OUT="${OUT:-gpu-out/$PART}"
TARGET="${TARGET:-h200}"
PYTHON="${PYTHON:-python3}"
start_part gpu
# Every timed run: BENCHC_SYNC_DEBUG=error, so a measured window that claims no host
# synchronisation runs under torch.cuda.set_sync_debug_mode("error") and a sync in a measured
# step fails the run loudly, naming the operation (the metrics record host_sync_watch); Triton's
# cache beside Inductor's.
RUN_ENV=(BENCHC_SYNC_DEBUG=error TRITON_CACHE_DIR="$OUT/cache/triton")
if [ "$DRY_RUN" -eq 0 ]; then
  if ! "$PYTHON" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'"; then
    echo "gpu_check: $PYTHON's torch finds no CUDA device (use --dry-run without a GPU)" >&2
    exit 1
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT/gpu.csv" || true
fi

if [ "$PART" = training ]; then
  plan s1_b16_tuned 150 100 required "S1 batch 16, tuned"
  plan s1_b16_plain 60 45 required "S1 batch 16, plain"
  plan hand_b16 120 60 required "hand-written tuned loop, batch 16"
  plan s1_b32_tuned 90 60 required "S1 batch 32, tuned"
  plan s4 120 90 optional "S4, 2 layers of 70B width, fp16"
  event ratio "tuned/plain" s1_b16_plain s1_b16_tuned ">=" 1.8 "speedup of tuned: plain step median / tuned step median"
  event ratio "generated/hand-written" s1_b16_tuned hand_b16 "<=" 1.02 "generated tuned step median / hand-written step median"
  event check s1_b16_tuned mfu ">=" 0.35
  event check s1_b16_tuned p90_p10 "<=" 1.05
  event check s1_b16_tuned startup_s "<=" 20
  event check s1_b16_tuned compile_s "<=" 90
  event check hand_b16 p90_p10 "<=" 1.05

  compile_training_programs
  # The hand-written loop runs S1's model and shape: the same estimate (roofline, peak).
  if [ -f "$OUT/s1_b16_tuned.estimate.json" ]; then
    cp "$OUT/s1_b16_tuned.estimate.json" "$OUT/hand_b16.estimate.json"
  fi
  PEAK="$("$PYTHON" "$HERE/gpu_summary.py" peak "$OUT/hand_b16.estimate.json" 2>/dev/null || echo 989e12)"
  HAND=("$PYTHON" "$HERE/handwritten_train.py" --batch 16 --latent-size 32 --warmup 10 --steps 50
    --peak-flops "$PEAK" --metrics "$OUT/hand_b16.json")
  summarize

  run_program s1_b16_tuned
  run_program s1_b16_plain
  timed_run hand_b16 -- "${HAND[@]}"
  run_program s1_b32_tuned
  run_program s4
  if [ "$DRY_RUN" -eq 1 ]; then  # the hand-written loop itself, tiny, on the CPU
    "$PYTHON" "$HERE/handwritten_train.py" --device cpu --smoke --metrics "$OUT/hand_smoke.json" >/dev/null
    echo "hand-written loop, cpu smoke: ok ($OUT/hand_smoke.json)"
  fi
else
  # One tensor-parallel-8 rank of Llama-2-70B, whole on one GPU; 1 warmup + 1 timed generate pair.
  plan s5_l40_tuned 105 85 required "S5 rank of 70B, 40 layers, tuned, 128 -> 2048 tokens"
  plan s3 160 115 required "S3, SD3 8B pipeline, 1024x1024, 30 steps, tuned, 3 timed images"
  plan s5_l40_plain 105 80 required "S5 rank of 70B, 40 layers, plain"
  plan s5_l2_tuned 40 30 required "S5 rank of 70B, 2 layers, tuned"
  plan s5_l10_tuned 60 45 optional "S5 rank of 70B, 10 layers, tuned"
  event ratio "tuned/plain TPOT" s5_l40_plain s5_l40_tuned - - \
    "speedup of tuned: plain TPOT / tuned TPOT, 40 layers (no target)" tpot_s
  event check s5_l40_tuned decode_hbm_utilisation ">=" 0.6
  event check s5_l40_tuned decode_roofline_fraction ">=" 0.6
  event check s3 startup_s "<=" 20
  event check s3 compile_s "<=" 120
  event check s3 s_per_image "<=" 3.8
  event fit "TPOT = a + b x layers (a: fixed cost per token, b: cost per layer)" tpot_s layers \
    s5_l2_tuned=2 s5_l10_tuned=10 s5_l40_tuned=40

  inference_programs
fi
finish
