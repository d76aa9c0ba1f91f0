#!/usr/bin/env bash
# The check of the Gaudi programs on ONE Gaudi card, in parts: the twin of gpu_check.sh (same
# parts, budget arithmetic, events and summary, benchmarks/gpu_summary.py), for a machine with
# Habana's PyTorch container. Each part fits one call of at most 8 minutes (480 s), program
# startup and graph compilation included. From the repository root:
#
#   bash benchmarks/gaudi_check.sh training             # TARGET=gaudi2 by default (or gaudi3);
#   bash benchmarks/gaudi_check.sh inference            # OUT=gaudi-out/<part>
#   bash benchmarks/gaudi_check.sh training --dry-run   # no card: compile every program of the
#                                                       # part, bash -n each launcher; run in CI
#
# Before the runs (not in a dry run): the card is there (habana_frameworks.torch.hpu), the HPU
# events the programs time with work (hthpu.Event(enable_timing=True), record, elapsed_time:
# a matmul timed, its milliseconds printed), and hl-smi's device facts (name, memory, driver)
# go to OUT/gpu.csv, the summary's device line. Every program runs with the Habana variables
# its plan decides (bench.py sets them; docs/programs.md, Gaudi): any PT_HPU_LAZY_MODE,
# PT_HPU_ENABLE_LAZY_COLLECTIVES or PT_HPUGRAPH_DISABLE_TENSOR_CACHE of this shell is removed
# from the runs' environment, since a program refuses one that differs from its plan.
#
# training: S1 (SD3 MMDiT d24, bf16, 256x256, one card, 10 warmup + 50 measured steps)
#   s1_b16_tuned  batch 16, optimize = tuned (lazy mode, Habana's FusedAdamW and FusedClipNorm);
#                 first, with a cold graph cache, so its compile_s is cold
#   s1_b16_plain  batch 16, optimize = plain (eager mode, torch's AdamW: Gaudi as shipped)
#   s1_b32_tuned  batch 32, optimize = tuned
#   s4            optional, only in time left: S4 at Llama-2-70B width, 2 layers, bf16, one card
#                 (no sharding), batch 2 x accumulation 2, sequence 2048
#   (gpu_check.sh's hand-written loop is CUDA's; there is none for Gaudi.)
# inference: S5 as one tensor-parallel-8 rank of Llama-2-70B on one card (hidden 8192, 8 query
#   heads, 1 key/value head, head dim 128, intermediate 3,584; batch 128, 128 -> 2048 tokens,
#   static shapes, HPU graphs, lazy mode in both tiers), each run 1 warmup + 1 timed generate
#   pair (a 1-token call, then a full call); S3 at full size (optimum-habana's pipeline, HPU
#   graphs). In this order, so that a part cut short loses the least:
#   s5_l40_tuned  40 layers, optimize = tuned (optimum-habana's decode options: bucket_internal
#                 with the plan's bucket, trim_logits, limit_hpu_graphs); first, cold
#   s3            the SD3 8B pipeline (d38, 1024x1024, 30 steps, guidance), 1 warmup + 3 images
#   s5_l40_plain  40 layers, optimize = plain (generate's defaults: shapes padded to the full
#                 length at once): the tuned/plain ratio of TPOT
#   s5_l2_tuned   2 layers, tuned: with s5_l40_tuned, the fit TPOT = a + b x layers
#   s5_l10_tuned  optional, only in time left: 10 layers, tuned, a third point of the fit
#
# Budget arithmetic (seconds of one call; each run under `timeout LIMIT`, then SIGKILL
# KILL_AFTER = 10 s later if it is still there):
#   fixed, every part: the card and HPU-event check (import habana_frameworks, one timed
#     matmul) + hl-smi ~8, compiling the programs and `benchc estimate` of each ~5, the
#     summary after every event ~2: FIXED = 15
#   training:  15 + (150 + 10) + (120 + 10) + (150 + 10) = 465 <= 480
#     s1_b16_tuned 150: startup ~20 + lazy-mode graph compilation of the first steps (the
#     recipes of forward, backward and optimizer, cached for the rest) + 60 steps; s1_b16_plain
#     120: eager op by op, no graph compiler, slower steps; s1_b32_tuned 150; s4 (120, at least
#     90) runs only if the others left time.
#   inference: 15 + (120 + 10) + (160 + 10) + (100 + 10) + (45 + 10) = 480 <= 480
#     s5_l40_tuned 120: startup ~20 (4.8B bf16 parameters built on the card) + the HPU graphs'
#     capture and the graph compilations of the first call + 2 generate pairs; s3 160: startup
#     + the first call (its graphs) + 3 images; s5_l40_plain 100; s5_l2_tuned 45; s5_l10_tuned
#     (60, at least 45) only if the others left time. Least times to start: 90, 115, 80, 30, 45.
#   These limits are first estimates: no Gaudi card has run them yet (the first run's logs and
#   elapsed seconds are what to size them by).
# And a hard stop whatever the runs do: no run's time limit reaches past PART_BUDGET = 470 s
# after the part started (the limit shrinks to what is left; under 30 s left, or a run's own
# least, it is skipped and reported), leaving 10 s for the last summary.
#
# OUT/summary.md and OUT/summary.json (benchmarks/gpu_summary.py) are rewritten after every
# event, as gpu_check.sh's. Targets: the tuned runs' step times steady (p90/p10 <= 1.05: with
# HPU events, nothing in a step waits for the card); s5_l40_tuned decode at least 60 % of the
# HBM bound. A part cut short still reports what finished. Usage errors print the usage and
# exit 2.
set -euo pipefail
# shellcheck source=benchmarks/check_lib.sh
source "$(dirname "$0")/check_lib.sh"
parse_part "$@"
OUT="${OUT:-gaudi-out/$PART}"
TARGET="${TARGET:-gaudi2}"
PYTHON="${PYTHON:-python3}"
case "$TARGET" in
  gaudi*) ;;
  *) echo "gaudi_check: TARGET must be a Gaudi target (gaudi2, gaudi3), not $TARGET" >&2; exit 2 ;;
esac
start_part gaudi
# The Habana variables bench.py decides from its plan: never inherited by a timed run.
PLAN_DECIDES=(-u PT_HPU_LAZY_MODE -u PT_HPU_ENABLE_LAZY_COLLECTIVES -u PT_HPUGRAPH_DISABLE_TENSOR_CACHE)
RUN_ENV=("${PLAN_DECIDES[@]}")

# The card, and the HPU events the programs time their steps with (Habana's event API, as
# DeepSpeed's HPU accelerator exposes it): a matmul between two recorded events, its time read
# after one synchronisation.
check_card() {
  env "${PLAN_DECIDES[@]}" "$PYTHON" - <<'PY'
import habana_frameworks.torch.core as htcore
import habana_frameworks.torch.hpu as hthpu
import torch

assert hthpu.is_available(), "habana_frameworks finds no Gaudi card"
a = torch.ones(2048, 2048, device="hpu", dtype=torch.bfloat16)
start, end = hthpu.Event(enable_timing=True), hthpu.Event(enable_timing=True)
start.record()
b = a @ a
htcore.mark_step()
end.record()
hthpu.synchronize()
ms = start.elapsed_time(end)
assert ms >= 0 and float(b[0, 0]) == 2048.0, (ms, float(b[0, 0]))
print(f"gaudi_check: {hthpu.get_device_name()}: HPU events time a 2048^2 bf16 matmul at {ms:.3f} ms")
PY
}

if [ "$DRY_RUN" -eq 0 ]; then
  if ! check_card; then
    echo "gaudi_check: $PYTHON cannot time the Gaudi card with HPU events (use --dry-run without one)" >&2
    exit 1
  fi
  hl-smi -Q name,memory.total,driver_version -f csv >"$OUT/gpu.csv" || true
fi

if [ "$PART" = training ]; then
  plan s1_b16_tuned 150 100 required "S1 batch 16, tuned (lazy mode)"
  plan s1_b16_plain 120 60 required "S1 batch 16, plain (eager mode)"
  plan s1_b32_tuned 150 100 required "S1 batch 32, tuned (lazy mode)"
  plan s4 120 90 optional "S4, 2 layers of 70B width, bf16, no sharding"
  event ratio "tuned/plain" s1_b16_plain s1_b16_tuned - - "speedup of tuned: plain step median / tuned step median (no target)"
  event check s1_b16_tuned p90_p10 "<=" 1.05
  event check s1_b32_tuned p90_p10 "<=" 1.05

  compile_training_programs
  summarize

  run_program s1_b16_tuned
  run_program s1_b16_plain
  run_program s1_b32_tuned
  run_program s4
else
  # One tensor-parallel-8 rank of Llama-2-70B, whole on one card; 1 warmup + 1 timed generate pair.
  plan s5_l40_tuned 120 90 required "S5 rank of 70B, 40 layers, tuned, 128 -> 2048 tokens"
  plan s3 160 115 required "S3, SD3 8B pipeline, 1024x1024, 30 steps, tuned, 3 timed images"
  plan s5_l40_plain 100 80 required "S5 rank of 70B, 40 layers, plain"
  plan s5_l2_tuned 45 30 required "S5 rank of 70B, 2 layers, tuned"
  plan s5_l10_tuned 60 45 optional "S5 rank of 70B, 10 layers, tuned"
  event ratio "tuned/plain TPOT" s5_l40_plain s5_l40_tuned - - \
    "speedup of tuned: plain TPOT / tuned TPOT, 40 layers (no target)" tpot_s
  event check s5_l40_tuned decode_hbm_utilisation ">=" 0.6
  event check s5_l40_tuned decode_roofline_fraction ">=" 0.6
  event fit "TPOT = a + b x layers (a: fixed cost per token, b: cost per layer)" tpot_s layers \
    s5_l2_tuned=2 s5_l10_tuned=10 s5_l40_tuned=40

  inference_programs
fi
finish
