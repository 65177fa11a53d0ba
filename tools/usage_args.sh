# Sourced first by dist_train.sh, dist_test.sh, slurm_train.sh and slurm_test.sh, as
#   source "$(dirname "${BASH_SOURCE[0]}")/usage_args.sh" NAME... -- "$@"
# -h / --help prints the script's header comment (its usage) and exits 0; fewer arguments than
# NAMEs print it and exit 2. Otherwise the leading arguments are assigned to the NAMEs in order,
# the rest are left in the array ARGS (the tool's own flags), and ROOT (the repository), PY
# (the interpreter: PYTHON, else the repository's .venv, else python) and TOOL_PYTHONPATH (the
# tools' PYTHONPATH) are set.
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
names=()
while [[ "$1" != -- ]]; do names+=("$1"); shift; done
shift
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  usage
  exit 0
fi
if [[ $# -lt ${#names[@]} ]]; then
  usage
  exit 2
fi
for name in "${names[@]}"; do printf -v "$name" '%s' "$1"; shift; done
ARGS=("$@")
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$([[ -x "$ROOT/.venv/bin/python" ]] && echo "$ROOT/.venv/bin/python" || echo python)}"
# the repository, then the caller's PYTHONPATH without its empty entries: an empty entry (as in
# "$ROOT:" when PYTHONPATH is unset) is the current directory, searched before the standard
# library, so a subprocess.py there would run
TOOL_PYTHONPATH=$ROOT
IFS=: read -ra entries <<< "${PYTHONPATH:-}"
for entry in "${entries[@]}"; do
  if [[ -n "$entry" ]]; then TOOL_PYTHONPATH+=":$entry"; fi
done
