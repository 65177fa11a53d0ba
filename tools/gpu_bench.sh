#!/usr/bin/env bash
# The prepared GPU measurements of docs/benchmarks.md ("What a GPU session runs"), in one
# command of at most 8 minutes on one H100 / H200:
#
#   tools/gpu_bench.sh [OUT_DIR]        # default: gpu_bench/
#
# 1. the frozen target's codes on CUDA: the default ('auto': contiguous, compiled) against
#    eager channels-last, on the paper tokenizer with random weights (agreement, timing);
# 2. the pretraining step at bf16, batch 256, ViT-B: PeCo as shipped (target contiguous and
#    compiled), the target eager, then each lever alone on the eager-target step (target
#    channels-last, bf16 target, target in chunks of 64, SDPA's efficient kernel, fused
#    AdamW, the compiled step), and BEiT on the same card;
# 3. the chain at paper dimensions (tools/benchmark.py chain, 5 iterations a stage, the
#    first 2 left out), projected on 8 GPUs;
# 4. the data pipeline by transform on this machine's cores.
# Each part has its own time limit (together 7 min 40 s at most), so a slow part leaves the
# others their time; every part
# writes OUT_DIR/<part>.json and OUT_DIR/<part>.md (its printed table) and the log goes to
# OUT_DIR/log.txt. Nothing here changes the card's settings.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu_bench}
mkdir -p "$OUT"
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python
BENCH="$PY tools/benchmark.py"
exec > >(tee -a "$OUT/log.txt") 2>&1

part() {  # part NAME SECONDS ARGS...: one benchmark run, its table to NAME.md
    local name=$1 limit=$2
    shift 2
    echo "## $name: tools/benchmark.py $*"
    timeout "$limit" $BENCH "$@" --out "$OUT/$name.json" | tee "$OUT/$name.md" \
        || echo "## $name: stopped (exit $?)"
}

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
echo "## codes: target default on CUDA against eager channels-last"
timeout 30 "$PY" -m peco_mm.tooling.target_check --out "$OUT/codes.json" \
    | tee "$OUT/codes.md" || echo "## codes: stopped (exit $?)"

# the step as shipped (target contiguous and compiled), then each lever alone against the
# same step with an eager target (each compile costs tens of seconds of warm-up)
STEP="pretrain --device cuda --batch 256 --precision bf16 --steps 5 --warmup 3 --models peco"
part step_default 40 $STEP
part step_target_eager 25 $STEP --target-compile off
part step_target_channels_last 25 $STEP --target-compile off --target-layout channels-last
part step_target_bf16 25 $STEP --target-compile off --target-bf16
part step_target_chunk64 25 $STEP --target-compile off --target-chunk 64
part step_sdpa_efficient 25 $STEP --target-compile off --sdpa efficient
part step_fused_adamw 25 $STEP --target-compile off --fused-adamw
part step_compiled 60 $STEP --target-compile off --compile-step
part step_beit 25 ${STEP/--models peco/--models beit}

part chain 150 chain --iters 5 --skip 2 --gpus 8 --work-dir "$OUT/chain_work"
rm -rf "$OUT/chain_work/data"  # the synthetic images; logs and configs stay
part data 25 data --steps 100
echo "## done: $OUT"
