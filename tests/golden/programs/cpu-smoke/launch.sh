#!/usr/bin/env bash
# benchc launcher: sd3_mmdit_train / cpu / batch-16
# 2 node(s) x 1 process(es) = world size 2.
# torchrun: standalone on one node, a c10d rendezvous across nodes.
#
#   on each of the 2 nodes: MASTER_ADDR=<first node> [MASTER_PORT=29400] [RDZV_ID=<id>] bash launch.sh
#   under Slurm: sbatch job.sbatch (or benchc submit); srun starts one launcher per node
#
# PYTHON picks the interpreter (default: python3). BENCHC_DRY_RUN=1 prints the command
# instead of running it. Arguments (e.g. --metrics FILE) go to bench.py.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
NNODES=2
NPROC=1

# Start the command in place of this shell, or only print it under BENCHC_DRY_RUN.
launch() {
  if [ -n "${BENCHC_DRY_RUN:-}" ]; then
    printf '%q ' "$@"
    printf '\n'
    exit 0
  fi
  exec "$@"
}

# Share this node's cores among its processes rather than oversubscribe them (under Slurm,
# the cores the allocation gives this node).
CORES="${SLURM_CPUS_ON_NODE:-$(nproc)}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$((CORES / NPROC > 0 ? CORES / NPROC : 1))}"

# c10d rendezvous: every node runs this script and the rendezvous numbers the nodes (no
# NODE_RANK is needed). The rendezvous host is MASTER_ADDR, or under Slurm the first node of
# the allocation; the rendezvous id is RDZV_ID, or the Slurm job id.
if [ -z "${MASTER_ADDR:-}" ] && [ -n "${SLURM_JOB_NODELIST:-}" ]; then
  if [ "${SLURM_JOB_NUM_NODES:-$NNODES}" -ne "$NNODES" ]; then
    echo "launch.sh: the Slurm allocation has $SLURM_JOB_NUM_NODES nodes; this build needs $NNODES" >&2
    exit 2
  fi
  MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
fi
: "${MASTER_ADDR:?set MASTER_ADDR to the address of the first node (found by itself under Slurm)}"
DEFAULT_RDZV_ID=benchc-sd3_mmdit_train-cpu-batch-16
RDZV_ID="${RDZV_ID:-${SLURM_JOB_ID:-$DEFAULT_RDZV_ID}}"
launch "$PYTHON" -m torch.distributed.run --nnodes "$NNODES" --nproc-per-node "$NPROC" \
  --rdzv-backend c10d --rdzv-id "$RDZV_ID" --rdzv-endpoint "$MASTER_ADDR:${MASTER_PORT:-29400}" \
  bench.py "$@"
