#!/usr/bin/env bash
# One-command install of the peco_mm stack into a project-local venv; `make install` runs it.
#
#   bash tools/install.sh               # ./.venv (or $PECO_VENV): about 2 minutes, no compiler
#   bash tools/install.sh --mmcv-ops    # the same, plus mmcv's own compiled ops (or PECO_MMCV_OPS=1)
#
# Default: `pip install -e '.[tests]'` (done with uv when it is available or installable, as it is
# several times faster than pip on torch's CUDA libraries; PECO_USE_UV=0 uses pip). That gives
# mmcv-lite 2.1.0, i.e. mmcv without its C++/CUDA ops; `import peco_mm` (and, for stock configs,
# the start-up hook tools/install_startup_hook.py puts in the venv) serves the ops the
# dense models need (RoIAlign, nms) from torchvision, on CPU and CUDA (peco_mm/ops/).
#
# --mmcv-ops adds mmcv 2.1.0's compiled ops (deformable conv, MultiScaleDeformableAttention, ...),
# which then take precedence. mmcv 2.1.0 ships them as source only, and its setup.py asks for
# C++14/17 where torch >= 2.10 headers need C++20: the script patches the flag and builds a wheel
# (about 12 minutes on 2 cores) once, cached in $PECO_WHEEL_CACHE (~/.cache/peco_mm/wheels) per
# torch, Python, CUDA version and GPU architectures. It builds CUDA ops when nvcc and a GPU are
# present (PECO_FORCE_CUDA=1: with nvcc and no GPU; TORCH_CUDA_ARCH_LIST picks the architectures,
# by default those of the visible GPUs), CPU ops otherwise. Needs g++ (and nvcc for CUDA).
#
# torch: setup.cfg allows a range (torch>=2.11,<2.15); this script pins the version the project's
# venv is tested with, PECO_TORCH (default "torch==2.14.1 torchvision==0.29.1"; `make
# test-torch-low` installs the low end into its own venv with it).
#
# A rerun with nothing changed returns at once (stamp file in the venv).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PECO_VENV:-$ROOT/.venv}"
CACHE="${PECO_WHEEL_CACHE:-$HOME/.cache/peco_mm/wheels}"
PY="${PECO_PYTHON:-python3.11}"
STAMP="$VENV/.peco_mm_installed"
MMCV_OPS="${PECO_MMCV_OPS:-0}"
TORCH_PINS="${PECO_TORCH:-torch==2.14.1 torchvision==0.29.1}"
for arg in "$@"; do
  case "$arg" in
    --mmcv-ops) MMCV_OPS=1 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "install: unknown argument '$arg' (expected --mmcv-ops)" >&2; exit 2 ;;
  esac
done
[[ "$MMCV_OPS" == 1 ]] && MODE=mmcv-ops || MODE=lite

want="$(cat "$ROOT/setup.cfg" "$ROOT/setup.py" "$ROOT/pyproject.toml" "$0" | sha1sum | cut -c1-12)-$MODE-${TORCH_PINS// /-}"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -x "$VENV/bin/python" ]]; then
  echo "install: $VENV is up to date ($MODE)"
  exit 0
fi

T0=$(date +%s)
step() { echo "install: [$(( $(date +%s) - T0 ))s] $*"; }

# ---- prerequisites: one line each, saying what to install ------------------------------------
command -v "$PY" >/dev/null 2>&1 || { echo "install: Python 3.11 not found ($PY); install python3.11 and python3.11-venv (or set PECO_PYTHON)" >&2; exit 1; }
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null || { echo "install: $PY is not Python 3.11; set PECO_PYTHON to a Python 3.11 interpreter" >&2; exit 1; }
if [[ "$MODE" == mmcv-ops ]]; then
  command -v "${CXX:-g++}" >/dev/null 2>&1 || { echo "install: --mmcv-ops needs a C++ compiler (${CXX:-g++}); install g++ (apt-get install g++)" >&2; exit 1; }
fi

# ---- the venv, and uv ------------------------------------------------------------------------
if [[ ! -x "$VENV/bin/python" ]]; then
  step "creating $VENV with $PY"
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
PIP=("$VPY" -m pip --disable-pip-version-check)
INSTALL=("${PIP[@]}" install --quiet)
REINSTALL=--force-reinstall
if [[ "${PECO_USE_UV:-1}" != 0 ]]; then
  UV="$(command -v "$VENV/bin/uv" uv | head -n 1 || true)"
  if [[ -z "$UV" ]]; then
    step "installing uv into the venv (PECO_USE_UV=0 to use pip only)"
    "${INSTALL[@]}" uv >/dev/null 2>&1 && UV="$VENV/bin/uv" || step "uv not installable; using pip"
  fi
  if [[ -n "$UV" ]]; then
    # uv does not read pip's configuration: pass on its index, extra indexes and find-links,
    # and let every index compete for the best version, as pip does
    uv_args=()
    while IFS= read -r line; do
      key="${line%%=*}"; key="${key##*.}"; val="${line#*=}"; val="${val//\'/}"
      case "$key" in
        index-url) uv_args+=(--index-url "$val") ;;
        extra-index-url) for u in $val; do uv_args+=(--extra-index-url "$u"); done ;;
        find-links) for u in $val; do uv_args+=(--find-links "$u"); done ;;
      esac
    done < <("${PIP[@]}" config list 2>/dev/null)
    # --compile-bytecode: as pip does; without .pyc files (and with PYTHONDONTWRITEBYTECODE set)
    # every `import mmdet.models` takes twice as long
    INSTALL=("$UV" pip install --quiet --compile-bytecode --python "$VPY"
             --index-strategy unsafe-best-match "${uv_args[@]}")
    REINSTALL=--reinstall
  fi
fi

# ---- the stack: setup.cfg's install_requires and the `tests` extra, peco_mm editable --------
# mmaction2 asks for opencv-contrib-python, another provider of the `cv2` files opencv-python
# installs (and removing either removes them): uv leaves it out of the resolution; after pip, it
# is removed and opencv-python's files are put back
one_cv2=()
if [[ "$(basename "${INSTALL[0]}")" == uv ]] && "$UV" pip install --help 2>/dev/null | grep -q -- '--excludes'; then
  echo opencv-contrib-python > "$VENV/.peco_mm_excludes.txt"
  one_cv2=(--excludes "$VENV/.peco_mm_excludes.txt")
fi
step "installing $TORCH_PINS, mmengine, mmcv-lite, mmdet, mmseg, mmpretrain, mmaction2, timm, peco_mm ($(basename "${INSTALL[0]}"))"
read -r -a torch_pins <<< "$TORCH_PINS"
"${INSTALL[@]}" "${one_cv2[@]}" -e "$ROOT[tests]" "${torch_pins[@]}"
# an editable install leaves the start-up hook out (stock configs that never import peco_mm)
"$VPY" "$ROOT/tools/install_startup_hook.py" >/dev/null
if "$VPY" -c 'import importlib.metadata as m; m.version("opencv-contrib-python")' 2>/dev/null; then
  step "keeping one cv2: removing opencv-contrib-python, reinstalling opencv-python"
  "${PIP[@]}" uninstall --quiet --yes opencv-contrib-python
  "${INSTALL[@]}" --no-deps "$REINSTALL" "opencv-python==$("$VPY" -c 'import importlib.metadata as m; print(m.version("opencv-python"))')"
fi

# ---- opt-in: mmcv 2.1.0's compiled ops ---------------------------------------------------------
if [[ "$MODE" == mmcv-ops ]]; then
  "${INSTALL[@]}" ninja wheel
  read -r TORCH_VER TORCH_CUDA GPU_ARCHS < <("$VPY" -c '
import torch
archs = sorted({"%d.%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}) if torch.cuda.is_available() else []
print(torch.__version__.split("+")[0], torch.version.cuda or "none", ";".join(archs) or "none")')
  CUDA=0
  if command -v nvcc >/dev/null 2>&1 && [[ "$TORCH_CUDA" != none ]]; then
    if [[ "$GPU_ARCHS" != none || "${PECO_FORCE_CUDA:-0}" == 1 ]]; then CUDA=1; fi
  elif [[ "${PECO_FORCE_CUDA:-0}" == 1 ]]; then
    echo "install: PECO_FORCE_CUDA=1 needs nvcc on PATH and a CUDA build of torch (torch.version.cuda: $TORCH_CUDA)" >&2; exit 1
  fi
  if [[ $CUDA == 1 ]]; then
    NVCC_VER="$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
    export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-${GPU_ARCHS/none/}}"
    [[ -n "$TORCH_CUDA_ARCH_LIST" ]] || { echo "install: no GPU visible; set TORCH_CUDA_ARCH_LIST (e.g. '8.0;9.0') to build CUDA ops" >&2; exit 1; }
    FLAVOUR="cuda${NVCC_VER}-sm$(echo "$TORCH_CUDA_ARCH_LIST" | tr -c '0-9A-Za-z.\n' '_')"
  else
    FLAVOUR=cpu
  fi
  PYTAG="$("$VPY" -c 'import sys; print("py%d%d" % sys.version_info[:2])')"
  WDIR="$CACHE/mmcv-2.1.0-torch$TORCH_VER-$PYTAG-$FLAVOUR"
  mkdir -p "$WDIR"
  if ! ls "$WDIR"/mmcv-2.1.0-*.whl >/dev/null 2>&1; then
    step "building mmcv 2.1.0 with $FLAVOUR ops (about 12 minutes on 2 cores for CPU); wheel cached in $WDIR"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    "${PIP[@]}" download --quiet --no-deps --no-binary :all: 'mmcv==2.1.0' -d "$tmp"
    tar -xzf "$tmp"/mmcv-2.1.0.tar.gz -C "$tmp"
    # torch >= 2.10 headers need C++20; the sdist pins c++14 / c++17.
    sed -i -e 's/-std=c++14/-std=c++20/g' -e 's/-std=c++17/-std=c++20/g' "$tmp/mmcv-2.1.0/setup.py"
    log="$WDIR/build.log"
    (
      cd "$tmp/mmcv-2.1.0"
      export MMCV_WITH_OPS=1 MAX_JOBS="${MAX_JOBS:-$(nproc)}"
      [[ $CUDA == 1 ]] && export FORCE_CUDA=1
      # ninja numbers its compile steps [n/total]: show one line per 10 of them
      "${PIP[@]}" wheel -v --no-build-isolation --no-deps -w "$tmp/dist" . 2>&1 | tee "$log" |
        while IFS= read -r line; do
          if [[ "$line" =~ ^\[([0-9]+)/([0-9]+)\] ]] &&
             (( BASH_REMATCH[1] % 10 == 0 || BASH_REMATCH[1] == BASH_REMATCH[2] )); then
            step "compiling mmcv ops: ${BASH_REMATCH[1]} of ${BASH_REMATCH[2]} steps"
          fi
        done
      exit "${PIPESTATUS[0]}"
    ) || { tail -n 30 "$log" >&2; echo "install: building mmcv failed; full log in $log" >&2; exit 1; }
    cp "$tmp"/dist/mmcv-2.1.0-*.whl "$WDIR/"
  fi
  step "installing mmcv 2.1.0 with compiled $FLAVOUR ops over mmcv-lite (same Python files, plus mmcv._ext)"
  "${INSTALL[@]}" --no-deps "$REINSTALL" "$WDIR"/mmcv-2.1.0-*.whl
fi

# ---- check ------------------------------------------------------------------------------------
step "checking the imports"
# mmaction2 1.2 imports timm's old `timm.models.layers` path, which warns on every import
"$VPY" -W 'ignore:Importing from timm.models.layers is deprecated:FutureWarning' -c '
import cv2, mmcv.ops, mmdet.models, mmseg.models, mmaction.models, mmpretrain, timm, peco_mm, torch, mmcv._ext as ext
ops = "compiled mmcv ops" if ext.__file__.endswith(".so") else "torchvision-backed mmcv ops (peco_mm.ops)"
print(f"install: ok: peco_mm {peco_mm.__version__}, torch {torch.__version__}, mmcv {mmcv.__version__} with {ops}")'
echo "$want" > "$STAMP"
step "done"
