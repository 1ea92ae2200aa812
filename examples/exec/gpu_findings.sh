#!/usr/bin/env bash
# The third-party training stacks under `zerosim exec` on a GPU machine, as the findings in
# examples/exec/findings/ were made: a Hugging Face `Trainer` (examples/exec/hf_trainer.py) and
# Karpathy's nanoGPT `train.py`, unmodified (examples/exec/nanogpt_run.py writes its state log
# from outside). Each is recorded once, then resumed from a seeded sample of crash points and
# from the crash right where each save returned (--at-saves), every write kept (state 0) and
# every pending write dropped (state 1).
#
# Usage (from the repository root): examples/exec/gpu_findings.sh ZEROSIM NANOGPT_DIR OUT_DIR
#   ZEROSIM      the zerosim binary
#   NANOGPT_DIR  a checkout of github.com/karpathy/nanoGPT (train.py, model.py, configurator.py);
#                its data/zs/ is generated here
#   OUT_DIR      where each exec's output (hf.txt, nanogpt.txt) and work directory go
# env POINTS (8), JOBS (8), DEVICE (cuda).
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 ZEROSIM NANOGPT_DIR OUT_DIR" >&2
  exit 2
fi
zerosim=$1
nanogpt=$(cd "$2" && pwd)
out=$3
for value in "$zerosim" "$nanogpt" "$out"; do
  [ -n "$value" ] || { echo "gpu_findings: an empty argument" >&2; exit 2; }
done
[ -x "$zerosim" ] || { echo "gpu_findings: ZEROSIM '$zerosim' is not executable" >&2; exit 2; }
[ -f "$nanogpt/train.py" ] || { echo "gpu_findings: no train.py in NANOGPT_DIR '$nanogpt'" >&2; exit 2; }
points=${POINTS:-8}
jobs=${JOBS:-8}
device=${DEVICE:-cuda}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/../.." && pwd)

echo "== Hugging Face Trainer (tiny GPT-2), $(python3 -c 'import transformers; print("transformers", transformers.__version__)')"
hf_ckpt=/tmp/zerosim-hf-ckpt
rm -rf "$hf_ckpt"
cpu_flag=""
[ "$device" = cuda ] || cpu_flag=--cpu
set +e
"$zerosim" exec --jobs "$jobs" --at-saves --crash-points "$points" --states-per-point 2 --timeout 300 \
  --watch "$hf_ckpt" --work-dir "$out/hf-work" \
  --resume-command "python3 $root/examples/exec/hf_trainer.py --ckpt $hf_ckpt --resume $cpu_flag" \
  -- python3 "$root/examples/exec/hf_trainer.py" --ckpt "$hf_ckpt" $cpu_flag > "$out/hf.txt" 2>&1
echo "exit status $?" >> "$out/hf.txt"
set -e
tail -n 6 "$out/hf.txt"

echo "== nanoGPT train.py ($(cat "$nanogpt/COMMIT" 2>/dev/null || echo "commit unknown"))"
python3 "$root/examples/exec/nanogpt_run.py" --make-data "$nanogpt"
ng_out=/tmp/zerosim-nanogpt-out
rm -rf "$ng_out"
args="--dataset=zs --out_dir=$ng_out --n_layer=2 --n_head=2 --n_embd=64 --block_size=32 --batch_size=4 \
--max_iters=12 --eval_interval=4 --eval_iters=2 --log_interval=1 --always_save_checkpoint=True --compile=False \
--dtype=float32 --device=$device --wandb_log=False --gradient_accumulation_steps=1"
run="python3 $root/examples/exec/nanogpt_run.py $nanogpt $args"
set +e
"$zerosim" exec --jobs "$jobs" --at-saves --crash-points "$points" --states-per-point 2 --timeout 300 \
  --watch "$ng_out" --work-dir "$out/nanogpt-work" \
  --resume-command "if [ -e $ng_out/ckpt.pt ]; then $run --init_from=resume; else $run; fi" \
  -- $run > "$out/nanogpt.txt" 2>&1
echo "exit status $?" >> "$out/nanogpt.txt"
set -e
tail -n 6 "$out/nanogpt.txt"
