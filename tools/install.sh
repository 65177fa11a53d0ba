#!/usr/bin/env bash
# One-command install of the peco_mm stack into a project-local venv (DESIGN §4).
#
#   bash tools/install.sh            # creates ./.venv (or $PECO_VENV), reuses it afterwards
#
# mmcv 2.1.0 has no Linux wheels and its sdist hard-codes C++14/17 while torch >= 2.10 headers
# need C++20, so we build it once with the flag patched and cache the wheel outside the
# checkout ($PECO_WHEEL_CACHE, default ~/.cache/peco_mm/wheels). Later installs take the wheel.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PECO_VENV:-$ROOT/.venv}"
CACHE="${PECO_WHEEL_CACHE:-$HOME/.cache/peco_mm/wheels}"
PY="${PECO_PYTHON:-python3.11}"
STAMP="$VENV/.peco_mm_installed"
REQ="$ROOT/requirements.txt"

# ---- prerequisites: one line each, saying what to install --------------------------------
command -v "$PY" >/dev/null 2>&1 || { echo "install: Python 3.11 not found ($PY); install python3.11 and python3.11-venv (or set PECO_PYTHON)" >&2; exit 1; }
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null || { echo "install: $PY is not Python 3.11; set PECO_PYTHON to a Python 3.11 interpreter" >&2; exit 1; }
command -v "${CXX:-g++}" >/dev/null 2>&1 || { echo "install: no C++ compiler (${CXX:-g++}); install g++ (apt-get install g++) to build mmcv's ops" >&2; exit 1; }

want="$(cat "$REQ" "$ROOT/setup.cfg" "$0" | sha1sum | cut -c1-12)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -x "$VENV/bin/python" ]]; then
  exit 0
fi
t0=$(date +%s)
echo "install: building $VENV (first run; later runs reuse it)"
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)

# setuptools must stay in [77, 81): torch needs >= 77.0.3, mmcv's setup.py and mmengine's
# `mmdet::` base resolution need pkg_resources, gone in 81.
"${PIP[@]}" 'setuptools==80.9.0' wheel ninja 'numpy<2'
"${PIP[@]}" 'torch==2.14.1' 'torchvision==0.29.1'

# ---- mmcv 2.1.0 with compiled ops ---------------------------------------------------------
CUDA_OK=0
if command -v nvcc >/dev/null 2>&1 && "$VENV/bin/python" -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  CUDA_OK=1
fi
FLAVOUR=$([[ $CUDA_OK == 1 ]] && echo cuda || echo cpu)
WDIR="$CACHE/mmcv-2.1.0-torch2.14.1-py311-$FLAVOUR"
mkdir -p "$WDIR"
if ! ls "$WDIR"/mmcv-2.1.0-*.whl >/dev/null 2>&1; then
  echo "install: building mmcv 2.1.0 ($FLAVOUR ops, about 12 minutes on 2 cores); the wheel is cached in $WDIR"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  "$VENV/bin/python" -m pip download --quiet --no-deps --no-binary :all: 'mmcv==2.1.0' -d "$tmp"
  tar -xzf "$tmp"/mmcv-2.1.0.tar.gz -C "$tmp"
  # torch >= 2.10 headers need C++20; the sdist pins c++14 / c++17.
  sed -i -e 's/-std=c++14/-std=c++20/g' -e 's/-std=c++17/-std=c++20/g' "$tmp/mmcv-2.1.0/setup.py"
  (
    cd "$tmp/mmcv-2.1.0"
    export MMCV_WITH_OPS=1 MAX_JOBS="${MAX_JOBS:-$(nproc)}"
    [[ $CUDA_OK == 1 ]] && export FORCE_CUDA=1
    "$VENV/bin/python" -m pip wheel --quiet --no-build-isolation --no-deps -w "$tmp/dist" .
  )
  cp "$tmp"/dist/mmcv-2.1.0-*.whl "$WDIR/"
fi
"${PIP[@]}" --no-deps "$WDIR"/mmcv-2.1.0-*.whl

# ---- the rest of the stack, then peco_mm itself --------------------------------------------
"${PIP[@]}" -r "$REQ"
"${PIP[@]}" --no-deps --no-build-isolation -e "$ROOT"
"$VENV/bin/python" -c 'import mmcv.ops, mmdet, mmseg, mmpretrain, timm, peco_mm; print("install: ok, peco_mm", peco_mm.__version__, "mmcv", mmcv.__version__)'
echo "$want" > "$STAMP"
echo "install: done in $(( $(date +%s) - t0 )) s"
