// The three ISA paths of adam_update(). They are three spellings of the op sequence in
// adamw.h; any edit must change all three together, and optim_test's property test checks
// that they agree bit for bit.
#include "core/optim/adamw.h"

#include <cmath>
#include <cstdint>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ZEROSIM_OPTIM_X86 1
#else
#define ZEROSIM_OPTIM_X86 0
#endif

namespace zerosim {

Status validate_adam_hyperparameters(const AdamHyperparameters& hyperparameters) {
  auto describe = [](const char* field, float value, const char* expected) {
    return invalid_argument(std::string("optimizer.params.") + field + ": expected " + expected + ", found " +
                            std::to_string(value));
  };
  // Written as !(in range) so that a NaN fails every check.
  if (!(hyperparameters.beta1 >= 0.0f && hyperparameters.beta1 < 1.0f))
    return describe("betas[0]", hyperparameters.beta1, "a value in [0, 1)");
  if (!(hyperparameters.beta2 >= 0.0f && hyperparameters.beta2 < 1.0f))
    return describe("betas[1]", hyperparameters.beta2, "a value in [0, 1)");
  if (!(hyperparameters.learning_rate >= 0.0f && std::isfinite(hyperparameters.learning_rate)))
    return describe("lr", hyperparameters.learning_rate, "a finite value >= 0");
  // eps = 0 makes every element whose gradient and moments are zero (partition padding, a
  // dead unit) compute 0/0 = NaN: refused rather than run into silently wrong weights.
  if (!(hyperparameters.epsilon > 0.0f && std::isfinite(hyperparameters.epsilon)))
    return describe("eps", hyperparameters.epsilon, "a finite value > 0 (0 turns zero gradients into NaN)");
  if (!(hyperparameters.weight_decay >= 0.0f && std::isfinite(hyperparameters.weight_decay)))
    return describe("weight_decay", hyperparameters.weight_decay, "a finite value >= 0");
  return Status::ok_status();
}

float running_beta_power(float beta, int64_t step_index) {
  ZEROSIM_CHECK(step_index >= 0, "running_beta_power needs a non-negative step index");
  ZEROSIM_CHECK(beta >= 0.0f && beta < 1.0f, "running_beta_power needs a beta in [0, 1)");
  float power = 1.0f;
  for (int64_t t = 0; t < step_index; ++t) {
    power *= beta;
    // fl(p * beta) <= p for beta < 1, so once 1 - p rounds to 1 it does so at every later
    // step: both bias corrections are exactly 1 from here on, whatever the later products.
    // Stopping here bounds the loop (about 17,000 steps for beta 0.999) without changing a
    // bias correction; the power returned is then not the running product's, but no caller
    // can see the difference through 1 - power.
    if (1.0f - power == 1.0f) break;
  }
  return power;
}

AdamStepScalars make_adam_step_scalars(const AdamHyperparameters& hyperparameters, int64_t step_index) {
  ZEROSIM_CHECK(step_index >= 1, "Adam step_index is 1-based (the count after the increment)");
  AdamStepScalars scalars;
  scalars.step_index = step_index;
  scalars.beta1 = hyperparameters.beta1;
  scalars.beta2 = hyperparameters.beta2;
  scalars.one_minus_beta1 = 1.0f - hyperparameters.beta1;
  scalars.one_minus_beta2 = 1.0f - hyperparameters.beta2;
  scalars.epsilon = hyperparameters.epsilon;
  if (hyperparameters.bias_correction) {
    // fp32 throughout, as update_state() in DeepSpeed's cpu_adam.h: 1 - beta^t in float,
    // sqrt resolved to the float overload (torch/extension.h reaches <math.h> through
    // Python.h), and 1 / that in float.
    const float beta1_power = running_beta_power(hyperparameters.beta1, step_index);
    const float beta2_power = running_beta_power(hyperparameters.beta2, step_index);
    scalars.bias_correction1 = 1.0f - beta1_power;
    scalars.bias_correction2_rsqrt = 1.0f / std::sqrt(1.0f - beta2_power);
  } else {
    scalars.bias_correction1 = 1.0f;
    scalars.bias_correction2_rsqrt = 1.0f;
  }
  const float negative_learning_rate = -hyperparameters.learning_rate;
  scalars.step_size = negative_learning_rate / scalars.bias_correction1;
  scalars.decoupled_decay_factor = negative_learning_rate * hyperparameters.weight_decay;
  scalars.l2_weight_decay = hyperparameters.weight_decay;
  if (hyperparameters.weight_decay > 0.0f) {
    scalars.decay_mode = hyperparameters.adamw_mode ? WeightDecayMode::kDecoupled : WeightDecayMode::kL2;
  } else {
    scalars.decay_mode = WeightDecayMode::kNone;
  }
  return scalars;
}

namespace {

#if ZEROSIM_OPTIM_X86
// The step is memory-bound (28 B per parameter against ~10 flops), but its div and sqrt
// chains fill the out-of-order window, so the core stops issuing loads far enough ahead.
// Software prefetch 1 KiB (16 cache lines) ahead on each of the four streams keeps DRAM
// busy: about +10 % on the AVX-512 path on the 2-core Zen 5 host (adamw_bench). Prefetch
// never faults, so running past the end of the arrays is harmless.
constexpr size_t kPrefetchDistanceFloats = 256;

// Addresses are formed in integer arithmetic: a pointer past the end would be undefined
// behaviour even though the prefetch itself is not.
inline void prefetch_line_ahead(const float* stream, size_t i) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(stream) + (i + kPrefetchDistanceFloats) * sizeof(float);
  _mm_prefetch(reinterpret_cast<const char*>(address), _MM_HINT_T0);
}

inline void prefetch_streams(const float* params, const float* grads, const float* exp_avg,
                             const float* exp_avg_sq, size_t i) {
  prefetch_line_ahead(params, i);
  prefetch_line_ahead(grads, i);
  prefetch_line_ahead(exp_avg, i);
  prefetch_line_ahead(exp_avg_sq, i);
}
#endif

// One element, the reference spelling of the sequence in adamw.h. std::fma on floats is
// fmaf: correctly rounded, in hardware or in libm.
template <WeightDecayMode kMode>
inline void adam_element(const AdamStepScalars& scalars, float grad_multiplier, float& param, float grad_in,
                         float& exp_avg, float& exp_avg_sq) {
  float grad = grad_in * grad_multiplier;
  if constexpr (kMode == WeightDecayMode::kL2) grad = std::fma(param, scalars.l2_weight_decay, grad);
  float momentum = exp_avg * scalars.beta1;
  momentum = std::fma(grad, scalars.one_minus_beta1, momentum);
  const float grad_squared = grad * grad;
  float variance = exp_avg_sq * scalars.beta2;
  variance = std::fma(grad_squared, scalars.one_minus_beta2, variance);
  const float denominator = std::fma(std::sqrt(variance), scalars.bias_correction2_rsqrt, scalars.epsilon);
  const float update = momentum / denominator;
  float new_param = param;
  if constexpr (kMode == WeightDecayMode::kDecoupled)
    new_param = std::fma(new_param, scalars.decoupled_decay_factor, new_param);
  new_param = std::fma(update, scalars.step_size, new_param);
  param = new_param;
  exp_avg = momentum;
  exp_avg_sq = variance;
}

template <WeightDecayMode kMode>
void adam_scalar(const AdamStepScalars& scalars, float grad_multiplier, float* params, const float* grads,
                 float* exp_avg, float* exp_avg_sq, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i)
    adam_element<kMode>(scalars, grad_multiplier, params[i], grads[i], exp_avg[i], exp_avg_sq[i]);
}

template <WeightDecayMode kMode>
void adam_scalar_kernel(const AdamStepScalars& scalars, float grad_multiplier, float* params, const float* grads,
                        float* exp_avg, float* exp_avg_sq, size_t element_count) {
  adam_scalar<kMode>(scalars, grad_multiplier, params, grads, exp_avg, exp_avg_sq, 0, element_count);
}

#if ZEROSIM_OPTIM_X86

// AVX2: 8 lanes per step, the scalar reference for the remainder (identical bits, see the
// FMA policy in adamw.h).
template <WeightDecayMode kMode>
__attribute__((target("avx2,fma"))) void adam_avx2_kernel(const AdamStepScalars& scalars, float grad_multiplier,
                                                          float* params, const float* grads, float* exp_avg,
                                                          float* exp_avg_sq, size_t element_count) {
  constexpr size_t kLanes = 8;
  const __m256 multiplier = _mm256_set1_ps(grad_multiplier);
  const __m256 l2_weight_decay = _mm256_set1_ps(scalars.l2_weight_decay);
  const __m256 beta1 = _mm256_set1_ps(scalars.beta1);
  const __m256 one_minus_beta1 = _mm256_set1_ps(scalars.one_minus_beta1);
  const __m256 beta2 = _mm256_set1_ps(scalars.beta2);
  const __m256 one_minus_beta2 = _mm256_set1_ps(scalars.one_minus_beta2);
  const __m256 bias_correction2_rsqrt = _mm256_set1_ps(scalars.bias_correction2_rsqrt);
  const __m256 epsilon = _mm256_set1_ps(scalars.epsilon);
  const __m256 decoupled_decay_factor = _mm256_set1_ps(scalars.decoupled_decay_factor);
  const __m256 step_size = _mm256_set1_ps(scalars.step_size);
  const size_t vector_end = element_count - element_count % kLanes;
  for (size_t i = 0; i < vector_end; i += kLanes) {
    if (i % 16 == 0) prefetch_streams(params, grads, exp_avg, exp_avg_sq, i);  // once per 64-byte line
    __m256 param = _mm256_loadu_ps(params + i);
    __m256 grad = _mm256_mul_ps(_mm256_loadu_ps(grads + i), multiplier);
    if constexpr (kMode == WeightDecayMode::kL2) grad = _mm256_fmadd_ps(param, l2_weight_decay, grad);
    __m256 momentum = _mm256_mul_ps(_mm256_loadu_ps(exp_avg + i), beta1);
    momentum = _mm256_fmadd_ps(grad, one_minus_beta1, momentum);
    const __m256 grad_squared = _mm256_mul_ps(grad, grad);
    __m256 variance = _mm256_mul_ps(_mm256_loadu_ps(exp_avg_sq + i), beta2);
    variance = _mm256_fmadd_ps(grad_squared, one_minus_beta2, variance);
    const __m256 denominator = _mm256_fmadd_ps(_mm256_sqrt_ps(variance), bias_correction2_rsqrt, epsilon);
    const __m256 update = _mm256_div_ps(momentum, denominator);
    if constexpr (kMode == WeightDecayMode::kDecoupled) param = _mm256_fmadd_ps(param, decoupled_decay_factor, param);
    param = _mm256_fmadd_ps(update, step_size, param);
    _mm256_storeu_ps(params + i, param);
    _mm256_storeu_ps(exp_avg + i, momentum);
    _mm256_storeu_ps(exp_avg_sq + i, variance);
  }
  adam_scalar<kMode>(scalars, grad_multiplier, params, grads, exp_avg, exp_avg_sq, vector_end, element_count);
}

// AVX-512: 16 lanes per step; the remainder runs the same vector code under a lane mask,
// so there is no separate tail arithmetic at all. Masked-off lanes compute on zeros and are
// never stored (floating-point exceptions are masked by default, so 0/0 there is harmless).
template <WeightDecayMode kMode>
__attribute__((target("avx512f"), always_inline)) inline void adam_avx512_block(
    const __m512 multiplier, const __m512 l2_weight_decay, const __m512 beta1, const __m512 one_minus_beta1,
    const __m512 beta2, const __m512 one_minus_beta2, const __m512 bias_correction2_rsqrt, const __m512 epsilon,
    const __m512 decoupled_decay_factor, const __m512 step_size, __m512& param, const __m512 grad_in,
    __m512& exp_avg, __m512& exp_avg_sq) {
  __m512 grad = _mm512_mul_ps(grad_in, multiplier);
  if constexpr (kMode == WeightDecayMode::kL2) grad = _mm512_fmadd_ps(param, l2_weight_decay, grad);
  __m512 momentum = _mm512_mul_ps(exp_avg, beta1);
  momentum = _mm512_fmadd_ps(grad, one_minus_beta1, momentum);
  const __m512 grad_squared = _mm512_mul_ps(grad, grad);
  __m512 variance = _mm512_mul_ps(exp_avg_sq, beta2);
  variance = _mm512_fmadd_ps(grad_squared, one_minus_beta2, variance);
  // maskz with every lane on is plain vsqrtps; it avoids GCC 12's false -Wmaybe-uninitialized
  // on the _mm512_undefined_ps() inside _mm512_sqrt_ps.
  const __m512 root = _mm512_maskz_sqrt_ps(static_cast<__mmask16>(0xFFFF), variance);
  const __m512 denominator = _mm512_fmadd_ps(root, bias_correction2_rsqrt, epsilon);
  const __m512 update = _mm512_div_ps(momentum, denominator);
  if constexpr (kMode == WeightDecayMode::kDecoupled) param = _mm512_fmadd_ps(param, decoupled_decay_factor, param);
  param = _mm512_fmadd_ps(update, step_size, param);
  exp_avg = momentum;
  exp_avg_sq = variance;
}

template <WeightDecayMode kMode>
__attribute__((target("avx512f"))) void adam_avx512_kernel(const AdamStepScalars& scalars, float grad_multiplier,
                                                           float* params, const float* grads, float* exp_avg,
                                                           float* exp_avg_sq, size_t element_count) {
  constexpr size_t kLanes = 16;
  const __m512 multiplier = _mm512_set1_ps(grad_multiplier);
  const __m512 l2_weight_decay = _mm512_set1_ps(scalars.l2_weight_decay);
  const __m512 beta1 = _mm512_set1_ps(scalars.beta1);
  const __m512 one_minus_beta1 = _mm512_set1_ps(scalars.one_minus_beta1);
  const __m512 beta2 = _mm512_set1_ps(scalars.beta2);
  const __m512 one_minus_beta2 = _mm512_set1_ps(scalars.one_minus_beta2);
  const __m512 bias_correction2_rsqrt = _mm512_set1_ps(scalars.bias_correction2_rsqrt);
  const __m512 epsilon = _mm512_set1_ps(scalars.epsilon);
  const __m512 decoupled_decay_factor = _mm512_set1_ps(scalars.decoupled_decay_factor);
  const __m512 step_size = _mm512_set1_ps(scalars.step_size);
  const size_t vector_end = element_count - element_count % kLanes;
  for (size_t i = 0; i < vector_end; i += kLanes) {
    prefetch_streams(params, grads, exp_avg, exp_avg_sq, i);  // one 64-byte line per stream
    __m512 param = _mm512_loadu_ps(params + i);
    const __m512 grad = _mm512_loadu_ps(grads + i);
    __m512 momentum = _mm512_loadu_ps(exp_avg + i);
    __m512 variance = _mm512_loadu_ps(exp_avg_sq + i);
    adam_avx512_block<kMode>(multiplier, l2_weight_decay, beta1, one_minus_beta1, beta2, one_minus_beta2,
                             bias_correction2_rsqrt, epsilon, decoupled_decay_factor, step_size, param, grad,
                             momentum, variance);
    _mm512_storeu_ps(params + i, param);
    _mm512_storeu_ps(exp_avg + i, momentum);
    _mm512_storeu_ps(exp_avg_sq + i, variance);
  }
  const size_t remainder = element_count - vector_end;
  if (remainder > 0) {
    const __mmask16 mask = static_cast<__mmask16>((1u << remainder) - 1u);
    const size_t i = vector_end;
    __m512 param = _mm512_maskz_loadu_ps(mask, params + i);
    const __m512 grad = _mm512_maskz_loadu_ps(mask, grads + i);
    __m512 momentum = _mm512_maskz_loadu_ps(mask, exp_avg + i);
    __m512 variance = _mm512_maskz_loadu_ps(mask, exp_avg_sq + i);
    adam_avx512_block<kMode>(multiplier, l2_weight_decay, beta1, one_minus_beta1, beta2, one_minus_beta2,
                             bias_correction2_rsqrt, epsilon, decoupled_decay_factor, step_size, param, grad,
                             momentum, variance);
    _mm512_mask_storeu_ps(params + i, mask, param);
    _mm512_mask_storeu_ps(exp_avg + i, mask, momentum);
    _mm512_mask_storeu_ps(exp_avg_sq + i, mask, variance);
  }
}

#endif  // ZEROSIM_OPTIM_X86

using AdamKernel = void (*)(const AdamStepScalars&, float, float*, const float*, float*, float*, size_t);

// [SimdPath][WeightDecayMode]; the decay mode is a template parameter so that the inner
// loop carries no per-element branch.
#if ZEROSIM_OPTIM_X86
constexpr AdamKernel kAdamKernels[3][3] = {
    {adam_scalar_kernel<WeightDecayMode::kNone>, adam_scalar_kernel<WeightDecayMode::kL2>,
     adam_scalar_kernel<WeightDecayMode::kDecoupled>},
    {adam_avx2_kernel<WeightDecayMode::kNone>, adam_avx2_kernel<WeightDecayMode::kL2>,
     adam_avx2_kernel<WeightDecayMode::kDecoupled>},
    {adam_avx512_kernel<WeightDecayMode::kNone>, adam_avx512_kernel<WeightDecayMode::kL2>,
     adam_avx512_kernel<WeightDecayMode::kDecoupled>},
};
#else
constexpr AdamKernel kAdamKernels[3][3] = {
    {adam_scalar_kernel<WeightDecayMode::kNone>, adam_scalar_kernel<WeightDecayMode::kL2>,
     adam_scalar_kernel<WeightDecayMode::kDecoupled>},
    {nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr},
};
#endif

}  // namespace

bool simd_path_available(SimdPath path) {
  switch (path) {
    case SimdPath::kScalar:
      return true;
#if ZEROSIM_OPTIM_X86
    // __builtin_cpu_supports also checks that the OS saves the wide registers (XCR0).
    case SimdPath::kAvx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case SimdPath::kAvx512:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx512f");
#else
    case SimdPath::kAvx2:
    case SimdPath::kAvx512:
      return false;
#endif
  }
  return false;
}

SimdPath best_simd_path() {
  if (simd_path_available(SimdPath::kAvx512)) return SimdPath::kAvx512;
  if (simd_path_available(SimdPath::kAvx2)) return SimdPath::kAvx2;
  return SimdPath::kScalar;
}

const char* simd_path_name(SimdPath path) {
  switch (path) {
    case SimdPath::kScalar:
      return "scalar";
    case SimdPath::kAvx2:
      return "avx2";
    case SimdPath::kAvx512:
      return "avx512";
  }
  return "unknown";
}

void adam_update(SimdPath path, const AdamStepScalars& scalars, float grad_multiplier, float* params,
                 const float* grads, float* exp_avg, float* exp_avg_sq, size_t element_count) {
  ZEROSIM_CHECK(simd_path_available(path), "adam_update: SIMD path not available on this CPU");
  if (element_count == 0) return;
  const AdamKernel kernel = kAdamKernels[static_cast<int>(path)][static_cast<int>(scalars.decay_mode)];
  kernel(scalars, grad_multiplier, params, grads, exp_avg, exp_avg_sq, element_count);
}

void adam_update(const AdamStepScalars& scalars, float grad_multiplier, float* params, const float* grads,
                 float* exp_avg, float* exp_avg_sq, size_t element_count) {
  adam_update(best_simd_path(), scalars, grad_multiplier, params, grads, exp_avg, exp_avg_sq, element_count);
}

}  // namespace zerosim
