#!/usr/bin/env bash
# On the GPU machine: a training step of a GPT-2-shaped transformer in zerosim's CPU engine (W
# ranks on the host's cores, BATCH / W sequences each) beside the same model, batch and sequence length
# in PyTorch on the CPU (fp32, all threads); and zerosim on one GPU (W = 1, bf16 parameters,
# deterministic kernels and cuda-fast) beside PyTorch on that GPU four ways (FSDP2 in bf16; plain
# PyTorch eager with bf16 parameters; fp32 parameters under bf16 autocast; the same compiled; each
# with fused AdamW), in one run; prints the JSON lines, each zerosim step's split (data, forward,
# backward with exchange, optimizer) and the ratios peer time / zerosim time (>= 1.0: zerosim
# faster); the first JSON line names the host's CPU. CPU_WORLD_SIZE (default: BATCH, one
# sequence a rank) sets the CPU run's ranks, each with BATCH / CPU_WORLD_SIZE sequences;
# THREADS_PER_RANK (default: the cores divided among the ranks) is passed on; PyTorch's CPU run
# gets the same cores (ranks x threads per rank). PYTHON names the peer's interpreter (default
# python3). CPU_ONLY=1 runs the CPU pair alone (a machine without a GPU).
# The peer's model is Hugging Face's GPT-2 where transformers imports, else the same architecture
# in plain torch.nn (--model-code plain); the JSON says which.
#   bench/gpt_step_vs_torch.sh BUILD_DIR [MODEL] [BATCH] [SEQUENCE_LENGTH]
set -euo pipefail
build=${1:?usage: gpt_step_vs_torch.sh BUILD_DIR [MODEL] [BATCH] [SEQUENCE_LENGTH]}
model=${2-gpt:layers=12,embd=768,heads=12,vocab=50257,block=1024}
batch=${3-8}
length=${4-128}
here=$(dirname "$0")
python=${PYTHON:-python3}  # the Python whose torch is the peer
cpu_ranks=${CPU_WORLD_SIZE-$batch}
# A count is digits without a leading zero (bash's arithmetic would read 010 as octal 8).
positive_count() {
  case "$2" in
    ''|*[!0-9]*|0*) echo "$1 must be a positive whole number without leading zeros, got '$2'" >&2; exit 2 ;;
  esac
}
positive_count BATCH "$batch"
positive_count SEQUENCE_LENGTH "$length"
positive_count CPU_WORLD_SIZE "$cpu_ranks"
if [ $(( batch % cpu_ranks )) -ne 0 ]; then
  echo "CPU_WORLD_SIZE $cpu_ranks does not divide the batch of $batch sequences" >&2; exit 2
fi
# The host's CPU, first: the CPU pair's ratio moves between hosts, and this says which one ran.
python3 - <<'PY'
import json, os
first = open('/proc/cpuinfo').read().split('\n\n')[0]
fields = {k.strip(): v.strip() for k, v in (line.split(':', 1) for line in first.splitlines() if ':' in line)}
flags = fields.get('flags', '').split()
print(json.dumps({'host_cpu': fields.get('model name', 'unknown'), 'logical_cpus': os.cpu_count(),
                  'avx512f': 'avx512f' in flags, 'avx2': 'avx2' in flags}))
PY
ours=$("$build/bench/training_step_bench" --device cpu --world-size "$cpu_ranks" --model "$model" --micro-batch $(( batch / cpu_ranks )) \
       --sequence-length "$length" --steps 6 --precision fp32 ${THREADS_PER_RANK:+--threads-per-rank "$THREADS_PER_RANK"})
echo "$ours"
model_code=hf
"$python" -c "import transformers" 2>/dev/null || model_code=plain
threads=$(python3 -c "import json, sys; r = json.loads(sys.argv[1]); print(r['world_size'] * r['threads_per_rank'])" "$ours")
cpu=$("$python" "$here/gpt_step_peer.py" --device cpu --model-code "$model_code" --threads "$threads" --model "$model" \
      --batch "$batch" --sequence-length "$length")
echo "$cpu"
if [ "${CPU_ONLY:-0}" = 1 ]; then
  python3 - "$ours" "$cpu" <<'PY'
import json, sys
ours, cpu = (json.loads(a) for a in sys.argv[1:3])
z = ours['step_ms_median']
print(f"{ours['model']} ({ours['parameters']} parameters), {ours['global_batch']} x {ours['sequence_length']} tokens: "
      f"zerosim CPU (W={ours['world_size']}, {ours['threads_per_rank']} threads per rank) {z:.0f} ms/step; "
      f"PyTorch {cpu['torch']} CPU ({cpu['threads']} threads, {cpu['model_code']} model) {cpu['step_ms_median']:.0f} ms/step, "
      f"ratio {cpu['step_ms_median'] / z:.3f}")
print(f"zerosim cpu step split (ms): data {ours['data_ms_median']:.1f}, forward {ours['forward_ms_median']:.1f}, "
      f"backward and exchange {ours['backward_and_exchange_ms_median']:.1f}, optimizer {ours['optimizer_ms_median']:.1f}, "
      f"other {ours['host_other_ms_median']:.1f}")
PY
  exit 0
fi
ours_cuda=$("$build/bench/training_step_bench" --device cuda --world-size 1 --model "$model" --micro-batch "$batch" \
            --sequence-length "$length" --steps 6 --precision bf16)
echo "$ours_cuda"
ours_fast=$("$build/bench/training_step_bench" --device cuda-fast --world-size 1 --model "$model" --micro-batch "$batch" \
            --sequence-length "$length" --steps 6 --precision bf16)
echo "$ours_fast"
gpu=$(NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node 1 "$here/gpt_step_peer.py" --device cuda \
      --model-code "$model_code" --model "$model" --batch "$batch" --sequence-length "$length" 2>/dev/null | grep '^{')
echo "$gpu"
plain=()
for peer in eager-bf16 autocast autocast-compile; do
  line=$("$python" "$here/gpt_step_peer.py" --device cuda --peer "$peer" --model-code "$model_code" --model "$model" --batch "$batch" \
         --sequence-length "$length" --steps 8 2>/dev/null | grep '^{')
  echo "$line"
  plain+=("$line")
done
python3 - "$ours" "$cpu" "$gpu" "$ours_cuda" "$ours_fast" "${plain[@]}" <<'PY'
import json, sys
ours, cpu, gpu, cuda, fast = (json.loads(a) for a in sys.argv[1:6])
peers = [json.loads(a) for a in sys.argv[6:9]]
z = ours['step_ms_median']
g = gpu['step_ms_median']
print(f"{ours['model']} ({ours['parameters']} parameters), {ours['global_batch']} x {ours['sequence_length']} tokens: "
      f"zerosim CPU (W={ours['world_size']}, {ours['threads_per_rank']} threads per rank) {z:.0f} ms/step; PyTorch CPU ({cpu['threads']} threads) "
      f"{cpu['step_ms_median']:.0f} ms/step, ratio {cpu['step_ms_median'] / z:.3f}")
print(f"one GPU: FSDP2 (bf16) {g:.1f} ms/step; zerosim cuda {cuda['step_ms_median']:.0f} ms/step, ratio "
      f"{g / cuda['step_ms_median']:.4f}; zerosim cuda-fast {fast['step_ms_median']:.0f} ms/step, ratio "
      f"{g / fast['step_ms_median']:.4f}")
for peer in peers:
    p = peer['step_ms_median']
    print(f"one GPU: {peer['engine']} {p:.1f} ms/step; ratio to zerosim cuda {p / cuda['step_ms_median']:.3f}, "
          f"to cuda-fast {p / fast['step_ms_median']:.3f}")
for run in (ours, cuda, fast):
    print(f"zerosim {run['device']} step split (ms): data {run['data_ms_median']:.1f}, forward "
          f"{run['forward_ms_median']:.1f}, backward and exchange {run['backward_and_exchange_ms_median']:.1f}, "
          f"optimizer {run['optimizer_ms_median']:.1f}, other {run['host_other_ms_median']:.1f}")
PY
