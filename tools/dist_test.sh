#!/usr/bin/env bash
# Evaluate a checkpoint with torchrun: NUM_PROCS processes on this node, on one or several nodes.
#
#   tools/dist_test.sh CONFIG CHECKPOINT NUM_PROCS [tools/test.py flags]
#
# One node: the processes meet on a free local port (set PORT to pick one).
# Several nodes: run the same command on every node, with the same NNODES, MASTER_ADDR and
# PORT and each node's own NODE_RANK (0 .. NNODES-1):
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 PORT=29500 tools/dist_test.sh CONFIG CKPT 8
#   NNODES=2 NODE_RANK=1 MASTER_ADDR=10.0.0.1 PORT=29500 tools/dist_test.sh CONFIG CKPT 8
#
# NNODES       number of nodes (default 1)
# NODE_RANK    this node's rank (default 0); node 0 hosts the rendezvous at MASTER_ADDR:PORT
# MASTER_ADDR  address of node 0, reachable from every node (default 127.0.0.1)
# PORT         rendezvous port on node 0 (default 29500 with NNODES > 1; all nodes must agree)
# PYTHON       the interpreter (default: the repository's .venv, else python)
# Without CUDA the processes talk over gloo on CPU.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/usage_args.sh" 3 "$@"
CONFIG=$1
CKPT=$2
NPROC=$3
shift 3
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$([[ -x "$ROOT/.venv/bin/python" ]] && echo "$ROOT/.venv/bin/python" || echo python)}"
source "$ROOT/tools/torchrun_args.sh"
# torchrun under a supervisor that ends every process left when it exits, e.g. the data
# loader workers of a rank the kernel killed (peco_mm/supervisor/process_tree.py)
PYTHONPATH="$ROOT:${PYTHONPATH:-}" exec "$PY" "$ROOT/peco_mm/supervisor/process_tree.py" \
  "$PY" -m torch.distributed.run "${TORCHRUN_ARGS[@]}" \
  --nproc_per_node="$NPROC" "$ROOT/tools/test.py" "$CONFIG" "$CKPT" --launcher pytorch "$@"
