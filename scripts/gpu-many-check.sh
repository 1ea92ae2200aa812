#!/usr/bin/env bash
# The [gpu-many] resume chain on however many GPUs this machine has (rank r on GPU r mod the
# GPUs, so 8 ranks share 2 GPUs when only 2 are there): train with --device cuda at W = 8 and
# save, resume at 4, then 2, then 4 again, then 8, each leg saving for the next, and compare the
# final digest with the uninterrupted run on the CPU at W = 8 and at W = 1 (deterministic mode:
# the same bits at every world size). Also every leg's own uninterrupted digest at its step.
# Usage: scripts/gpu-many-check.sh BUILD_DIR OUT_DIR. Exit status 0 when every digest agrees.
set -uo pipefail
build=${1:?build directory}
out=${2:?output directory}
zerosim="$build/tools/zerosim"
work=$(mktemp -d /tmp/zerosim-gpu-many-XXXXXX)
export NCCL_NVLS_ENABLE=0
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
common="--model 64,512,256,10 --set train_batch_size=16 --micro-batch-size 2 --json"
digest() { python3 -c 'import json,sys; t=sys.stdin.read(); print(json.loads(t[t.index("{"):])["state_digest"])'; }
status=0
{
  echo "GPUs: $gpus"
  reference_8=$("$zerosim" train $common --steps 12 --world-size 8 --device cpu --run-id reference-8 2>/dev/null | digest)
  reference_1=$("$zerosim" train $common --steps 12 --world-size 1 --device cpu --run-id reference-1 2>/dev/null | digest)
  echo "uninterrupted, CPU: W=8 $reference_8  W=1 $reference_1  $([ "$reference_8" = "$reference_1" ] && echo ok || echo DIFFERS)"
  previous=""
  step=0
  for world_size in 8 4 2 4 8; do
    step=$((step + (world_size == 8 && step == 0 ? 4 : 2)))
    [ $step -gt 12 ] && step=12
    resume=${previous:+--resume $previous}
    directory="$work/leg-$step-w$world_size"
    [ $step -eq 12 ] || save="--save-dir $directory"
    [ $step -eq 12 ] && save=""
    got=$("$zerosim" train $common --steps $step --world-size $world_size --device cuda --run-id leg-$step $resume $save 2>"$work/err" | digest)
    want=$("$zerosim" train $common --steps $step --world-size 1 --device cpu --run-id want-$step 2>/dev/null | digest)
    verdict=ok; [ -n "$got" ] && [ "$got" = "$want" ] || { verdict=DIFFERS; tail -3 "$work/err"; }
    echo "step $step at W=$world_size on cuda${previous:+ (resumed)}: $got  uninterrupted CPU W=1: $want  $verdict"
    previous=$directory
  done
} | tee "$out/gpu-many.txt"
grep -q DIFFERS "$out/gpu-many.txt" && status=1
rm -rf "$work"
echo "gpu-many-check: $([ $status = 0 ] && echo all agree || echo FAILED)"
exit $status
