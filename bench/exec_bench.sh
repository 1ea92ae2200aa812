#!/usr/bin/env bash
# `zerosim exec` on a training command, two figures, each beside its peer from the same run:
#
#   recording overhead   the command alone (wall time, median of REPEATS runs) against its traced
#                        run under `zerosim exec ... --crash-points 1 --states-per-point 1 --json`
#                        (the JSON's reference_seconds, median of as many runs, alternated with
#                        the runs alone); ratio traced / alone, goal <= 1.3x. The command alone
#                        gets ZEROSIM_STATE_LOG (a file outside WATCH_DIR), as under exec, so
#                        that both write the state log and the ratio is the recorder's alone.
#   crash states/minute  one exec with --crash-points POINTS --states-per-point 1 --jobs 1 against
#                        one with --jobs JOBS, same seed (the same crash states): crash_states /
#                        resume_seconds x 60 for each, and the ratio, goal >= 6x.
#
# Usage: bench/exec_bench.sh ZEROSIM WATCH_DIR RESUME_LINE -- COMMAND...
#   ZEROSIM      the zerosim binary
#   WATCH_DIR    the directory the command checkpoints into (exec --watch); empty or absent: the
#                bench empties it before every run
#   RESUME_LINE  exec's --resume-command (a shell line), or - to resume with COMMAND itself
#   env REPEATS (3), POINTS (16), JOBS (8); a value given empty or not a positive whole number is
#   refused by name (exit 2). Exit 3 when a run fails (the command alone exits non-zero, or exec
#   with a status other than 0 or 1: 1 only says a crash state failed, which is exec's finding).
# Run it from the directory COMMAND expects (for the examples, the repository root), e.g.:
#   bench/exec_bench.sh build/tools/zerosim /tmp/hfck \
#     "python3 examples/exec/hf_trainer.py --ckpt /tmp/hfck --resume" -- \
#     python3 examples/exec/hf_trainer.py --ckpt /tmp/hfck
# Needs python3 (to read exec's JSON).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/arguments.sh
source "$root/bench/arguments.sh"

usage="usage: $0 ZEROSIM WATCH_DIR RESUME_LINE -- COMMAND...   (env REPEATS, POINTS, JOBS)"
if [ $# -lt 5 ]; then
  echo "$usage" >&2
  exit 2
fi
zerosim=$1
watch=$2
resume=$3
if [ "$4" != "--" ]; then
  echo "exec_bench: '--' must follow RESUME_LINE, got '$4'" >&2
  echo "$usage" >&2
  exit 2
fi
shift 4
command=("$@")

[ -n "$zerosim" ] || { echo "exec_bench: ZEROSIM is empty" >&2; exit 2; }
if [ ! -f "$zerosim" ] || [ ! -x "$zerosim" ]; then
  echo "exec_bench: ZEROSIM '$zerosim' is not an executable file" >&2
  exit 2
fi
[ -n "$watch" ] || { echo "exec_bench: WATCH_DIR is empty" >&2; exit 2; }
if [ -e "$watch" ] && [ ! -d "$watch" ]; then
  echo "exec_bench: WATCH_DIR '$watch' is not a directory" >&2
  exit 2
fi
if [ -d "$watch" ] && [ -n "$(ls -A "$watch")" ]; then
  echo "exec_bench: WATCH_DIR '$watch' is not empty (the bench empties it before every run: give it an empty or new one)" >&2
  exit 2
fi
[ -n "$resume" ] || { echo "exec_bench: RESUME_LINE is empty (give - to resume with COMMAND itself)" >&2; exit 2; }
[ -n "${command[0]}" ] || { echo "exec_bench: COMMAND is empty" >&2; exit 2; }
repeats=${REPEATS-3}
points=${POINTS-16}
jobs=${JOBS-8}
require_positive_whole_numbers exec_bench "REPEATS=$repeats" "POINTS=$points" "JOBS=$jobs"
command -v python3 >/dev/null || { echo "exec_bench: python3 is needed to read exec's JSON" >&2; exit 3; }

mkdir -p "$watch"
work=$(mktemp -d "${TMPDIR:-/tmp}/exec_bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
resume_flags=()
[ "$resume" = - ] || resume_flags=(--resume-command "$resume")

empty_watch() { find "$watch" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +; }

# FILE KEY: the KEY of the last JSON object in FILE (exec prints one, indented, at the end).
json_field() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
path, key = sys.argv[1], sys.argv[2]
text = open(path).read()
starts = [i for i in range(len(text)) if text[i] == "{" and (i == 0 or text[i - 1] == "\n")]
for start in reversed(starts):
    try:
        document, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        continue
    if not isinstance(document, dict) or key not in document:
        sys.exit("exec_bench: zerosim exec's JSON has no %s (%s)" % (key, path))
    print(document[key])
    sys.exit(0)
sys.exit("exec_bench: no JSON object in zerosim exec's output (%s)" % path)
EOF
}

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { printf "%.3f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# Sets alone_seconds: one run of the command alone, WATCH_DIR emptied first.
run_alone() {
  empty_watch
  local start end status=0
  start=$(date +%s.%N)
  ZEROSIM_STATE_LOG="$work/alone-state.jsonl" "${command[@]}" >"$work/alone.out" 2>&1 || status=$?
  end=$(date +%s.%N)
  rm -f "$work/alone-state.jsonl"
  if [ "$status" -ne 0 ]; then
    echo "exec_bench: the command alone exited $status; the end of its output:" >&2
    tail -n 20 "$work/alone.out" >&2
    exit 3
  fi
  alone_seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }')
}

# OUTPUT FLAGS...: one zerosim exec run (WATCH_DIR emptied first, a work directory of its own,
# seed 1), its stdout into OUTPUT; sets exec_status.
run_exec() {
  local output=$1 work_dir
  shift
  empty_watch
  work_dir=$(mktemp -d "$work/exec.XXXXXX")
  exec_status=0
  "$zerosim" exec --watch "$watch" "${resume_flags[@]}" --work-dir "$work_dir" --seed 1 --json "$@" \
    -- "${command[@]}" >"$output" 2>"$output.stderr" || exec_status=$?
  rm -rf "$work_dir"
  if [ "$exec_status" -gt 1 ]; then
    echo "exec_bench: zerosim exec $* exited $exec_status; the end of its stderr:" >&2
    tail -n 20 "$output.stderr" >&2
    exit 3
  fi
}

echo "exec_bench: $(date -u +%Y-%m-%dT%H:%M:%SZ), nproc $(nproc), $(uname -m)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi -L 2>/dev/null | sed 's/^/  /' || true
fi
echo "  zerosim: $("$zerosim" --version 2>/dev/null | head -n 1 || echo '(no --version)')"
echo "  command: ${command[*]}"
echo "  resume:  $resume"
echo "  watch:   $watch"

# 1. Recording overhead: alone and traced, alternated, REPEATS each.
alone_runs=()
traced_runs=()
for ((i = 1; i <= repeats; i++)); do
  run_alone
  alone_runs+=("$alone_seconds")
  run_exec "$work/overhead.json" --crash-points 1 --states-per-point 1
  traced_runs+=("$(json_field "$work/overhead.json" reference_seconds)")
done
alone=$(median "${alone_runs[@]}")
traced=$(median "${traced_runs[@]}")
echo
echo "recording overhead (median of $repeats runs each, alternated):"
echo "  alone   ${alone} s    (runs: ${alone_runs[*]})"
echo "  traced  ${traced} s    (exec's reference_seconds; runs: ${traced_runs[*]})"
echo "  traced / alone = $(ratio "$traced" "$alone")x   (goal <= 1.3x)"

# 2. Crash states per minute: --jobs 1 against --jobs JOBS, the same crash states (seed 1).
declare -A states seconds per_minute
for j in 1 "$jobs"; do
  run_exec "$work/jobs-$j.json" --crash-points "$points" --states-per-point 1 --jobs "$j"
  states[$j]=$(json_field "$work/jobs-$j.json" crash_states)
  seconds[$j]=$(json_field "$work/jobs-$j.json" resume_seconds)
  per_minute[$j]=$(awk -v n="${states[$j]}" -v s="${seconds[$j]}" 'BEGIN { printf "%.2f", n / s * 60 }')
done
echo
echo "crash states per minute ($points crash points, 1 state each, seed 1; one run each):"
for j in 1 "$jobs"; do
  printf '  --jobs %-3s %s crash states, resume phase %s s: %s states/min\n' "$j" "${states[$j]}" "${seconds[$j]}" "${per_minute[$j]}"
done
echo "  --jobs $jobs / --jobs 1 = $(ratio "${per_minute[$jobs]}" "${per_minute[1]}")x   (goal >= 6x)"
