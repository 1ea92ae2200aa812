#include "core/tensor/vector_ops.h"

#include <immintrin.h>

namespace zerosim {

__attribute__((target("avx512f"))) void add_scaled_avx512(float a, const float* x, float* y, size_t n) {
  const __m512 scale = _mm512_set1_ps(a);
  size_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m512 product = _mm512_mul_ps(scale, _mm512_loadu_ps(x + k));
    _mm512_storeu_ps(y + k, _mm512_add_ps(_mm512_loadu_ps(y + k), product));
  }
  if (k < n) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - k)) - 1u);
    const __m512 product = _mm512_mul_ps(scale, _mm512_maskz_loadu_ps(mask, x + k));
    _mm512_mask_storeu_ps(y + k, mask, _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y + k), product));
  }
}

__attribute__((target("avx2"))) void add_scaled_avx2(float a, const float* x, float* y, size_t n) {
  const __m256 scale = _mm256_set1_ps(a);
  size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 product = _mm256_mul_ps(scale, _mm256_loadu_ps(x + k));
    _mm256_storeu_ps(y + k, _mm256_add_ps(_mm256_loadu_ps(y + k), product));
  }
  for (; k < n; ++k) y[k] = y[k] + a * x[k];
}

void add_scaled_scalar(float a, const float* x, float* y, size_t n) {
  for (size_t k = 0; k < n; ++k) y[k] = y[k] + a * x[k];
}

void add_scaled(float a, const float* x, float* y, size_t n) {
  if (__builtin_cpu_supports("avx512f")) return add_scaled_avx512(a, x, y, n);
  if (__builtin_cpu_supports("avx2")) return add_scaled_avx2(a, x, y, n);
  add_scaled_scalar(a, x, y, n);
}

}  // namespace zerosim
