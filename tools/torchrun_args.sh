# Sourced by dist_train.sh and dist_test.sh after usage_args.sh: torchrun's node arguments from
# NNODES, NODE_RANK, MASTER_ADDR and PORT (see dist_train.sh), and torchrun_tool.
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

# torchrun_tool TOOL ARGS...: NPROC processes of tools/TOOL under torchrun, itself under a
# supervisor that ends every process of torchrun's tree left when it exits, e.g. the data loader
# workers of a rank the kernel killed, and nothing else (peco_mm/supervisor/process_tree.py).
# python -P: `-m` would put the current directory first on torchrun's sys.path
torchrun_tool() {
  PYTHONPATH="$TOOL_PYTHONPATH" exec "$PY" "$ROOT/peco_mm/supervisor/process_tree.py" \
    "$PY" -P -m torch.distributed.run "${TORCHRUN_ARGS[@]}" \
    --nproc_per_node="$NPROC" "$ROOT/tools/$1" "${@:2}"
}
