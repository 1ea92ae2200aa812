#!/usr/bin/env bash
# DeepSpeed's own engine against zerosim on the GPU machine: every figure of
# docs/deepspeed-live.md. Run from the repository root on that machine, after
# scripts/deepspeed_live/prepare.sh ran here and with .device-deps carried:
#
#   scripts/deepspeed_live/run_on_gpu.sh OUT_DIR [CASE...]
#
# Each CASE exports one zerosim run (`zerosim train --config SEED --export-run`, the numerics
# set to deepspeed), trains it with DeepSpeed uninterrupted, trains it to K and saves (writing the
# state it holds after the save), resumes it in a new process with a fresh NVMe swap folder, and
# compares (ds_compare.py). Cases run side by side on the one GPU. docs/deepspeed-live.md.
#   fp16-nvme         fp16, optimizer on NVMe, a model whose sub-group is swapped (3.2 M elements)
#   fp16-nvme-small   fp16, optimizer on NVMe, a model whose sub-group stays in memory (83 K)
#   bf16-nvme         bf16, optimizer on NVMe, swapped
#   fp16-cpu          fp16, optimizer on the CPU
#   bf16-cpu          bf16, optimizer on the CPU
#   bf16-nvme-fresh-optimizer   bf16-nvme resumed with load_optimizer_states=False
#   bf16-nvme-module-only       bf16-nvme resumed with load_module_only=True
#   fp16-nvme-copied-swap       fp16-nvme resumed with the saving job's swap files copied into
#                               the new job's NVMe path (the seed report's workaround)
#   bf16-nvme-copied-swap       the same, bf16
#   fp16-nvme-vs-cpu  DeepSpeed against itself: the optimizer on the CPU and on NVMe (twice), the
#                     large model, PAIR_STEPS (6) steps, the states after steps 1, 2, 5 (run_pair)
#   bf16-nvme-vs-cpu  the same, bf16
#   fp16-cpu-module-only        fp16-cpu (small model) resumed with load_module_only=True
#   fp16-cpu-fresh-optimizer-tag
#                     fp16-cpu (small model) saved at steps 5 and 10 (`latest` names 10), resumed
#                     from the tag of step 5 with load_optimizer_states=False; the state right
#                     after the load is compared with the saving run's at 5 and at 10
# On the CPU machine (scripts/deepspeed_live/cpu-env.sh sourced) the bf16 cases run; the fp16
# ones fail there (DeepSpeed's CPU accelerator has no fp16).
# env PYTHON (python3: one with PyTorch), STEPS (20), K (10), SEED_CONFIG (tests/data/seed_ds_config.json), ZEROSIM (build-gpu/tools/zerosim),
# PROCESS_SECONDS (180: one DeepSpeed process's limit; 10 s before it, every thread's stack is printed),
# CASES_AT_ONCE (every case: how many run side by side), OMP_NUM_THREADS (4: each DeepSpeed
# process's CPU Adam and PyTorch threads; 16 each, the machine's cores, starved the NVMe swapper's
# I/O threads when cases ran side by side)
set -uo pipefail
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
if [ $# -lt 1 ] || [ -z "$1" ]; then
  echo "usage: $0 OUT_DIR [CASE...]" >&2
  exit 2
fi
out=$1
shift
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(fp16-nvme fp16-nvme-small bf16-nvme fp16-cpu bf16-cpu bf16-nvme-fresh-optimizer
                                bf16-nvme-module-only fp16-nvme-copied-swap bf16-nvme-copied-swap
                                fp16-cpu-module-only fp16-cpu-fresh-optimizer-tag fp16-nvme-vs-cpu bf16-nvme-vs-cpu)
steps=${STEPS:-20}
k=${K:-10}
root=$(cd "$(dirname "$0")/../.." && pwd)
seed_config=${SEED_CONFIG:-$root/tests/data/seed_ds_config.json}
zerosim=${ZEROSIM:-$root/build-gpu/tools/zerosim}
here=$root/scripts/deepspeed_live
python=${PYTHON:-python3}
[ -f "$seed_config" ] || { echo "run_on_gpu: no DeepSpeed config $seed_config" >&2; exit 2; }
[ -x "$zerosim" ] || { echo "run_on_gpu: no zerosim binary $zerosim" >&2; exit 2; }
# zerosim follows the release's behaviour where releases differ (ds-env.sh names it).
release=${DEEPSPEED_VERSION:?run_on_gpu: DEEPSPEED_VERSION is not set: source .device-deps/deepspeed/ds-env.sh first}
mkdir -p "$out"
out=$(cd "$out" && pwd)
scratch=${SCRATCH:-/tmp/deepspeed-live-runs}
rm -rf "$scratch"
mkdir -p "$scratch"

# ds PORT NAME ARGS...: one DeepSpeed process (its rendezvous on PORT), its output in
# OUT/NAME.log, ended after PROCESS_SECONDS (180) if it hangs.
ds() {
  local port=$1 name=$2
  shift 2
  MASTER_PORT=$port DS_TRAIN_DUMP_SECONDS=$((${PROCESS_SECONDS:-180} - 10)) timeout "${PROCESS_SECONDS:-180}" "$python" "$here/ds_train.py" "$@" > "$out/$name.log" 2>&1
  local status=$?
  [ $status -eq 0 ] || { echo "== $name failed ($status):"; grep -v "INFO" "$out/$name.log" | tail -6; }
  return $status
}

# export_run NAME PRECISION OFFLOAD MODEL STEPS: zerosim trains the case's run with the seed's
# config and DeepSpeed's numerics of the carried release, and exports it to SCRATCH/NAME/export.
export_run() {
  local name=$1 precision=$2 offload=$3 model=$4 run_steps=$5
  mkdir -p "$scratch/$name"
  "$zerosim" train --config "$seed_config" --precision "$precision" --steps "$run_steps" --model "$model" \
    --set zerosim.numerics=deepspeed --set zerosim.deepspeed_release="$release" \
    --set zero_optimization.offload_optimizer.device="$offload" \
    --set zero_optimization.offload_optimizer.nvme_path="$scratch/$name/zerosim-swap" --run-id "$name" \
    --export-run "$scratch/$name/export" > "$out/$name.zerosim.log" 2>&1 ||
    { echo "== $name: zerosim train failed"; tail -5 "$out/$name.zerosim.log"; return 1; }
}

# run_case INDEX NAME PRECISION OFFLOAD MODEL [LOAD_FLAG...]; env save_flags (more flags of the
# saving process), resume_at (the saved step the resume loads: K), compare_at (the saving run's
# states the loaded one is compared with: K)
run_case() {
  local index=$1 name=$2 precision=$3 offload=$4 model=$5
  shift 5
  local load_flags=("$@")
  local extra_save_flags=(${save_flags:-})
  local compare_steps=(${compare_at:-$k})
  local export=$scratch/$name/export
  local port=$((29600 + 10 * index))
  export_run "$name" "$precision" "$offload" "$model" "$steps" || return 1
  ds $((port + 1)) "$name.uninterrupted" "$export" "$seed_config" "$scratch/$name/uninterrupted" --offload "$offload" \
    --nvme-path "$scratch/$name/swap-uninterrupted" &
  local first=$!
  ds $((port + 2)) "$name.save" "$export" "$seed_config" "$scratch/$name/save" --offload "$offload" \
    --nvme-path "$scratch/$name/swap-save" --save-at "$k" --ckpt "$scratch/$name/ckpt" "${extra_save_flags[@]}" ||
    { wait $first; return 1; }
  if [ "${resume_swap:-}" = copy ]; then
    # The seed report's workaround: the swap files of the saving job copied by hand into the
    # resuming job's NVMe path (here after the saving process ended).
    cp -a "$scratch/$name/swap-save" "$scratch/$name/swap-resume"
  fi
  # The resume: a new process, a swap folder of its own (a new job on another node). PyTorch 2.6
  # made torch.load's weights_only default True, and DeepSpeed 0.14.5's checkpoints pickle its
  # own classes (ZeroStageEnum): its load_checkpoint fails with an UnpicklingError on this
  # PyTorch unless PyTorch's own switch turns the old default back on.
  TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 ds $((port + 3)) "$name.resume" "$export" "$seed_config" "$scratch/$name/resume" --offload "$offload" \
    --nvme-path "$scratch/$name/swap-resume" --resume "$scratch/$name/ckpt" "${load_flags[@]}"
  local resumed=$?
  wait $first || return 1
  # DeepSpeed's uninterrupted run against zerosim's, whatever became of the resume.
  "$python" "$here/ds_compare.py" numbers "$export" "$scratch/$name/uninterrupted" "$out/$name.numbers.json" \
    > "$out/$name.numbers.txt" 2>&1 || { tail -5 "$out/$name.numbers.txt"; return 1; }
  ls -R "$scratch/$name/ckpt" > "$out/$name.ckpt-files.txt" 2>&1
  if [ $resumed -ne 0 ]; then
    { echo "the resume failed (exit status $resumed); its last lines:"; grep -v "INFO" "$out/$name.resume.log" | tail -25; } \
      > "$out/$name.resume.txt"
    return 1
  fi
  local at report
  for at in "${compare_steps[@]}"; do
    report=$name.resume
    [ "$at" = "$k" ] || report=$name.resume-vs-step-$at
    "$python" "$here/ds_compare.py" resume "$scratch/$name/uninterrupted" "$scratch/$name/save" "$scratch/$name/resume" "$at" \
      "$out/$report.json" > "$out/$report.txt" 2>&1 || { tail -5 "$out/$report.txt"; return 1; }
  done
  cp "$scratch/$name/resume/ds_config.json" "$out/$name.ds_config.json"
  echo "== $name done"
}

# run_pair INDEX NAME PRECISION MODEL: the same export trained by DeepSpeed three times,
# uninterrupted, for PAIR_STEPS steps (6), writing the state after steps 1, 2 and 5 and at the end: the
# optimizer on the CPU, on NVMe, and on NVMe again. The CPU and NVMe paths run the same CPU Adam on
# the same gradients, so the runs should agree bit for bit; the second NVMe run tells a
# difference that repeats from one that does not.
run_pair() {
  local index=$1 name=$2 precision=$3 model=$4
  local export=$scratch/$name/export
  local port=$((29600 + 10 * index))
  export_run "$name" "$precision" cpu "$model" "${PAIR_STEPS:-6}" || return 1
  ds $((port + 1)) "$name.cpu" "$export" "$seed_config" "$scratch/$name/cpu" --offload cpu --capture-at 1,2,5 &
  local cpu=$!
  ds $((port + 2)) "$name.nvme" "$export" "$seed_config" "$scratch/$name/nvme" --offload nvme \
    --nvme-path "$scratch/$name/swap-nvme" --capture-at 1,2,5 &
  local nvme=$!
  ds $((port + 3)) "$name.nvme-again" "$export" "$seed_config" "$scratch/$name/nvme-again" --offload nvme \
    --nvme-path "$scratch/$name/swap-nvme-again" --capture-at 1,2,5 || { wait $cpu $nvme; return 1; }
  wait $cpu || { wait $nvme; return 1; }
  wait $nvme || return 1
  "$python" "$here/ds_compare.py" pair "$scratch/$name/cpu" "$scratch/$name/nvme" 1,2,5,final "$out/$name.json" \
    > "$out/$name.txt" 2>&1 || { tail -5 "$out/$name.txt"; return 1; }
  "$python" "$here/ds_compare.py" pair "$scratch/$name/nvme" "$scratch/$name/nvme-again" 1,2,5,final \
    "$out/$name.nvme-again.json" > "$out/$name.nvme-again.txt" 2>&1 || { tail -5 "$out/$name.nvme-again.txt"; return 1; }
  echo "== $name done"
}

big=512,2048,1024,10
small=64,256,256,10
started=$SECONDS
# The ops build just in time once per machine: first, alone.
"$python" - <<'PY' > "$out/ops-build.log" 2>&1 || { echo "== the ops did not build"; tail -30 "$out/ops-build.log"; exit 1; }
import os, time
if os.environ.get("DS_ACCELERATOR") == "cpu":
    import torch_compat  # noqa: F401 (DeepSpeed on the CPU machine: cpu-env.sh)
import deepspeed
if os.environ.get("DS_ACCELERATOR") == "cpu":
    import cpu_aio  # noqa: F401
from deepspeed.ops.op_builder import CPUAdamBuilder, AsyncIOBuilder
for builder in (CPUAdamBuilder(), AsyncIOBuilder()):
    t = time.time()
    print(builder.name, "compatible:", builder.is_compatible(verbose=True), flush=True)
    builder.load()
    print(builder.name, f"built and loaded in {time.time() - t:.1f} s", flush=True)
print("deepspeed", deepspeed.__version__)
PY
cat "$out/ops-build.log" | grep -E "built and loaded|compatible|^deepspeed"
index=0
at_once=${CASES_AT_ONCE:-${#cases[@]}}
[[ "$at_once" =~ ^[1-9][0-9]*$ ]] || { echo "run_on_gpu: CASES_AT_ONCE must be a positive integer, not '$at_once'" >&2; exit 2; }
for case in "${cases[@]}"; do
  index=$((index + 1))
  # At most CASES_AT_ONCE cases side by side (the swapped NVMe cases share the machine's disk).
  while [ "$(jobs -rp | wc -l)" -ge "$at_once" ]; do wait -n; done
  case $case in
    fp16-nvme) run_case $index "$case" fp16 nvme $big & ;;
    fp16-nvme-small) run_case $index "$case" fp16 nvme $small & ;;
    bf16-nvme) run_case $index "$case" bf16 nvme $big & ;;
    fp16-cpu) run_case $index "$case" fp16 cpu $big & ;;
    bf16-cpu) run_case $index "$case" bf16 cpu $big & ;;
    bf16-nvme-fresh-optimizer) run_case $index "$case" bf16 nvme $big --load-optimizer-states 0 & ;;
    bf16-nvme-module-only) run_case $index "$case" bf16 nvme $big --load-module-only 1 & ;;
    fp16-nvme-copied-swap) resume_swap=copy run_case $index "$case" fp16 nvme $big & ;;
    bf16-nvme-copied-swap) resume_swap=copy run_case $index "$case" bf16 nvme $big & ;;
    fp16-nvme-vs-cpu) run_pair $index "$case" fp16 $big & ;;
    bf16-nvme-vs-cpu) run_pair $index "$case" bf16 $big & ;;
    fp16-cpu-module-only) run_case $index "$case" fp16 cpu $small --load-module-only 1 & ;;
    fp16-cpu-fresh-optimizer-tag)
      save_flags="--save-also 5 --capture-at 5" compare_at="5 $k" \
        run_case $index "$case" fp16 cpu $small --tag global_step5 --load-optimizer-states 0 & ;;
    *) echo "run_on_gpu: unknown case $case" >&2; exit 2 ;;
  esac
done
wait
echo "all cases in $((SECONDS - started)) s"
