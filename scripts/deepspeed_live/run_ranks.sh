#!/usr/bin/env bash
# DeepSpeed's own engine on several ranks, and its data position, on the CPU machine (with
# scripts/deepspeed_live/cpu-env.sh sourced: ranks are processes over gloo) or on a GPU machine
# with as many GPUs as ranks. Every figure of docs/deepspeed-live.md's "Across world sizes" and
# "The data position" comes from:
#
#   scripts/deepspeed_live/run_ranks.sh OUT_DIR [CASE...]
#
#   other-world-size  a run of 2 ranks saved at K, loaded by 1, 3 and 2 ranks (each a new
#                     launch), and by 1 rank with load_module_only=True and with
#                     load_optimizer_states=False; the 2-rank resume compared with the
#                     uninterrupted 2-rank run per rank, the 1-rank loads with the saved partitions
#   data-position     one rank, the export's rows given to deepspeed.initialize(training_data=...),
#                     the loop over the engine's loader from its start in each process (a plain
#                     loop): uninterrupted, saved at K, resumed; which rows the resumed steps took
# env PRECISION (bf16: the CPU accelerator has no fp16), MODEL (64,256,256,10), STEPS (20),
# K (10), PYTHON (python3), ZEROSIM (build/tools/zerosim), SEED_CONFIG
# (tests/data/seed_ds_config.json), PROCESS_SECONDS (180: a launch's limit), SCRATCH
# (/tmp/deepspeed-live-ranks: emptied first). The exit status is 1 when any case failed.
set -uo pipefail
if [ $# -lt 1 ] || [ -z "$1" ]; then
  echo "usage: $0 OUT_DIR [CASE...]" >&2
  exit 2
fi
out=$1
shift
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(other-world-size data-position)
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/scripts/deepspeed_live
python=${PYTHON:-python3}
zerosim=${ZEROSIM:-$root/build/tools/zerosim}
seed_config=${SEED_CONFIG:-$root/tests/data/seed_ds_config.json}
precision=${PRECISION:-bf16}
model=${MODEL:-64,256,256,10}
steps=${STEPS:-20}
k=${K:-10}
release=${DEEPSPEED_VERSION:?run_ranks: DEEPSPEED_VERSION is not set: source cpu-env.sh (or ds-env.sh) first}
[ -x "$zerosim" ] || { echo "run_ranks: no zerosim binary $zerosim" >&2; exit 2; }
for value in "$steps" "$k" "${PROCESS_SECONDS:-180}"; do
  [[ "$value" =~ ^[1-9][0-9]*$ ]] ||
    { echo "run_ranks: STEPS, K and PROCESS_SECONDS must be positive integers, not '$value'" >&2; exit 2; }
done
case $precision in bf16|fp32) ;; *) echo "run_ranks: PRECISION must be bf16 or fp32 (the CPU accelerator has no fp16), not '$precision'" >&2; exit 2 ;; esac
[[ "$model" =~ ^[1-9][0-9]*(,[1-9][0-9]*)+$ ]] || { echo "run_ranks: MODEL must be widths W0,W1,..., not '$model'" >&2; exit 2; }
[ "$k" -lt "$steps" ] || { echo "run_ranks: K ($k) must come before STEPS ($steps)" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
scratch=${SCRATCH-/tmp/deepspeed-live-ranks}
case $scratch in /*/*) ;; *) echo "run_ranks: SCRATCH must be an absolute directory below /, not '$scratch'" >&2; exit 2 ;; esac
rm -rf "$scratch"
mkdir -p "$scratch"
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
port=29800

# launch W NAME ARGS...: W processes of ds_train.py (ranks 0..W-1, one rendezvous), their
# outputs in OUT/NAME.rankR.log; the status is the first failing rank's.
launch() {
  local world=$1 name=$2 rank status=0 pids=()
  shift 2
  port=$((port + 1))
  for rank in $(seq 0 $((world - 1))); do
    MASTER_PORT=$port RANK=$rank WORLD_SIZE=$world LOCAL_RANK=$rank LOCAL_SIZE=$world \
      timeout "${PROCESS_SECONDS:-180}" "$python" "$here/ds_train.py" "$@" > "$out/$name.rank$rank.log" 2>&1 &
    pids+=($!)
  done
  local code
  for rank in "${!pids[@]}"; do
    wait "${pids[$rank]}"
    code=$?
    [ $code -eq 0 ] || [ $status -ne 0 ] || status=$code
  done
  return $status
}

# outcome NAME W: one line per rank: the load's result or the error it ended with.
outcome() {
  local name=$1 world=$2 rank line
  for rank in $(seq 0 $((world - 1))); do
    line=$(grep -E "^ds_train: loaded|Error|Exception" "$out/$name.rank$rank.log" | grep -v "^\s*File" | tail -1)
    echo "  rank $rank: ${line:-no load line (see $name.rank$rank.log)}"
  done
}

export_run() {
  local name=$1 world=$2
  "$zerosim" train --config "$seed_config" --precision "$precision" --steps "$steps" --model "$model" \
    --world-size "$world" --set zerosim.numerics=deepspeed --set zerosim.deepspeed_release="$release" \
    --set zero_optimization.offload_optimizer.device=cpu --run-id "$name" \
    --export-run "$scratch/$name/export" > "$out/$name.zerosim.log" 2>&1 ||
    { echo "== $name: zerosim train failed"; tail -5 "$out/$name.zerosim.log"; return 1; }
}

other_world_size() {
  local name=other-world-size
  local export=$scratch/$name/export ckpt=$scratch/$name/ckpt
  export_run $name 2 || return 1
  local common=("$export" "$seed_config")
  launch 2 $name.uninterrupted "${common[@]}" "$scratch/$name/uninterrupted" --offload cpu ||
    { echo "== $name: the uninterrupted run failed"; return 1; }
  launch 2 $name.save "${common[@]}" "$scratch/$name/save" --offload cpu --save-at "$k" --ckpt "$ckpt" ||
    { echo "== $name: the save failed"; return 1; }
  ls -R "$ckpt" > "$out/$name.ckpt-files.txt"
  local world code failed=0
  for world in 1 3 2; do
    launch $world $name.resume-w$world "${common[@]}" "$scratch/$name/resume-w$world" --offload cpu --resume "$ckpt"
    code=$?
    echo "$name: saved by 2 ranks, loaded by $world (exit status $code):"
    outcome $name.resume-w$world $world
  done
  for rank in 0 1; do
    if ! "$python" "$here/ds_compare.py" resume "$scratch/$name/uninterrupted/rank$rank" "$scratch/$name/save/rank$rank" \
      "$scratch/$name/resume-w2/rank$rank" "$k" "$out/$name.resume-w2.rank$rank.json" \
      > "$out/$name.resume-w2.rank$rank.txt" 2>&1; then
      echo "  rank $rank: no comparison (see $name.resume-w2.rank$rank.txt)"
      failed=1
      continue
    fi
    echo "  the 2-rank resume, rank $rank, against the uninterrupted run: $(grep "first differing step" "$out/$name.resume-w2.rank$rank.txt")"
  done
  local option label flag
  for option in "module-only:--load-module-only 1" "fresh-optimizer:--load-optimizer-states 0"; do
    label=${option%%:*}
    flag=${option#*:}
    launch 1 $name.resume-w1-$label "${common[@]}" "$scratch/$name/resume-w1-$label" --offload cpu --resume "$ckpt" $flag
    echo "$name: saved by 2 ranks, loaded by 1 with $flag (exit status $?):"
    outcome $name.resume-w1-$label 1
    if [ -f "$scratch/$name/resume-w1-$label/state-loaded.safetensors" ]; then
      "$python" "$here/ds_compare.py" across "$export" "$scratch/$name/save" "$k" "$scratch/$name/resume-w1-$label" \
        "$out/$name.resume-w1-$label.json" > "$out/$name.resume-w1-$label.txt" 2>&1 || failed=1
      sed 's/^/  /' "$out/$name.resume-w1-$label.txt" | grep -v "^  wrote"
    fi
  done
  return $failed
}

data_position() {
  local name=data-position
  local export=$scratch/$name/export
  export_run $name 1 || return 1
  local common=("$export" "$seed_config")
  launch 1 $name.uninterrupted "${common[@]}" "$scratch/$name/uninterrupted" --offload cpu --data engine-loader \
    --capture-at "$k" ||
    { echo "== $name: the uninterrupted run failed"; return 1; }
  launch 1 $name.save "${common[@]}" "$scratch/$name/save" --offload cpu --data engine-loader --save-at "$k" \
    --ckpt "$scratch/$name/ckpt" || { echo "== $name: the save failed"; return 1; }
  launch 1 $name.resume "${common[@]}" "$scratch/$name/resume" --offload cpu --data engine-loader \
    --resume "$scratch/$name/ckpt" || { echo "== $name: the resume failed"; outcome $name.resume 1; return 1; }
  "$python" "$here/ds_compare.py" data "$scratch/$name/uninterrupted" "$scratch/$name/save" "$scratch/$name/resume" "$k" \
    "$out/$name.json" > "$out/$name.txt" 2>&1 || { tail -5 "$out/$name.txt"; return 1; }
  echo "$name:"
  sed 's/^/  /' "$out/$name.txt" | grep -v "^  wrote"
}

for case in "${cases[@]}"; do
  case $case in other-world-size|data-position) ;; *) echo "run_ranks: unknown case '$case'" >&2; exit 2 ;; esac
done
status=0
for case in "${cases[@]}"; do
  case $case in
    other-world-size) other_world_size || status=1 ;;
    data-position) data_position || status=1 ;;
  esac
done
exit $status
