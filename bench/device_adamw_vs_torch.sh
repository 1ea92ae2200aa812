#!/usr/bin/env bash
# On the GPU machine: zerosim's device AdamW beside torch.optim.AdamW(fused=True) on the same
# sizes and the device-to-device copy bandwidth, in one run; then the CPU AdamW kernel beside
# torch's fused CPU AdamW on the host's cores.
#   bench/device_adamw_vs_torch.sh BUILD_DIR [PARAMS] [CPU_PARAMS] [THREADS]
set -euo pipefail
build=${1:?usage: device_adamw_vs_torch.sh BUILD_DIR [PARAMS] [CPU_PARAMS] [THREADS]}
params=${2:-268435456}
cpu_params=${3:-67108864}
threads=${4:-$(nproc)}
echo "== device: zerosim fused AdamW ($params fp32 parameters), best of 10"
"$build/bench/device_adamw_bench" --params "$params" --tensors 1
"$build/bench/device_adamw_bench" --params "$params" --tensors 64
echo "== device: torch.optim.AdamW(fused=True), same sizes, best of 10"
python3 - "$params" <<'PY'
import sys, json, torch
n = int(sys.argv[1])
for tensors in (1, 64):
    per = n // tensors
    params = [torch.nn.Parameter(torch.randn(per if i < tensors - 1 else n - per * (tensors - 1), device="cuda")) for i in range(tensors)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, fused=True)
    opt.step(); torch.cuda.synchronize()
    best = 1e30
    for _ in range(10):
        start = torch.cuda.Event(enable_timing=True); stop = torch.cuda.Event(enable_timing=True)
        start.record(); opt.step(); stop.record(); torch.cuda.synchronize()
        best = min(best, start.elapsed_time(stop))
    rate = n / (best * 1e-3)
    print(json.dumps({"torch": torch.__version__, "tensors": tensors, "adam_ms": round(best, 3),
                      "adam_gparams_per_s": round(rate / 1e9, 2), "adam_tb_per_s_at_28b": round(rate * 28 / 1e12, 3)}))
    del opt, params
    torch.cuda.empty_cache()
PY
echo "== host: zerosim CPU AdamW ($cpu_params parameters, $threads threads) beside torch fused CPU AdamW"
"$build/bench/adamw_bench" --params "$cpu_params" --threads "$threads" --repetitions 5
python3 - "$cpu_params" "$threads" <<'PY'
import sys, json, time, torch
n, threads = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
p = torch.nn.Parameter(torch.randn(n)); p.grad = torch.randn(n)
opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, fused=True)
opt.step()
best = 1e30
for _ in range(5):
    t = time.perf_counter(); opt.step(); best = min(best, time.perf_counter() - t)
print(json.dumps({"torch_cpu_fused_adamw_gparams_per_s": round(n / best / 1e9, 3), "threads": threads}))
PY
