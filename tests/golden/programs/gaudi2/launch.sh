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
NNODES=2
NPROC=8

# Start the command in place of this shell, or only print it under BENCHC_DRY_RUN.
launch() {
  if [ -n "${BENCHC_DRY_RUN:-}" ]; then
    printf '%q ' "$@"
    printf '\n'
    exit 0
  fi
  exec "$@"
}

export PT_HPU_LAZY_MODE="${PT_HPU_LAZY_MODE:-1}"

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
