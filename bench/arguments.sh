# Argument checks shared by the checkpoint benchmark scripts (checkpoint_vs_dcp.sh and
# checkpoint_vs_fio.sh source it): a value given empty or out of range is refused by name with
# exit status 2, never read as the default. The first argument of each is the script's name,
# which starts the message.

# SCRIPT NAME=VALUE ...: each VALUE a whole number above 0.
require_positive_whole_numbers() {
  local script=$1 pair
  shift
  for pair in "$@"; do
    case "${pair#*=}" in
      ''|*[!0-9]*|0) echo "$script: ${pair%%=*} must be a positive whole number, got '${pair#*=}'" >&2; exit 2;;
    esac
  done
}

# SCRIPT NAME VALUE: VALUE a checkpoint.writer type as checkpoint_bench --writer takes it.
require_writer_type() {
  case "$3" in
    none|python|fast) ;;
    *) echo "$1: $2 takes checkpoint.writer types (none, python, fast), got '$3'" >&2; exit 2;;
  esac
}
