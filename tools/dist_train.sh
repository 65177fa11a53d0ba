#!/usr/bin/env bash
# Train with torchrun: NUM_PROCS processes on this node, on one or several nodes.
#
#   tools/dist_train.sh CONFIG NUM_PROCS [tools/train.py flags]
#
# One node: the processes meet on a free local port (set PORT to pick one).
# Several nodes: run the same command on every node, with the same NNODES, MASTER_ADDR and
# PORT and each node's own NODE_RANK (0 .. NNODES-1):
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 PORT=29500 tools/dist_train.sh CONFIG 8   # node 0
#   NNODES=2 NODE_RANK=1 MASTER_ADDR=10.0.0.1 PORT=29500 tools/dist_train.sh CONFIG 8   # node 1
#
# NNODES       number of nodes (default 1)
# NODE_RANK    this node's rank (default 0); node 0 hosts the rendezvous at MASTER_ADDR:PORT
# MASTER_ADDR  address of node 0, reachable from every node (default 127.0.0.1)
# PORT         rendezvous port on node 0 (default 29500 with NNODES > 1; all nodes must agree)
# PYTHON       the interpreter (default: the repository's .venv, else python)
# Before torchrun starts any rank, one process checks every checkpoint and dataset the config
# reads and lists all missing ones in one block (tools/train.py --preflight-only); skip it with
# --skip-preflight or PECO_SKIP_PREFLIGHT=1.
# Without CUDA the processes talk over gloo on CPU. If a process dies, the others stop with an
# error instead of waiting: gloo notices the closed connection, and a rank that hangs is given
# up after env_cfg.dist_cfg.timeout seconds (set it with --cfg-options).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/usage_args.sh" CONFIG NPROC -- "$@"
source "$ROOT/tools/torchrun_args.sh"
if [[ -z "${PECO_SKIP_PREFLIGHT:-}" && " ${ARGS[*]} " != *" --skip-preflight "* ]]; then
  PYTHONPATH="$TOOL_PYTHONPATH" "$PY" "$ROOT/tools/train.py" "$CONFIG" --preflight-only \
    "${ARGS[@]}" || exit $?
fi
torchrun_tool train.py "$CONFIG" --launcher pytorch "${ARGS[@]}"
