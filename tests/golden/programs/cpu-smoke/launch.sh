#!/usr/bin/env bash
# benchc launcher: sd3_mmdit_train / cpu / batch-16
# 1 node(s) x 2 process(es) = world size 2; torchrun (standalone on one node, c10d rendezvous across nodes).
#
#   one node:   bash launch.sh [--metrics FILE]
#   many nodes: on each node, MASTER_ADDR=<node 0 address> NODE_RANK=<0..0> \
#               [MASTER_PORT=29400] [JOB_ID=<shared id>] bash launch.sh
# PYTHON picks the interpreter (default: python3).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
NNODES=1
NPROC=2
# Share the cores among the processes rather than oversubscribe them.
CORES=$(nproc)
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(( CORES / NPROC > 0 ? CORES / NPROC : 1 ))}"

if [ "$NNODES" -eq 1 ]; then
  exec "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node "$NPROC" \
    bench.py "$@"
fi

: "${MASTER_ADDR:?set MASTER_ADDR to the address of node 0}"
: "${NODE_RANK:?set NODE_RANK to this node's index, 0 to $((NNODES - 1))}"
exec "$PYTHON" -m torch.distributed.run --nnodes "$NNODES" --nproc-per-node "$NPROC" \
  --node-rank "$NODE_RANK" --rdzv-backend c10d --rdzv-id "${JOB_ID:-benchc-sd3_mmdit_train-cpu-batch-16}" \
  --rdzv-endpoint "$MASTER_ADDR:${MASTER_PORT:-29400}" bench.py "$@"
