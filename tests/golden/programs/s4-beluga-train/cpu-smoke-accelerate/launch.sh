#!/usr/bin/env bash
# benchc launcher: beluga_70b_train / cpu / runtime-accelerate_precision-bf16
# 2 node(s) x 1 process(es) = world size 2.
# accelerate launch with this build's accelerate.yaml (the runtime is accelerate).
#
#   on each of the 2 nodes: MACHINE_RANK=<0..1> MASTER_ADDR=<first node> [MASTER_PORT=29500] bash launch.sh
#   under Slurm: sbatch job.sbatch (or benchc submit); srun starts one launcher per node (machine rank: SLURM_NODEID)
#
# PYTHON picks the interpreter (default: python3). BENCHC_DRY_RUN=1 prints the command
# instead of running it. Arguments (e.g. --metrics FILE) go to bench.py.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
# Inductor's compile cache in this folder, so a second run reuses what the first compiled
# (a folder named in TORCHINDUCTOR_CACHE_DIR wins; the program records which it used).
export TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$PWD/compile-cache}"
NNODES=2
NPROC=1

# Run the command in a process group of its own and wait for it (or only print it under
# BENCHC_DRY_RUN); this script exits with its status. SIGTERM or SIGINT sent to this script
# goes to that whole group (SIGHUP goes as SIGTERM): the program or its launcher, and what
# they started in it, such as torch.compile's compile workers and compilers. What is left of
# the group STOP_GRACE_S seconds after the first stop signal, or once the command has
# ended, is killed. Ranks that a distributed launcher starts in groups of their own (torchrun
# does) are ended by that launcher.
STOP_GRACE_S=30
GROUP=""
STOP_SIGNAL=""
STOP_SENT=""
# shellcheck disable=SC2317 # called by the traps below
stop_group() {
  [ -n "$STOP_SENT" ] || STOP_SENT=$SECONDS
  STOP_SIGNAL=$1
  if [ -n "$GROUP" ]; then
    kill -s "$1" -- "-$GROUP" 2>/dev/null || true
  fi
}
launch() {
  if [ -n "${BENCHC_DRY_RUN:-}" ]; then
    printf '%q ' "$@"
    printf '\n'
    exit 0
  fi
  trap 'stop_group TERM' TERM
  trap 'stop_group INT' INT
  trap 'stop_group TERM' HUP
  set -m # job control: the command's process group is its own (and it keeps SIGINT)
  "$@" &
  GROUP=$!
  set +m
  if [ -n "$STOP_SIGNAL" ]; then # a stop came before the command had a group
    kill -s "$STOP_SIGNAL" -- "-$GROUP" 2>/dev/null || true
  fi
  status=0
  wait "$GROUP" || status=$?
  if [ -n "$STOP_SENT" ]; then
    # A stop signal may have cut the wait short: wait for the command's end, then its status.
    while kill -0 "$GROUP" 2>/dev/null; do
      if [ $((SECONDS - STOP_SENT)) -gt "$STOP_GRACE_S" ]; then # SECONDS counts whole seconds
        kill -s KILL -- "-$GROUP" 2>/dev/null || true
      fi
      sleep 0.2
    done
    code=0
    wait "$GROUP" 2>/dev/null || code=$?
    if [ "$code" -ne 127 ]; then # 127: no status left to read, the first wait had it
      status=$code
    fi
  fi
  kill -s KILL -- "-$GROUP" 2>/dev/null || true
  exit "$status"
}

# Share this node's cores among its processes rather than oversubscribe them (under Slurm,
# the cores the allocation gives this node).
CORES="${SLURM_CPUS_ON_NODE:-$(nproc)}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$((CORES / NPROC > 0 ? CORES / NPROC : 1))}"

# accelerate's convention: every node runs this script with its machine rank (under Slurm,
# SLURM_NODEID) and the address of the first node (under Slurm, found in the allocation).
if [ -n "${SLURM_JOB_NODELIST:-}" ]; then
  if [ "${SLURM_JOB_NUM_NODES:-$NNODES}" -ne "$NNODES" ]; then
    echo "launch.sh: the Slurm allocation has $SLURM_JOB_NUM_NODES nodes; this build needs $NNODES" >&2
    exit 2
  fi
  MASTER_ADDR="${MASTER_ADDR:-$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)}"
  MACHINE_RANK="${MACHINE_RANK:-${SLURM_NODEID:-}}"
fi
: "${MASTER_ADDR:?set MASTER_ADDR to the address of the first node (found by itself under Slurm)}"
: "${MACHINE_RANK:?set MACHINE_RANK to the number of this node, 0 to $((NNODES - 1)) (SLURM_NODEID under Slurm)}"
launch "$PYTHON" -m accelerate.commands.launch --config_file accelerate.yaml \
  --machine_rank "$MACHINE_RANK" --main_process_ip "$MASTER_ADDR" \
  --main_process_port "${MASTER_PORT:-29500}" bench.py "$@"
