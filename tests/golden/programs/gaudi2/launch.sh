#!/usr/bin/env bash
# benchc launcher: sd3_mmdit_train / gaudi2 / batch-16
# 2 node(s) x 8 process(es) = world size 16; mpirun on one node, torchrun c10d rendezvous across nodes.
#
#   one node:   bash launch.sh [--metrics FILE]
#   many nodes: on each node, MASTER_ADDR=<node 0 address> NODE_RANK=<0..1> \
#               [MASTER_PORT=29400] [JOB_ID=<shared id>] bash launch.sh
# PYTHON picks the interpreter (default: python3).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
NNODES=2
NPROC=8
export PT_HPU_LAZY_MODE="${PT_HPU_LAZY_MODE:-1}"

if [ "$NNODES" -eq 1 ]; then
  # As optimum-habana's gaudi_spawn: one rank per card, each bound to its share of the
  # physical cores (lscpu's distinct core/socket pairs, hyperthreads not counted).
  CORES=$(lscpu -p=Core,Socket 2>/dev/null | grep -v '^#' | sort -u | wc -l)
  [ "$CORES" -ge 1 ] || CORES=$(nproc)
  PE=$(( CORES / NPROC )); [ "$PE" -ge 1 ] || PE=1
  exec mpirun -n "$NPROC" --bind-to core --map-by "socket:PE=$PE" --rank-by slot \
    --allow-run-as-root "$PYTHON" bench.py "$@"
fi

: "${MASTER_ADDR:?set MASTER_ADDR to the address of node 0}"
: "${NODE_RANK:?set NODE_RANK to this node's index, 0 to $((NNODES - 1))}"
exec "$PYTHON" -m torch.distributed.run --nnodes "$NNODES" --nproc-per-node "$NPROC" \
  --node-rank "$NODE_RANK" --rdzv-backend c10d --rdzv-id "${JOB_ID:-benchc-sd3_mmdit_train-gaudi2-batch-16}" \
  --rdzv-endpoint "$MASTER_ADDR:${MASTER_PORT:-29400}" bench.py "$@"
