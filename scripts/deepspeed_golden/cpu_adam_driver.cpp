// Throwaway driver for DeepSpeed's CPU Adam (csrc/adam/cpu_adam_impl.cpp and
// csrc/includes/cpu_adam.h, compiled from a DeepSpeed checkout with DeepSpeed's own flags;
// see cpu_adam_golden.py). It is not part of zerosim and only prints numbers.
//
// It calls what the Python side calls: create_adam_optimizer once, then ds_adam_step (the
// adam_update binding) per step, on the stub fp32 tensors of torch_stub/. To read the
// Adam_Optimizer's per-step scalars it compiles cpu_adam.h with `private` defined as
// `public` (the members' layout is unchanged; nothing else relies on it).
//
// Python floats reach the C++ `float` parameters through pybind11, which rounds the double
// to nearest: the driver takes decimal strings, reads them as double, and casts.
//
// Modes (one line "name value" per output item; 32-bit values as 8 hex digits of their bits):
//   scalars B1 B2 LR BIAS_CORRECTION T
//   restart B1 B2 LR STEP
//   elements SEED N ADAMW WEIGHT_DECAY B1 B2 BIAS_CORRECTION GRAD_SCALE_LOG2 STEPS

// Everything cpu_adam.h includes comes first, so only DeepSpeed's class sees the #define.
#include <torch/extension.h>
#include <cassert>
#include <cmath>
#include <cpuid.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <immintrin.h>
#include <stdio.h>
#include <string>
#include <vector>
#include <x86intrin.h>
#define private public
#include "cpu_adam.h"
#undef private

namespace {

constexpr float kEps = 1e-8f;  // DeepSpeedCPUAdam's default eps, as pybind11 passes it

float arg_float(const char* s) { return static_cast<float>(std::strtod(s, nullptr)); }
uint64_t arg_u64(const char* s) { return std::strtoull(s, nullptr, 10); }
bool arg_bool(const char* s) { return std::string(s) == "1"; }

uint32_t bits(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

std::string hex(const float* v, size_t n)
{
    std::string out;
    char buf[9];
    for (size_t i = 0; i < n; ++i) {
        std::snprintf(buf, sizeof buf, "%08x", bits(v[i]));
        out += buf;
    }
    return out;
}

void print(const char* name, const std::vector<float>& v)
{
    std::printf("%s %s\n", name, hex(v.data(), v.size()).c_str());
}

// The documented input generator (tests/data/deepspeed/README.md); a zerosim test
// recomputes it, so it must stay exactly this.
uint64_t splitmix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float input_value(uint64_t seed, uint64_t step, uint64_t i, int scale_log2)
{
    uint64_t x = splitmix64(seed * 1000003ull + step * 65537ull + i);
    int64_t m = static_cast<int64_t>(x >> 40) - (int64_t(1) << 23);  // [-2^23, 2^23): exact in fp32
    return std::ldexp(static_cast<float>(m), scale_log2 - 23);
}

float lr_at(uint64_t step) { return static_cast<float>(0.001 * static_cast<double>(step % 7 + 1) / 7.0); }

void print_state(const Adam_Optimizer& opt, const char* suffix)
{
    std::printf("betta1_t%s %08x\n", suffix, bits(opt._betta1_t));
    std::printf("betta2_t%s %08x\n", suffix, bits(opt._betta2_t));
    std::printf("bias_correction1%s %08x\n", suffix, bits(opt._bias_correction1));
    std::printf("bias_correction2%s %08x\n", suffix, bits(opt._bias_correction2));
}

int scalars(char** a)
{
    float b1 = arg_float(a[0]), b2 = arg_float(a[1]), lr = arg_float(a[2]);
    bool bias_correction = arg_bool(a[3]);
    uint64_t steps = arg_u64(a[4]);
    // create_adam_optimizer's construction, then ds_adam_step's two calls per step.
    Adam_Optimizer opt(lr, b1, b2, kEps, 0.0f, true);
    std::vector<float> b1t, b2t, bc1, bc2, step_size;
    for (uint64_t step = 1; step <= steps; ++step) {
        opt.IncrementStep(step, b1, b2);
        opt.update_state(lr, kEps, 0.0f, bias_correction);
        b1t.push_back(opt._betta1_t);
        b2t.push_back(opt._betta2_t);
        bc1.push_back(opt._bias_correction1);
        bc2.push_back(opt._bias_correction2);
        step_size.push_back(-1 * opt._alpha / opt._bias_correction1);  // as Step_AVX / Step_1
    }
    print("betta1_t", b1t);
    print("betta2_t", b2t);
    print("bias_correction1", bc1);
    print("bias_correction2", bc2);
    print("step_size", step_size);
    return 0;
}

int restart(char** a)
{
    float b1 = arg_float(a[0]), b2 = arg_float(a[1]), lr = arg_float(a[2]);
    Adam_Optimizer opt(lr, b1, b2, kEps, 0.0f, true);
    opt.IncrementStep(arg_u64(a[3]), b1, b2);
    opt.update_state(lr, kEps, 0.0f, true);
    print_state(opt, "");
    return 0;
}

struct AdamBuffers {
    std::vector<float> p, g, m, v;
    explicit AdamBuffers(size_t n) : p(n), g(n), m(n), v(n) {}
};

void adam_step(int id, uint64_t step, float lr, float b1, float b2, float wd, bool bc, float* p, float* g,
               float* m, float* v, size_t n)
{
    torch::Tensor tp(p, n), tg(g, n), tm(m, n), tv(v, n);
    ds_adam_step(id, step, lr, b1, b2, kEps, wd, bc, tp, tg, tm, tv);
}

int elements(char** a)
{
    uint64_t seed = arg_u64(a[0]);
    size_t n = arg_u64(a[1]);
    bool adamw = arg_bool(a[2]);
    float wd = arg_float(a[3]), b1 = arg_float(a[4]), b2 = arg_float(a[5]);
    bool bc = arg_bool(a[6]);
    int grad_scale_log2 = std::atoi(a[7]);
    uint64_t steps = arg_u64(a[8]);

    // Three optimizers on the same numbers: DeepSpeed's own split of the tensor (id 0);
    // the tensor zero-padded to a multiple of SIMD_WIDTH, so every element goes through
    // the AVX body (id 1); and one element per call, so every element goes through the
    // scalar tail (id 2). Comparing 1 and 2 tells whether the tail rounds differently.
    size_t padded = (n + SIMD_WIDTH - 1) / SIMD_WIDTH * SIMD_WIDTH;
    AdamBuffers real(n), avx(padded), tail(n);
    for (size_t i = 0; i < n; ++i) real.p[i] = avx.p[i] = tail.p[i] = input_value(seed, 0, i, 0);
    for (int id = 0; id < 3; ++id) create_adam_optimizer(id, lr_at(1), b1, b2, kEps, wd, adamw, false);

    std::vector<float> lrs, grads_step1, params_step1;
    uint64_t first_difference_step = 0;
    for (uint64_t step = 1; step <= steps; ++step) {
        float lr = lr_at(step);
        lrs.push_back(lr);
        for (size_t i = 0; i < n; ++i)
            real.g[i] = avx.g[i] = tail.g[i] = input_value(seed, step, i, grad_scale_log2);
        if (step == 1) grads_step1 = real.g;
        adam_step(0, step, lr, b1, b2, wd, bc, real.p.data(), real.g.data(), real.m.data(), real.v.data(), n);
        adam_step(1, step, lr, b1, b2, wd, bc, avx.p.data(), avx.g.data(), avx.m.data(), avx.v.data(), padded);
        for (size_t i = 0; i < n; ++i)
            adam_step(2, step, lr, b1, b2, wd, bc, &tail.p[i], &tail.g[i], &tail.m[i], &tail.v[i], 1);
        if (step == 1) params_step1 = real.p;
        if (first_difference_step == 0 &&
            (std::memcmp(avx.p.data(), tail.p.data(), n * sizeof(float)) != 0 ||
             std::memcmp(avx.m.data(), tail.m.data(), n * sizeof(float)) != 0 ||
             std::memcmp(avx.v.data(), tail.v.data(), n * sizeof(float)) != 0))
            first_difference_step = step;
    }

    // Step_8 -> Step_4 -> Step_1: each hands on what its AVX span does not cover.
    size_t avx8 = ROUND_DOWN(n, SIMD_WIDTH * 8);
    size_t avx4 = avx8 + ROUND_DOWN(n - avx8, SIMD_WIDTH * 4);
    size_t avx1 = avx4 + ROUND_DOWN(n - avx4, SIMD_WIDTH);
    size_t mismatched_path = 0, differing = 0;
    for (size_t i = 0; i < n; ++i) {
        const AdamBuffers& expect = i < avx1 ? avx : tail;
        bool same_as_expected = bits(real.p[i]) == bits(expect.p[i]) && bits(real.m[i]) == bits(expect.m[i]) &&
                                bits(real.v[i]) == bits(expect.v[i]);
        mismatched_path += !same_as_expected;
        differing += bits(avx.p[i]) != bits(tail.p[i]) || bits(avx.m[i]) != bits(tail.m[i]) ||
                     bits(avx.v[i]) != bits(tail.v[i]);
    }
    std::printf("simd_width %d\n", SIMD_WIDTH);
    std::printf("avx_span8_end %zu\navx_span4_end %zu\navx_span1_end %zu\n", avx8, avx4, avx1);
    std::printf("path_mismatches %zu\n", mismatched_path);
    std::printf("avx_vs_scalar_differing_elements %zu\n", differing);
    std::printf("avx_vs_scalar_first_difference_step %llu\n", (unsigned long long)first_difference_step);
    print("lrs", lrs);
    std::vector<float> initial(n);
    for (size_t i = 0; i < n; ++i) initial[i] = input_value(seed, 0, i, 0);
    print("initial_params", initial);
    print("grads_step1", grads_step1);
    print("params_step1", params_step1);
    print("params", real.p);
    print("exp_avg", real.m);
    print("exp_avg_sq", real.v);
    return 0;
}

}  // namespace

int main(int argc, char** argv)
{
    std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "scalars" && argc == 7) return scalars(argv + 2);
    if (mode == "restart" && argc == 6) return restart(argv + 2);
    if (mode == "elements" && argc == 11) return elements(argv + 2);
    std::fprintf(stderr, "usage: see the comment at the top of cpu_adam_driver.cpp\n");
    return 2;
}
