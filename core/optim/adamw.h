// AdamW / Adam-L2 update over flat fp32 arrays, with DeepSpeedCPUAdam's arithmetic
// (docs/deepspeed-semantics.md §3.2) and one rounding policy shared by every ISA path.
//
// Promise: for the same inputs, adam_update() writes the same bits whichever SimdPath runs
// it (scalar, AVX2 or AVX-512), however the array is split into chunks (the update is
// element-wise), and whether the step scalars were computed in an uninterrupted run or
// fresh after a resume. The determinism contract (docs/design.md) needs all three: the ISA,
// the thread count and a save/kill/resume must never change a bit.
//
// Per element, in this order (every line is the exact op sequence, fp32 throughout):
//   g  = g_in * grad_multiplier                 one multiply (unscale + clip, §3.5)
//   g  = fma(p, weight_decay, g)                L2 mode only, weight_decay > 0
//   m  = m * beta1
//   m  = fma(g, one_minus_beta1, m)
//   gg = g * g                                  one multiply, rounded to fp32
//   v  = v * beta2
//   v  = fma(gg, one_minus_beta2, v)
//   d  = fma(sqrt(v), bias_correction2_rsqrt, epsilon)   sqrt correctly rounded
//   u  = m / d                                  IEEE division (no reciprocal estimate)
//   p  = fma(p, decoupled_decay_factor, p)      AdamW mode only, weight_decay > 0
//   p  = fma(u, step_size, p)
// FMA policy: every "a*b + c" of DeepSpeed's list is ONE fused multiply-add with a single
// rounding, in every path: std::fmaf in scalar code, _mm256_fmadd_ps / _mm512_fmadd_ps in
// SIMD. A fused op and sqrt/div are correctly rounded by IEEE 754, so the paths cannot
// differ. (DeepSpeed's own scalar tail is mul+add, so its tail and body may disagree; ours
// do not.) The project builds with -ffp-contract=off so that the compiler never fuses the
// plain multiplies above behind our back.
//
// Speed: the AVX-512 and AVX2 paths are memory-bound (28 B per parameter; see
// bench/adamw_bench.cpp). kScalar is the portable reference: without -mfma, std::fmaf is a
// libm call (~0.15 G params/s), and it is only chosen where AVX2+FMA is absent.
//
// Limits of the promise: with the default MXCSR (no flush-to-zero, no denormals-are-zero);
// for NaN inputs the result is NaN in every path but the NaN payload may differ, because
// x86 propagates the payload of whichever operand the instruction form lists first.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace zerosim {

// DeepSpeedCPUAdam's knobs. Floats, because DeepSpeed hands them to its C++ kernel as
// floats: the engine casts the scheduler's double lr to float once, here.
struct AdamHyperparameters {
  float learning_rate = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;
  bool adamw_mode = true;        // true: decoupled decay (AdamW); false: L2 added to the gradient
  bool bias_correction = true;
};

// Rejects what DeepSpeed's math cannot run: betas outside [0, 1), negative or non-finite
// lr / epsilon / weight_decay. The message names the field and the value.
Status validate_adam_hyperparameters(const AdamHyperparameters& hyperparameters);

// Which of the two decay terms (if any) the kernel applies; chosen once per step.
enum class WeightDecayMode { kNone, kL2, kDecoupled };

// Everything the per-element loop needs for one step, derived from the hyperparameters and
// the 1-based step index by make_adam_step_scalars(). A pure function of its inputs: the
// same (hyperparameters, step_index) give the same bits in a fresh process, which is what
// makes a resumed run at step t identical to the uninterrupted one. The bits are those of
// DeepSpeedCPUAdam in an uninterrupted run (tests/data/deepspeed/cpu_adam.json holds
// DeepSpeed's own values). DeepSpeed itself does not keep them across a restart: its fresh
// Adam_Optimizer, first called with step t+1, takes float(pow(double(beta), t+1)) and runs
// the product on from there, so its resumed run departs from its uninterrupted one.
struct AdamStepScalars {
  int64_t step_index = 1;                // 1-based, after the increment
  float beta1 = 0.9f;
  float one_minus_beta1 = 0.1f;          // float(1 - beta1), computed in fp32 like DeepSpeed
  float beta2 = 0.999f;
  float one_minus_beta2 = 0.001f;        // float(1 - beta2), computed in fp32
  float epsilon = 1e-8f;
  float bias_correction1 = 1.0f;         // kept for diagnostics; folded into step_size
  float bias_correction2_rsqrt = 1.0f;   // 1 / sqrt(1 - beta2^t)
  float step_size = -1e-3f;              // -lr / bias_correction1
  float l2_weight_decay = 0.0f;          // weight_decay, used when decay_mode == kL2
  float decoupled_decay_factor = 0.0f;   // -lr * weight_decay, used when decay_mode == kDecoupled
  WeightDecayMode decay_mode = WeightDecayMode::kNone;
};

// Bias correction, as DeepSpeed's cpu_adam.h computes it in an uninterrupted run
// (t = step_index >= 1), every operation in fp32:
//   beta1_power = running_beta_power(beta1, t), beta2_power likewise;
//   bias_correction1       = 1.0f - beta1_power
//   bias_correction2_rsqrt = 1.0f / sqrtf(1.0f - beta2_power)
//   with bias_correction = false: bias_correction1 = 1, bias_correction2_rsqrt = 1.
// Then, in fp32 like DeepSpeed's Step(): step_size = (-lr) / bias_correction1,
// decoupled_decay_factor = (-lr) * weight_decay, one_minus_beta = 1.0f - beta.
// Decay mode: kL2 when !adamw_mode and weight_decay > 0; kDecoupled when adamw_mode and
// weight_decay > 0; kNone otherwise (DeepSpeed skips the term entirely when wd == 0).
AdamStepScalars make_adam_step_scalars(const AdamHyperparameters& hyperparameters, int64_t step_index);

// beta^t as DeepSpeedCPUAdam's uninterrupted run holds it: the fp32 running product
// ((1.0f * beta) * beta) ... t times, each multiply rounded to float (its _betta1_t *= _betta1).
// A pure function of (beta, t), so a resumed process recomputes the bits the uninterrupted
// one carried. O(t) until 1 - power rounds to 1 in fp32, after which the bias corrections
// no longer change and the loop stops (t about 17,000 for beta 0.999, 173,000 for 0.9999):
// past that point the value returned is the product at the stopping step. beta in [0, 1).
float running_beta_power(float beta, int64_t step_index);

enum class SimdPath { kScalar, kAvx2, kAvx512 };

// The widest path this CPU runs (AVX-512F, else AVX2+FMA, else scalar).
SimdPath best_simd_path();
// Whether this CPU can run `path` (kScalar always can).
bool simd_path_available(SimdPath path);
// "scalar", "avx2" or "avx512".
const char* simd_path_name(SimdPath path);

// One Adam step over element_count elements, in place on params, exp_avg (m) and
// exp_avg_sq (v); grads is read only. Pointers need no alignment. grad_multiplier is the
// 1/combined_scale of gradient clipping (grad_clip.h); pass 1.0f for none. The arrays must
// not overlap each other. Aborts (ZEROSIM_CHECK) if `path` is not available on this CPU.
void adam_update(SimdPath path, const AdamStepScalars& scalars, float grad_multiplier, float* params,
                 const float* grads, float* exp_avg, float* exp_avg_sq, size_t element_count);

// The same, on best_simd_path().
void adam_update(const AdamStepScalars& scalars, float grad_multiplier, float* params, const float* grads,
                 float* exp_avg, float* exp_avg_sq, size_t element_count);

}  // namespace zerosim
