#!/usr/bin/env bash
# DeepSpeed's own save and resume under zerosim exec's power-loss harness, on the GPU machine
# (docs/deepspeed-live.md): ds_train.py --save-every trains a zerosim export with the seed's
# config, saving every SAVE_EVERY steps into a watched checkpoint directory and resuming from
# its newest tag; exec records the run, builds the crash states (every write kept, every
# pending write dropped) at sampled points and right where each save returned, resumes each and
# judges it against the uninterrupted run's state log. Run from the repository root there, with
# .device-deps carried and both env scripts sourced (.device-deps/on-device.sh, then
# .device-deps/deepspeed/ds-env.sh):
#
#   scripts/deepspeed_live/exec_on_gpu.sh OUT_DIR [OFFLOAD] [MODEL] [PRECISION]
#
#   OFFLOAD nvme (default) or cpu; MODEL 64,256,256,10 (default: a sub-group kept in memory);
#   PRECISION fp16 (default) or bf16
# env STEPS (12), SAVE_EVERY (4), POINTS (2), STATES (2: crash states per point), JOBS (8), RESUME_SECONDS (300), ZEROSIM
# (build-gpu/tools/zerosim), SEED_CONFIG (tests/data/seed_ds_config.json), OMP_NUM_THREADS (2:
# each resume's CPU Adam and PyTorch threads, JOBS resumes side by side)
set -uo pipefail
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
if [ $# -lt 1 ] || [ -z "$1" ]; then
  echo "usage: $0 OUT_DIR [OFFLOAD] [MODEL] [PRECISION]" >&2
  exit 2
fi
out=$1
offload=${2:-nvme}
model=${3:-64,256,256,10}
precision=${4:-fp16}
root=$(cd "$(dirname "$0")/../.." && pwd)
zerosim=${ZEROSIM:-$root/build-gpu/tools/zerosim}
seed_config=${SEED_CONFIG:-$root/tests/data/seed_ds_config.json}
release=${DEEPSPEED_VERSION:?exec_on_gpu: DEEPSPEED_VERSION is not set: source .device-deps/deepspeed/ds-env.sh first}
[ -x "$zerosim" ] || { echo "exec_on_gpu: no zerosim binary $zerosim" >&2; exit 2; }
case $offload in nvme|cpu) ;; *) echo "exec_on_gpu: OFFLOAD must be nvme or cpu, not '$offload'" >&2; exit 2 ;; esac
mkdir -p "$out"
out=$(cd "$out" && pwd)
scratch=${SCRATCH:-/tmp/deepspeed-live-exec}
rm -rf "$scratch"
mkdir -p "$scratch/ckpt"
"$zerosim" train --config "$seed_config" --precision "$precision" --steps "${STEPS:-12}" --model "$model" \
  --set zerosim.numerics=deepspeed --set zerosim.deepspeed_release="$release" \
  --set zero_optimization.offload_optimizer.device="$offload" \
  --set zero_optimization.offload_optimizer.nvme_path="$scratch/zerosim-swap" --run-id exec \
  --export-run "$scratch/export" > "$out/zerosim-export.log" 2>&1 ||
  { echo "exec_on_gpu: zerosim train failed"; tail -5 "$out/zerosim-export.log"; exit 1; }
# DeepSpeed 0.14.5's checkpoints need torch.load's old default on PyTorch 2.6 and later.
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
# torch.distributed's rendezvous store runs on libuv, which sets up io_urings. exec reads an
# event loop's ring and lets it be, but refuses the SQPOLL ring of libuv before 1.49 (its
# submissions are no system calls at all); the store's other backend, which PyTorch's
# USE_LIBUV=0 selects, writes no file either and uses no ring (docs/exec.md).
export USE_LIBUV=${USE_LIBUV:-0}
started=$SECONDS
"$zerosim" exec --watch "$scratch/ckpt" --at-saves --crash-points "${POINTS:-2}" --states-per-point "${STATES:-2}" \
  --jobs "${JOBS:-8}" --timeout "${RESUME_SECONDS:-300}" --work-dir "$out/work" -- \
  "${PYTHON:-python3}" "$root/scripts/deepspeed_live/ds_train.py" "$scratch/export" "$seed_config" "$scratch/out-{pid}" \
  --offload "$offload" --nvme-path "$scratch/swap-{pid}" --save-every "${SAVE_EVERY:-4}" --ckpt "$scratch/ckpt" \
  > "$out/exec.txt" 2>&1
status=$?
echo "exec exit status $status after $((SECONDS - started)) s" >> "$out/exec.txt"
grep -E "^(PASS|FAIL|exec:|exec exit)" "$out/exec.txt" | cut -c1-400
