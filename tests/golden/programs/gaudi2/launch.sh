#!/usr/bin/env bash
# benchc launcher: sd3_mmdit_train / gaudi2 / batch-16
# 2 node(s) x 8 process(es) = world size 16.
# DeepSpeed's launcher, as optimum-habana runs DeepSpeed and multi-node jobs.
#
#   on the first node only: HOSTFILE=<hostfile> bash launch.sh [--metrics FILE]
#   under Slurm: sbatch job.sbatch (or benchc submit); the hostfile is written from the allocation
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
NPROC=8

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

# No Habana environment variable is set here: bench.py sets every one from its plan (the
# execution mode, PT_HPU_LAZY_MODE, before torch loads the Habana bridge) on every rank, and
# refuses to run with one already set to another value (docs/programs.md, Gaudi).

# Several Gaudi nodes: DeepSpeed's launcher, started on the first node only, reaches every
# node of the hostfile (over ssh, with pdsh, unless DEEPSPEED_LAUNCHER names another of its
# launchers), as optimum-habana's multi-node runs do. The hostfile is HOSTFILE, or under
# Slurm one written from the allocation: one "host slots=N" line per node.
if [ -z "${HOSTFILE:-}" ]; then
  if [ -z "${SLURM_JOB_NODELIST:-}" ]; then
    echo "launch.sh: set HOSTFILE to a DeepSpeed hostfile (one \"host slots=$NPROC\" line per node)," \
      "or run under Slurm" >&2
    exit 2
  fi
  mkdir -p runs
  HOSTFILE="runs/hostfile-${SLURM_JOB_ID:-local}"
  scontrol show hostnames "$SLURM_JOB_NODELIST" | sed "s/\$/ slots=$NPROC/" >"$HOSTFILE"
fi
HOSTS=$(grep -c '[^[:space:]]' "$HOSTFILE" || true)
if [ "$HOSTS" -ne "$NNODES" ]; then
  echo "launch.sh: $HOSTFILE lists $HOSTS hosts; this build needs $NNODES" >&2
  exit 2
fi
MASTER_ADDR="${MASTER_ADDR:-$(awk 'NF { print $1; exit }' "$HOSTFILE")}"
launch "$PYTHON" -m deepspeed.launcher.runner --hostfile "$HOSTFILE" --launcher "${DEEPSPEED_LAUNCHER:-pdsh}" \
  --num_nodes "$NNODES" --num_gpus "$NPROC" --no_local_rank --master_addr "$MASTER_ADDR" \
  --master_port "${MASTER_PORT:-29500}" bench.py "$@"
