#!/usr/bin/env bash
# The prepared GPU measurements of docs/benchmarks.md ("What a GPU session runs"), in one
# command of at most 8 minutes on one H100 / H200:
#
#   tools/gpu_bench.sh [OUT_DIR]        # default: gpu_bench/
#
# 1. steps: PeCo as shipped and BEiT side by side in one process (bf16, batch 256, ViT-B);
# 2. tokenizer_train: the tokenizer's training step at the shipped configs' size and per-GPU
#    batch (plain and adversarial), fp32 and bf16;
# 3. levers: each step lever alone against PeCo's eager-target step, in one process
#    (python -m peco_mm.tooling.lever_sweep), the compiled step last;
# 4. chain: the chain at paper dimensions through tools/train.py (5 iterations a stage, the
#    first 2 left out): per stage the real loop's s/iteration and its data wait, projected
#    on 8 GPUs.
# Each part has its own time limit (PART_LIMITS below: together 7 min 40 s; docs/benchmarks.md
# gives how each was sized), so a slow part leaves the others their time; every part writes
# OUT_DIR/<part>.json and OUT_DIR/<part>.md (its printed table) and the log goes to
# OUT_DIR/log.txt. Nothing here changes the card's settings.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu_bench}
mkdir -p "$OUT"
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python
exec > >(tee -a "$OUT/log.txt") 2>&1

# seconds per part, in the order they run
declare -A PART_LIMITS=([steps]=80 [tokenizer_train]=80 [levers]=150 [chain]=150)

part() {  # part NAME ARGS...: one run under NAME's limit, its table to NAME.md
    local name=$1
    shift
    echo "## $name: $*"
    timeout "${PART_LIMITS[$name]}" "$PY" "$@" --out "$OUT/$name.json" | tee "$OUT/$name.md" \
        || echo "## $name: stopped (exit $?)"
}

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
part steps tools/benchmark.py pretrain --device cuda --batch 256 --precision bf16 \
    --steps 5 --warmup 3 --models peco beit
part tokenizer_train tools/benchmark.py tokenizer-train --device cuda --steps 5 --warmup 2
part levers -m peco_mm.tooling.lever_sweep --device cuda --batch 256 --steps 5 --warmup 3
part chain tools/benchmark.py chain --iters 5 --skip 2 --gpus 8 --work-dir "$OUT/chain_work"
rm -rf "$OUT/chain_work/data"  # the synthetic images; logs and configs stay
echo "## done: $OUT"
