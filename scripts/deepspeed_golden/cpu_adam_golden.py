#!/usr/bin/env python3
"""Golden CPU Adam numbers from DeepSpeed's C++ (csrc/adam/cpu_adam_impl.cpp, cpu_adam.h).

Compiles DeepSpeed's sources from the checkout, with the flags DeepSpeed's op builder uses,
against torch_stub/ (no libtorch), links cpu_adam_driver.cpp, runs it and writes the JSON.
Two more builds are checks, not data: one without <math.h> in the stub (the sqrt overload)
and one with the flags of a JIT build on a machine without CUDA.

Usage: cpu_adam_golden.py DEEPSPEED_SRC OUT_JSON COMMIT
"""

import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True

import dsgolden  # noqa: E402  (after the bytecode switch)

HERE = os.path.dirname(os.path.abspath(__file__))

MAIN_BETAS = (0.9, 0.999)
MAIN_LR = 1e-3
MAIN_STEPS = 20000
OTHER_BETAS = [(0.9, 0.95), (0.9, 0.98), (0.8, 0.9999), (0.5, 0.5)]
OTHER_STEPS = 3000
# lr and bias_correction only enter step_size (and bias_correction=false pins both
# corrections to 1), so these combinations are recorded over a short run.
VARIANT_LRS = (3e-4, 1e-3, 1e-2)
VARIANT_STEPS = 100
RESTART_AFTER = (0, 1, 9, 99, 999, 4999, 19999)
ELEMENT_STEPS = 50
ELEMENT_FIELDS = ("initial_params", "grads_step1", "params_step1", "params", "exp_avg", "exp_avg_sq")
SCALAR_FIELDS = ("betta1_t", "betta2_t", "bias_correction1", "bias_correction2", "step_size")


def simd_flag():
    # op_builder/builder.py simd_width(): AVX-512 if the CPU lists it, else AVX2, else scalar
    # (py-cpuinfo's flags, or lscpu's text when py-cpuinfo is missing; same verdict).
    text = subprocess.run(["lscpu"], check=True, capture_output=True, text=True).stdout.lower()
    if "genuineintel" in text or "authenticamd" in text:
        if "avx512" in text:
            return "-D__AVX512__"
        if "avx2" in text:
            return "-D__AVX256__"
    return "-D__SCALAR__"


def build_flags(simd):
    """Compile flags per build, in the order the compiler sees them.

    "deepspeed_jit_gpu" is a JIT build (CPUAdamBuilder().load()) on a machine with CUDA,
    the ZeRO-Offload setting: torch's cpp_extension puts -fPIC -std=c++17 first, then
    TorchCPUOpBuilder.cxx_args() = CUDAOpBuilder.cxx_args() (-O3 -std=c++17 -g -Wno-reorder)
    + (-L<cuda>/lib64 -lcudart -lcublas: link-only, left out here) + -g + -march=native
    -fopenmp <simd> -D__ENABLE_CUDA__, then jit_load's -UC10_USE_GLOG and, for GPUs newer
    than sm_7x, -DBF16_AVAILABLE. No -ffast-math, no -ffp-contract: GCC's default
    (-ffp-contract=fast) applies.
    "deepspeed_jit_cpu_only": the same without CUDA; TorchCPUOpBuilder then skips
    CUDAOpBuilder.cxx_args(), so there is no -O flag at all (GCC's -O0).
    """
    gpu = ["-fPIC", "-std=c++17", "-O3", "-std=c++17", "-g", "-Wno-reorder", "-g", "-march=native", "-fopenmp",
           simd, "-D__ENABLE_CUDA__", "-UC10_USE_GLOG", "-DBF16_AVAILABLE"]
    return {
        "deepspeed_jit_gpu": gpu,
        "without_math_h": gpu + ["-DZEROSIM_STUB_WITHOUT_MATH_H"],
        "deepspeed_jit_cpu_only": ["-fPIC", "-std=c++17", "-march=native", "-fopenmp", simd, "-D__DISABLE_CUDA__",
                                   "-UC10_USE_GLOG"],
    }


def compile_driver(src, flags, workdir, name):
    dsgolden.ds_path(src, "csrc/includes/simd.h")
    includes = ["-I", os.path.join(HERE, "torch_stub"),
                "-I", os.path.dirname(dsgolden.ds_path(src, "csrc/includes/cpu_adam.h"))]
    impl = dsgolden.ds_path(src, "csrc/adam/cpu_adam_impl.cpp")
    objs = []
    for source in (impl, os.path.join(HERE, "cpu_adam_driver.cpp")):
        obj = os.path.join(workdir, f"{name}_{os.path.basename(source)}.o")
        subprocess.run(["g++"] + flags + includes + ["-c", source, "-o", obj], check=True)
        objs.append(obj)
    exe = os.path.join(workdir, name)
    subprocess.run(["g++", "-fopenmp"] + objs + ["-o", exe], check=True)
    return exe


def run(exe, *args):
    out = subprocess.run([exe] + [str(a) for a in args], check=True, capture_output=True, text=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines())


def scalar_run(exe, betas, lr, bias_correction, steps):
    fields = run(exe, "scalars", betas[0], betas[1], repr(lr), int(bias_correction), steps)
    record = {"beta1": betas[0], "beta2": betas[1], "lr": lr, "bias_correction": bias_correction, "steps": steps}
    record.update({f: fields[f] for f in SCALAR_FIELDS})
    return record


def element_runs():
    runs = []
    for n in (16, 67, 131):
        for adamw in (True, False):
            for weight_decay in (0.0, 0.01):
                runs.append({"n": n, "adamw_mode": adamw, "weight_decay": weight_decay, "betas": [0.9, 0.999],
                             "bias_correction": True, "grad_scale_log2": -4})
    # All three AVX spans plus a 12-element tail.
    runs.append({"n": 300, "adamw_mode": True, "weight_decay": 0.01, "betas": [0.9, 0.999],
                 "bias_correction": True, "grad_scale_log2": -4})
    # Gradients near eps, other betas, no bias correction.
    runs.append({"n": 47, "adamw_mode": True, "weight_decay": 0.01, "betas": [0.9, 0.95],
                 "bias_correction": False, "grad_scale_log2": -27})
    for seed, r in enumerate(runs, start=1):
        r["seed"] = seed
        r["steps"] = ELEMENT_STEPS
        r["eps"] = 1e-8
    return runs


def element_run(exe, r):
    out = run(exe, "elements", r["seed"], r["n"], int(r["adamw_mode"]), repr(r["weight_decay"]), r["betas"][0],
              r["betas"][1], int(r["bias_correction"]), r["grad_scale_log2"], r["steps"])
    if out["path_mismatches"] != "0":
        sys.exit(f"error: element run {r['seed']}: DeepSpeed's split of the tensor is not the one assumed")
    n = r["n"]
    record = dict(r)
    record["avx_ranges"] = {
        "span8": [0, int(out["avx_span8_end"])],
        "span4": [int(out["avx_span8_end"]), int(out["avx_span4_end"])],
        "span1": [int(out["avx_span4_end"]), int(out["avx_span1_end"])],
    }
    record["scalar_tail"] = [int(out["avx_span1_end"]), n]
    record["avx_vs_scalar_differing_elements"] = int(out["avx_vs_scalar_differing_elements"])
    first = int(out["avx_vs_scalar_first_difference_step"])
    record["avx_vs_scalar_first_difference_step"] = first or None
    record["lrs"] = out["lrs"]
    record.update({f: out[f] for f in ELEMENT_FIELDS})
    return record


def differing_words(a, b):
    return sum(a[i:i + 8] != b[i:i + 8] for i in range(0, len(a), 8))


def tool_version(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[0].strip()


def march_native():
    out = subprocess.run(["g++", "-march=native", "-Q", "--help=target"], check=True, capture_output=True,
                         text=True).stdout
    return next(line.split()[1] for line in out.splitlines() if line.strip().startswith("-march="))


def main():
    args = dsgolden.parse_args(__doc__.splitlines()[0])
    simd = simd_flag()
    flags = build_flags(simd)
    with tempfile.TemporaryDirectory(prefix="cpu_adam_golden.") as workdir:
        exes = {name: compile_driver(args.deepspeed_src, f, workdir, name) for name, f in flags.items()}
        exe = exes["deepspeed_jit_gpu"]

        runs = [scalar_run(exe, MAIN_BETAS, MAIN_LR, True, MAIN_STEPS)]
        runs += [scalar_run(exe, betas, MAIN_LR, True, OTHER_STEPS) for betas in OTHER_BETAS]
        for betas in [MAIN_BETAS] + OTHER_BETAS:
            for lr in VARIANT_LRS:
                for bias_correction in (True, False):
                    if lr == MAIN_LR and bias_correction:
                        continue
                    runs.append(scalar_run(exe, betas, lr, bias_correction, VARIANT_STEPS))

        main_run = runs[0]
        restarts = []
        for t in RESTART_AFTER:
            fresh = run(exe, "restart", MAIN_BETAS[0], MAIN_BETAS[1], repr(MAIN_LR), t + 1)
            entry = {"resumed_after_steps": t, "step": t + 1}
            for f in SCALAR_FIELDS[:4]:
                entry[f] = fresh[f]
                entry[f + "_uninterrupted"] = main_run[f][8 * t:8 * t + 8]
            restarts.append(entry)

        elements = [element_run(exe, r) for r in element_runs()]

        checks = {}
        for name in ("without_math_h", "deepspeed_jit_cpu_only"):
            other = scalar_run(exes[name], MAIN_BETAS, MAIN_LR, True, MAIN_STEPS)
            other_elements = [element_run(exes[name], r) for r in element_runs()]
            checks[name] = {
                "flags": flags[name],
                "main_run_differing_steps": {f: differing_words(main_run[f], other[f])
                                             for f in SCALAR_FIELDS},
                "element_runs_differing_elements": [{
                    "seed": a["seed"],
                    "n": a["n"],
                    **{f: differing_words(a[f], b[f])
                       for f in ("params", "exp_avg", "exp_avg_sq")},
                } for a, b in zip(elements, other_elements)],
            }

    dsgolden.write_json(
        args.out_json, {
            "deepspeed_commit": args.commit,
            "generator": "scripts/deepspeed_golden/cpu_adam_golden.py",
            "compiler": tool_version(["g++", "--version"]),
            "march_native": march_native(),
            "compile_flags": flags["deepspeed_jit_gpu"],
            "eps": 1e-8,
            "scalars": runs,
            "after_restart": restarts,
            "elements": elements,
            "sqrt_overload_check": checks["without_math_h"],
            "cpu_only_build_check": checks["deepspeed_jit_cpu_only"],
        })


if __name__ == "__main__":
    main()
