# Sourced by dist_train.sh and dist_test.sh: torchrun's node arguments from NNODES, NODE_RANK,
# MASTER_ADDR and PORT (see dist_train.sh).
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
if [[ "$NNODES" == 1 && -z "${PORT:-}" ]]; then
  TORCHRUN_ARGS=(--standalone --nnodes=1)  # a free local port: jobs on one machine never clash
else
  PORT=${PORT:-29500}
  TORCHRUN_ARGS=(--nnodes="$NNODES" --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR"
                 --master_port="$PORT")
fi
