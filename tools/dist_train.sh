#!/usr/bin/env bash
# Usage: tools/dist_train.sh CONFIG NUM_PROCS [train.py flags]
# torchrun on one node; on a machine without CUDA the processes use gloo on CPU.
set -euo pipefail
CONFIG=$1
NPROC=$2
shift 2
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$([[ -x "$ROOT/.venv/bin/python" ]] && echo "$ROOT/.venv/bin/python" || echo python)}"
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-$((29500 + RANDOM % 1000))}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
PYTHONPATH="$ROOT:${PYTHONPATH:-}" exec "$PY" -m torch.distributed.run \
  --nnodes="$NNODES" --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR" \
  --nproc_per_node="$NPROC" --master_port="$PORT" \
  "$ROOT/tools/train.py" "$CONFIG" --launcher pytorch "$@"
