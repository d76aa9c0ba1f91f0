#!/usr/bin/env bash
# Every benchmark of benchc, one after the other, in one run (see README.md here):
#
#   bash benchmarks/run_all.sh            # about 8 minutes on a 2-core machine
#   QUICK=1 bash benchmarks/run_all.sh    # fewer rounds and runs: a check that they work
#
# Each script prints its own header (date, CPUs, CPU model, load average) and ratios of two
# measurements taken side by side, interleaved. The output is also kept in
# ${TMPDIR:-/tmp}/benchc-benchmarks-<date>.txt. PYTHON picks the interpreter (default:
# .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
log="${TMPDIR:-/tmp}/benchc-benchmarks-$(date -u +%Y%m%dT%H%M%SZ).txt"
if [ -n "${QUICK:-}" ]; then
  compile_args=(--rounds 1) harness_args=(--rounds 2 --steps 40 --warmup 10) store_args=(--runs 1000 --rounds 1)
  calibrate_args=(--rounds 1)
else
  compile_args=(--rounds 9) harness_args=(--rounds 8 --steps 220 --warmup 20) store_args=(--runs 10000 --rounds 3)
  calibrate_args=(--rounds 5)
fi
{
  echo "benchc benchmarks: $(date); $(nproc) CPUs; $(uptime)"
  "$PYTHON" benchmarks/compile_latency.py "${compile_args[@]}"
  "$PYTHON" benchmarks/harness_overhead.py "${harness_args[@]}"
  "$PYTHON" benchmarks/runtime_overhead.py "${harness_args[@]}"
  "$PYTHON" benchmarks/store_speed.py "${store_args[@]}"
  "$PYTHON" benchmarks/calibrate_time.py "${calibrate_args[@]}"
  echo "done: $(date); $(uptime)"
} 2>&1 | tee "$log"
echo "kept in $log"
