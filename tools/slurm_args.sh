# Sourced by slurm_train.sh and slurm_test.sh after usage_args.sh: the srun arguments from GPUS,
# GPUS_PER_NODE, CPUS_PER_TASK and SRUN_ARGS, and srun_tool.
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-$((GPUS < 8 ? GPUS : 8))}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
# shellcheck disable=SC2206  # SRUN_ARGS is split on purpose
SRUN=(-p "$PARTITION" --job-name="$JOB_NAME" --gres=gpu:"$GPUS_PER_NODE" --ntasks="$GPUS"
      --ntasks-per-node="$GPUS_PER_NODE" --cpus-per-task="$CPUS_PER_TASK" --kill-on-bad-exit=1
      ${SRUN_ARGS:-})

# srun_tool TOOL ARGS...: tools/TOOL in every process srun starts; mmengine reads the rank, world
# size and master address from slurm's variables, the port from MASTER_PORT
srun_tool() {
  PYTHONPATH="$TOOL_PYTHONPATH" MASTER_PORT="${PORT:-29500}" srun "${SRUN[@]}" \
    "$PY" -u "$ROOT/tools/$1" "${@:2}"
}
