#!/usr/bin/env bash
# Evaluate a checkpoint on a slurm cluster: srun starts GPUS processes, GPUS_PER_NODE per node.
#
#   GPUS=8 tools/slurm_test.sh PARTITION JOB_NAME CONFIG CHECKPOINT [tools/test.py flags]
#
# GPUS           total processes (default 8)
# GPUS_PER_NODE  processes per node (default 8)
# CPUS_PER_TASK  CPU cores per process (default 5)
# SRUN_ARGS      extra srun arguments, e.g. "--quotatype=reserved"
# PYTHON         the interpreter (default: the repository's .venv, else python)
# mmengine reads the rank, world size and master address from slurm's variables; PORT sets the
# rendezvous port (default 29500). --kill-on-bad-exit ends the job when one process fails.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/usage_args.sh" PARTITION JOB_NAME CONFIG CKPT -- "$@"
source "$ROOT/tools/slurm_args.sh"
srun_tool test.py "$CONFIG" "$CKPT" --launcher slurm "${ARGS[@]}"
