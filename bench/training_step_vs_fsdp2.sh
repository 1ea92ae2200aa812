#!/usr/bin/env bash
# On the GPU machine: a training step of the same MLP on W GPUs through zerosim --device cuda
# beside PyTorch FSDP2 (bench/fsdp2_step.py), same model, per-rank micro-batch and dtype, in one
# run (zerosim in both --device cuda and cuda-fast); prints the JSON lines and the ratios FSDP2
# time / zerosim time (>= 1.0: zerosim faster).
#   bench/training_step_vs_fsdp2.sh BUILD_DIR [W] [MODEL] [MICRO_BATCH] [PRECISION]
set -euo pipefail
build=${1:?usage: training_step_vs_fsdp2.sh BUILD_DIR [W] [MODEL] [MICRO_BATCH] [PRECISION]}
world=${2:-2}
model=${3:-1024,4096,4096,1024}
micro=${4:-64}
precision=${5:-bf16}
here=$(dirname "$0")
ours=$("$build/bench/training_step_bench" --device cuda --world-size "$world" --model "$model" \
       --micro-batch "$micro" --steps 8 --precision "$precision")
echo "$ours"
fast=$("$build/bench/training_step_bench" --device cuda-fast --world-size "$world" --model "$model" \
       --micro-batch "$micro" --steps 8 --precision "$precision")
echo "$fast"
peer=$(NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node "$world" "$here/fsdp2_step.py" \
       --model "$model" --micro-batch "$micro" --precision "$precision" 2>/dev/null | grep '^{')
echo "$peer"
python3 - "$ours" "$fast" "$peer" <<'PY'
import json, sys
ours, fast, peer = (json.loads(a) for a in sys.argv[1:4])
p = peer['step_ms_median']
print(f"W={ours['world_size']} model {ours['model']} {ours['precision']} global batch {ours['global_batch']}: "
      f"FSDP2 {p:.2f} ms/step; zerosim cuda {ours['step_ms_median']:.2f} ms/step (optimizer {ours['optimizer_ms_median']:.2f}), "
      f"ratio {p / ours['step_ms_median']:.3f}; cuda-fast {fast['step_ms_median']:.2f} ms/step "
      f"(optimizer {fast['optimizer_ms_median']:.2f}), ratio {p / fast['step_ms_median']:.3f}")
PY
