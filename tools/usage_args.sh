# Sourced first by dist_train.sh, dist_test.sh, slurm_train.sh and slurm_test.sh, as
#   source "$(dirname "${BASH_SOURCE[0]}")/usage_args.sh" MIN_ARGS "$@"
# -h / --help prints the script's header comment (its usage) and exits 0; fewer than MIN_ARGS
# arguments print it and exit 2.
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
if [[ "${2:-}" == "-h" || "${2:-}" == "--help" ]]; then
  usage
  exit 0
fi
if [[ $# -le $1 ]]; then
  usage
  exit 2
fi
