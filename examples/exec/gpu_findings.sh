#!/usr/bin/env bash
# Third-party training stacks under `zerosim exec` on a GPU machine, as the findings in
# examples/exec/findings/ were made. Each stack is recorded once, then resumed from a seeded
# sample of crash points and from the crash right where each save returned (--at-saves), every
# write kept (state 0) and every pending write dropped (state 1). Each runs two ways: unmodified
# under `--hooks torch` (the hook writes the state log), and with a state log the program writes
# itself (a callback, or a wrapper), to show the same findings both ways.
#
# Usage (from the repository root): examples/exec/gpu_findings.sh ZEROSIM NANOGPT_DIR OUT_DIR [STACK...]
#   ZEROSIM      the zerosim binary
#   NANOGPT_DIR  a checkout of github.com/karpathy/nanoGPT (train.py, model.py, configurator.py);
#                its data/zs/ is generated here
#   OUT_DIR      where each exec's output (STACK.txt) and work directory (STACK-work) go
#   STACK        any of (default: all)
#                  hf-hooks        examples/exec/hf_trainer.py, a Hugging Face Trainer, unmodified
#                  hf-callback     the same with zerosim_state.huggingface.ZerosimCallback
#                  nanogpt-hooks   nanoGPT's train.py itself, unmodified
#                  nanogpt-wrapper nanoGPT's train.py run by examples/exec/nanogpt_run.py (state
#                                  log from an optimizer hook of its own)
#                  dcp-hooks       examples/exec/plain_torch_loop.py --protocol dcp, unmodified
#                  dcp-explicit    examples/exec/torch_trainer.py --mode dcp (zerosim_state.StateLog)
# env POINTS (8), JOBS (8), DEVICE (cuda), STACK_SECONDS (3000: one exec's limit), RESUME_SECONDS (300:
# one resume's limit).
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 ZEROSIM NANOGPT_DIR OUT_DIR [STACK...]" >&2
  exit 2
fi
zerosim=$1
nanogpt_given=$2
out=$3
shift 3
for value in "$zerosim" "$nanogpt_given" "$out"; do
  [ -n "$value" ] || { echo "gpu_findings: an empty argument" >&2; exit 2; }
done
[ -x "$zerosim" ] || { echo "gpu_findings: ZEROSIM '$zerosim' is not executable" >&2; exit 2; }
[ -f "$nanogpt_given/train.py" ] || { echo "gpu_findings: no train.py in NANOGPT_DIR '$nanogpt_given'" >&2; exit 2; }
nanogpt=$(cd "$nanogpt_given" && pwd)
stacks=("$@")
[ ${#stacks[@]} -gt 0 ] || stacks=(hf-hooks hf-callback nanogpt-hooks nanogpt-wrapper dcp-hooks dcp-explicit)
points=${POINTS:-8}
jobs=${JOBS:-8}
device=${DEVICE:-cuda}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
cpu_flag=""
[ "$device" = cuda ] || cpu_flag=--cpu

# exec_stack NAME WATCHED RESUME_COMMAND HOOKS -- COMMAND...: one exec, its output in OUT/NAME.txt.
exec_stack() {
  local name=$1 watched=$2 resume=$3 hooks=$4
  shift 5
  rm -rf "$watched" "$out/$name-work"
  # The checkpoint directory exists before the run, as it does on most machines: every crash state
  # then has it, and exec resumes them side by side (a state without a watched directory resumes
  # alone, one after the other).
  mkdir -p "$watched"
  local hook_flags=()
  [ "$hooks" = hooks ] && hook_flags=(--hooks torch)
  local started=$SECONDS
  set +e
  timeout "${STACK_SECONDS:-3000}" "$zerosim" exec "${hook_flags[@]}" --jobs "$jobs" --at-saves --crash-points "$points" \
    --states-per-point 2 --timeout "${RESUME_SECONDS:-300}" --watch "$watched" --work-dir "$out/$name-work" --resume-command "$resume" -- "$@" > "$out/$name.txt" 2>&1
  echo "exit status $? after $((SECONDS - started)) s" >> "$out/$name.txt"
  set -e
  echo "== $name"
  grep -E "^(PASS|FAIL|exec:|exit status)" "$out/$name.txt" | cut -c1-400
  cp "$out/$name-work/reference.state.jsonl" "$out/$name.reference.state.jsonl" 2>/dev/null || true
}

hf_run="python3 $root/examples/exec/hf_trainer.py --ckpt /tmp/zerosim-hf-ckpt $cpu_flag"
ng_out=/tmp/zerosim-nanogpt-out
ng_args="--dataset=zs --out_dir=$ng_out --n_layer=2 --n_head=2 --n_embd=64 --block_size=32 --batch_size=4 \
--max_iters=12 --eval_interval=4 --eval_iters=2 --log_interval=1 --always_save_checkpoint=True --compile=False \
--dtype=float32 --device=$device --wandb_log=False --gradient_accumulation_steps=1"
# nanoGPT reads configurator.py from the working directory: its own checkout.
ng_train="cd $nanogpt && python3 train.py $ng_args"
ng_wrapped="python3 $root/examples/exec/nanogpt_run.py $nanogpt $ng_args"
for stack in "${stacks[@]}"; do
  case "$stack" in
    hf-hooks)
      exec_stack "$stack" /tmp/zerosim-hf-ckpt "$hf_run --resume" hooks -- $hf_run ;;
    hf-callback)
      exec_stack "$stack" /tmp/zerosim-hf-ckpt "$hf_run --resume --zerosim-callback" no -- $hf_run --zerosim-callback ;;
    nanogpt-hooks)
      python3 "$root/examples/exec/nanogpt_run.py" --make-data "$nanogpt"
      exec_stack "$stack" "$ng_out" "if [ -e $ng_out/ckpt.pt ]; then $ng_train --init_from=resume; else $ng_train; fi" hooks \
        -- sh -c "$ng_train" ;;
    nanogpt-wrapper)
      python3 "$root/examples/exec/nanogpt_run.py" --make-data "$nanogpt"
      exec_stack "$stack" "$ng_out" "if [ -e $ng_out/ckpt.pt ]; then $ng_wrapped --init_from=resume; else $ng_wrapped; fi" no \
        -- $ng_wrapped ;;
    dcp-hooks)
      run="python3 $root/examples/exec/plain_torch_loop.py --ckpt /tmp/zerosim-dcp --protocol dcp"
      exec_stack "$stack" /tmp/zerosim-dcp "$run" hooks -- $run ;;
    dcp-explicit)
      run="python3 $root/examples/exec/torch_trainer.py --ckpt /tmp/zerosim-dcp --mode dcp"
      exec_stack "$stack" /tmp/zerosim-dcp "$run" no -- $run ;;
    *) echo "gpu_findings: unknown stack '$stack'" >&2; exit 2 ;;
  esac
done
