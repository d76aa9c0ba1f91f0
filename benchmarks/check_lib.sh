# shellcheck shell=bash disable=SC2034  # the globals set here are read by the sourcing script
# What benchmarks/gpu_check.sh and benchmarks/gaudi_check.sh share, sourced by both first:
# their arguments (parse_part), the budget, the folder set up (start_part, once OUT is set), the
# events file read by gpu_summary.py, planning a run, compiling a program for one device,
# running one under its time limit (with RUN_ENV: env arguments every timed run gets, the
# vendor's own), the inference part's programs (the same on both) and the end of a part.
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
CALL_S=480
PART_BUDGET=470
KILL_AFTER=10
FIXED_S=15
MIN_RUN_S=30
ONE_DEVICE=(--set cluster.nodes=1 --set cluster.devices_per_node=1 --set parallel.data=1)
S1_STEPS=(--set train.steps=60 --set train.warmup=10)
TUNED=(--set optimize=tuned)
PLAIN=(--set optimize=plain)
COMPILE_FAILED=0
RUN_ENV=()

# The arguments: training|inference [--dry-run]; sets PART and DRY_RUN. Usage errors print the
# usage and exit 2.
parse_part() {
  local usage
  usage="usage: bash benchmarks/$(basename "$0") training|inference [--dry-run]"
  PART=""
  DRY_RUN=0
  for arg in "$@"; do
    case "$arg" in
      training | inference) [ -z "$PART" ] || { echo "$usage" >&2; exit 2; }; PART=$arg ;;
      --dry-run) DRY_RUN=1 ;;
      -h | --help) echo "$usage"; exit 0 ;;
      *) echo "$usage" >&2; exit 2 ;;
    esac
  done
  [ -n "$PART" ] || { echo "$usage" >&2; exit 2; }
}

# The part begins (mode: gpu or gaudi; dry-run in a dry run): OUT made and made absolute, what
# an earlier check left there removed, the repository the working folder, the part's clock
# started and its first event written.
start_part() {
  local mode=$1
  mkdir -p "$OUT"
  OUT="$(cd "$OUT" && pwd)"
  cd "$REPO" || exit 2
  EVENTS="$OUT/events.tsv"
  BENCHC=("$PYTHON" -m benchc)
  SECONDS=0
  rm -rf "$OUT/build" "$OUT/cache" "$EVENTS" "$OUT/summary.md" "$OUT/summary.json" "$OUT/gpu.csv"
  if [ "$DRY_RUN" -eq 1 ]; then
    mode=dry-run
  fi
  event part "$PART" "$TARGET" "$mode" "$PART_BUDGET" "$CALL_S" "$KILL_AFTER" "$FIXED_S"
}

# One line of OUT/events.tsv (fields joined by tabs), read by gpu_summary.py.
event() {
  local IFS=$'\t'
  printf '%s\n' "$*" >>"$EVENTS"
}

summarize() {
  "$PYTHON" "$HERE/gpu_summary.py" write "$OUT" "$@" || echo "(the summary failed; events are in $EVENTS)" >&2
}

# Plan a run: name, time limit, least time worth starting it with, required|optional, what.
# A metrics file or log of an earlier check under the same name is removed now.
declare -A LIMIT LEAST
plan() {
  LIMIT[$1]=$2
  LEAST[$1]=$3
  rm -f "$OUT/$1.json" "$OUT/$1.log" "$OUT/$1.estimate.json"
  event plan "$1" "$2" "$3" "$4" "$5"
}

# Compile a program for one device: name, spec, experiment, then settings. Writes the roofline
# estimate of the same settings to OUT/NAME.estimate.json, finds the one point compiled (its
# folder is named by the settings: default, optimize-plain, ...) and checks its launcher parses.
declare -A LAUNCHER
compile_program() {
  local name=$1 spec=$2 experiment=$3 launchers=()
  shift 3
  if "${BENCHC[@]}" compile "$spec" --target "$TARGET" -o "$OUT/build/$name" "${ONE_DEVICE[@]}" "$@" >/dev/null \
    && "${BENCHC[@]}" estimate "$spec" --target "$TARGET" --json "${ONE_DEVICE[@]}" "$@" >"$OUT/$name.estimate.json"; then
    launchers=("$OUT/build/$name/$experiment/$TARGET"/*/launch.sh)
  fi
  if [ "${#launchers[@]}" -eq 1 ] && [ -f "${launchers[0]}" ] && bash -n "${launchers[0]}"; then
    LAUNCHER[$name]=${launchers[0]}
  else
    echo "$name: compile, estimate or launcher check failed (one point expected)" >&2
    event skip "$name" "its program did not compile"
    COMPILE_FAILED=1
  fi
}

# Run one planned command under its limit: name, --, command. The limit shrinks to what is
# left of PART_BUDGET; a run that cannot get its least (or MIN_RUN_S) is skipped.
timed_run() {
  local name=$1 limit=${LIMIT[$1]} least=${LEAST[$1]}
  shift 2
  if grep -q "^skip	$name	" "$EVENTS"; then
    return 0
  fi
  if [ "$DRY_RUN" -eq 1 ]; then
    echo "$name (up to $limit s): $(printf '%q ' "$@")"
    return 0
  fi
  local left=$((PART_BUDGET - SECONDS - KILL_AFTER))
  if [ "$left" -lt "$limit" ]; then
    limit=$left
  fi
  if [ "$limit" -lt "$least" ] || [ "$limit" -lt "$MIN_RUN_S" ]; then
    event skip "$name" "only $left s left of the part's $PART_BUDGET s, it needs $least"
    summarize
    return 0
  fi
  rm -f "$OUT/$name.json"
  event start "$name" "$limit"
  summarize
  echo "== $name (up to $limit s)"
  local begin=$SECONDS rc=0
  timeout --signal=TERM --kill-after="$KILL_AFTER" "$limit" env "${RUN_ENV[@]}" PYTHON="$PYTHON" \
    TORCHINDUCTOR_CACHE_DIR="$OUT/cache/inductor" "$@" >"$OUT/$name.log" 2>&1 || rc=$?
  event end "$name" "$rc" "$((SECONDS - begin))"
  summarize
  if [ "$rc" -ne 0 ]; then
    echo "$name ended with status $rc (see $OUT/$name.log)"
  fi
}

# A generated program's launcher under timed_run: name. A dry run also prints the command
# the launcher would start.
run_program() {
  local launch=${LAUNCHER[$1]:-}
  timed_run "$1" -- bash "$launch" --metrics "$OUT/$1.json"
  if [ "$DRY_RUN" -eq 1 ] && [ -n "$launch" ]; then
    echo "  starts: $(BENCHC_DRY_RUN=1 PYTHON="$PYTHON" bash "$launch" --metrics "$OUT/$1.json")"
  fi
}


# The training part's generated programs (the same on both): S1 at batch 16 tuned and plain, at
# batch 32 tuned (60 steps, 10 of them warmup), and S4 at 70B width with 2 layers, unsharded.
compile_training_programs() {
  compile_program s1_b16_tuned specs/sd3.bench sd3_mmdit_train --set train.batch=16 "${S1_STEPS[@]}" "${TUNED[@]}"
  compile_program s1_b16_plain specs/sd3.bench sd3_mmdit_train --set train.batch=16 "${S1_STEPS[@]}" "${PLAIN[@]}"
  compile_program s1_b32_tuned specs/sd3.bench sd3_mmdit_train --set train.batch=32 "${S1_STEPS[@]}" "${TUNED[@]}"
  compile_program s4 specs/beluga-train.bench beluga_70b_train --set model.llama.layers=2 \
    --set train.global_batch=4 --set parallel.sharding=none --set train.steps=8 --set train.warmup=3
}

# One tensor-parallel-8 rank of Llama-2-70B, whole on one device (40 layers: the rank's).
S5_RANK=(--set parallel.tensor=1 --set model.llama.hidden=8192 --set model.llama.heads=8
  --set model.llama.kv_heads=1 --set model.llama.head_dim=128 --set model.llama.intermediate=3584
  --set infer.steps=2 --set infer.warmup=1)

# The inference part's programs, compiled, then run in their planned order (a part cut short
# loses the least): S5 tuned at 40 layers, S3, S5 plain, S5 tuned at 2 and 10 layers.
inference_programs() {
  for layers in 40 2 10; do
    compile_program "s5_l${layers}_tuned" specs/beluga-infer.bench beluga_70b_infer "${S5_RANK[@]}" \
      --set model.llama.layers="$layers" "${TUNED[@]}"
  done
  compile_program s5_l40_plain specs/beluga-infer.bench beluga_70b_infer "${S5_RANK[@]}" \
    --set model.llama.layers=40 "${PLAIN[@]}"
  compile_program s3 specs/sd3-infer.bench sd3_large_infer --set infer.steps=4 --set infer.warmup=1 "${TUNED[@]}"
  summarize
  run_program s5_l40_tuned
  run_program s3
  run_program s5_l40_plain
  run_program s5_l2_tuned
  run_program s5_l10_tuned
}

# The summary printed; a dry run fails if any program did not compile.
finish() {
  summarize --print
  if [ "$DRY_RUN" -eq 1 ]; then
    if [ "$COMPILE_FAILED" -ne 0 ]; then
      echo "dry run: part $PART: a program did not compile" >&2
      exit 1
    fi
    echo "dry run: part $PART, programs compiled for $TARGET under $OUT/build"
  fi
}
