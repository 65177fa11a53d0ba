# Sourced by slurm_train.sh and slurm_test.sh: the srun arguments from GPUS, GPUS_PER_NODE,
# CPUS_PER_TASK and SRUN_ARGS, the repository root and the interpreter.
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-$((GPUS < 8 ? GPUS : 8))}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$([[ -x "$ROOT/.venv/bin/python" ]] && echo "$ROOT/.venv/bin/python" || echo python)}"
# shellcheck disable=SC2206  # SRUN_ARGS is split on purpose
SRUN=(-p "$PARTITION" --job-name="$JOB_NAME" --gres=gpu:"$GPUS_PER_NODE" --ntasks="$GPUS"
      --ntasks-per-node="$GPUS_PER_NODE" --cpus-per-task="$CPUS_PER_TASK" --kill-on-bad-exit=1
      ${SRUN_ARGS:-})
