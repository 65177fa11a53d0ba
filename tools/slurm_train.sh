#!/usr/bin/env bash
# Usage: GPUS=16 tools/slurm_train.sh PARTITION JOB_NAME CONFIG [train.py flags]
set -euo pipefail
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
shift 3
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
SRUN_ARGS=${SRUN_ARGS:-""}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$([[ -x "$ROOT/.venv/bin/python" ]] && echo "$ROOT/.venv/bin/python" || echo python)}"
PYTHONPATH="$ROOT:${PYTHONPATH:-}" srun -p "$PARTITION" --job-name="$JOB_NAME" \
  --gres=gpu:"$GPUS_PER_NODE" --ntasks="$GPUS" --ntasks-per-node="$GPUS_PER_NODE" \
  --cpus-per-task="$CPUS_PER_TASK" --kill-on-bad-exit=1 $SRUN_ARGS \
  "$PY" -u "$ROOT/tools/train.py" "$CONFIG" --launcher slurm "$@"
