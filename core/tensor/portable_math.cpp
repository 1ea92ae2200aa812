#include "core/tensor/portable_math.h"

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace zerosim {
namespace {

// ln 2 and pi/2 split so that k * high is exact for the k that occur (fdlibm's constants).
constexpr double kLn2High = 6.93147180369123816490e-01;
constexpr double kLn2Low = 1.90821492927058770002e-10;
constexpr double kInverseLn2 = 1.44269504088896338700e+00;
constexpr double kHalfPiHigh = 1.57079632673412561417e+00;
constexpr double kHalfPiLow = 6.07710050650619224932e-11;
constexpr double kTwoOverPi = 6.36619772367581382433e-01;
constexpr double kExpOverflow = 709.782712893384;     // exp above: +inf
constexpr double kExpUnderflow = -745.1332191019412;  // exp below: 0

constexpr double inverse_factorial(int n) {
  double value = 1.0;
  for (int i = 2; i <= n; ++i) value = value / static_cast<double>(i);
  return value;
}

constexpr bool exp_coefficients_are_the_divisions() {
  for (int n = 0; n <= 14; ++n) {
    if (kExpInverseFactorials[n] != inverse_factorial(n)) return false;
  }
  return true;
}
static_assert(exp_coefficients_are_the_divisions(), "kExpInverseFactorials must be inverse_factorial's values");

}  // namespace

double portable_exp(double x) {
  if (x != x) return x;
  if (x > kExpOverflow) return std::numeric_limits<double>::infinity();
  if (x < kExpUnderflow) return 0.0;
  const double k = std::nearbyint(x * kInverseLn2);
  const double reduced = (x - k * kLn2High) - k * kLn2Low;  // |reduced| <= ~0.35
  // Taylor series to degree 14 in Horner form: the next term is below 1e-19.
  double sum = inverse_factorial(14);
  for (int n = 13; n >= 0; --n) sum = sum * reduced + inverse_factorial(n);
  return std::ldexp(sum, static_cast<int>(k));
}

namespace {

// 2^exponent for exponents within the normal range, as doubles.
__attribute__((target("avx512f"))) __m512d power_of_two_avx512(__m256i exponent) {
  const __m512i biased = _mm512_add_epi64(_mm512_cvtepi32_epi64(exponent), _mm512_set1_epi64(1023));
  return _mm512_castsi512_pd(_mm512_slli_epi64(biased, 52));
}

// Eight lanes of portable_exp's finite path (kExpUnderflow <= x <= kExpOverflow), the same
// operations in the same order per lane.
__attribute__((target("avx512f"))) __m512d exp_finite_avx512(__m512d x) {
  const __m512d k = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(kInverseLn2)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512d reduced = _mm512_sub_pd(_mm512_sub_pd(x, _mm512_mul_pd(k, _mm512_set1_pd(kLn2High))),
                                        _mm512_mul_pd(k, _mm512_set1_pd(kLn2Low)));
  __m512d sum = _mm512_set1_pd(inverse_factorial(14));
  for (int n = 13; n >= 0; --n) {
    sum = _mm512_add_pd(_mm512_mul_pd(sum, reduced), _mm512_set1_pd(inverse_factorial(n)));
  }
  // ldexp(sum, k): sum * 2^k1 is exact (a normal result), then * 2^k2 rounds once.
  const __m256i k32 = _mm512_cvtpd_epi32(k);
  const __m256i k1 = _mm256_srai_epi32(k32, 1);
  const __m256i k2 = _mm256_sub_epi32(k32, k1);
  return _mm512_mul_pd(_mm512_mul_pd(sum, power_of_two_avx512(k1)), power_of_two_avx512(k2));
}

// portable_exp on eight lanes, special values included: NaN returns itself, then +inf above
// the overflow bound, 0 below the underflow bound, else the series (the scalar path's order).
__attribute__((target("avx512f"))) __m512d exp_avx512(__m512d value) {
  const __mmask8 is_nan = _mm512_cmp_pd_mask(value, value, _CMP_UNORD_Q);
  const __mmask8 above = _mm512_cmp_pd_mask(value, _mm512_set1_pd(kExpOverflow), _CMP_GT_OQ);
  const __mmask8 below = _mm512_cmp_pd_mask(value, _mm512_set1_pd(kExpUnderflow), _CMP_LT_OQ);
  const __mmask8 finite = static_cast<__mmask8>(~(is_nan | above | below));
  // Out-of-range lanes compute on 0 (harmless), then take their special value.
  __m512d result = exp_finite_avx512(_mm512_maskz_mov_pd(finite, value));
  result = _mm512_mask_mov_pd(result, above, _mm512_set1_pd(std::numeric_limits<double>::infinity()));
  result = _mm512_mask_mov_pd(result, below, _mm512_setzero_pd());
  return _mm512_mask_mov_pd(result, is_nan, value);
}

__attribute__((target("avx512f"))) void portable_exp_array_avx512(const double* x, double* out, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    const size_t lanes = n - i < 8 ? n - i : 8;
    const __mmask8 lanes_mask = static_cast<__mmask8>((1u << lanes) - 1u);
    _mm512_mask_storeu_pd(out + i, lanes_mask, exp_avx512(_mm512_maskz_loadu_pd(lanes_mask, x + i)));
  }
}

__attribute__((target("avx512f"))) void portable_expf_array_avx512(const float* x, float* out, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    const size_t lanes = n - i < 8 ? n - i : 8;
    const __mmask16 lanes_mask = static_cast<__mmask16>((1u << lanes) - 1u);
    const __m512d value = _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_maskz_loadu_ps(lanes_mask, x + i)));
    _mm512_mask_storeu_ps(out + i, lanes_mask, _mm512_castps256_ps512(_mm512_cvtpd_ps(exp_avx512(value))));
  }
}

}  // namespace

void portable_exp_array(const double* x, double* out, size_t n) {
  if (__builtin_cpu_supports("avx512f")) return portable_exp_array_avx512(x, out, n);
  for (size_t i = 0; i < n; ++i) out[i] = portable_exp(x[i]);
}

void portable_expf_array(const float* x, float* out, size_t n) {
  if (__builtin_cpu_supports("avx512f")) return portable_expf_array_avx512(x, out, n);
  for (size_t i = 0; i < n; ++i) out[i] = portable_expf(x[i]);
}

double portable_log(double x) {
  if (x != x) return x;
  if (x < 0.0) return std::numeric_limits<double>::quiet_NaN();
  if (x == 0.0) return -std::numeric_limits<double>::infinity();
  if (x == std::numeric_limits<double>::infinity()) return x;
  int exponent = 0;
  double mantissa = std::frexp(x, &exponent);  // [0.5, 1)
  if (mantissa < 0.70710678118654752440) {
    mantissa = mantissa * 2.0;
    exponent -= 1;
  }
  // log(m) = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m-1)/(m+1), |s| <= 0.172.
  const double s = (mantissa - 1.0) / (mantissa + 1.0);
  const double s_squared = s * s;
  double series = 1.0 / 25.0;
  for (int k = 11; k >= 0; --k) series = series * s_squared + 1.0 / static_cast<double>(2 * k + 1);
  const double log_mantissa = 2.0 * s * series;
  const double e = static_cast<double>(exponent);
  return e * kLn2High + (e * kLn2Low + log_mantissa);
}

double portable_cos(double x) {
  if (!(std::fabs(x) <= 1e9)) {
    if (x != x || std::isinf(x)) return std::numeric_limits<double>::quiet_NaN();
  }
  const double k = std::nearbyint(x * kTwoOverPi);
  const double reduced = (x - k * kHalfPiHigh) - k * kHalfPiLow;  // |reduced| <= ~pi/4
  const double r2 = reduced * reduced;
  // cos and sin of the reduced argument by Taylor series (next terms below 1e-20).
  double cosine = inverse_factorial(20);
  for (int n = 18; n >= 0; n -= 2) cosine = cosine * (-r2) + inverse_factorial(n);
  // inverse_factorial alternates sign through (-r2): cos = sum (-1)^j r^2j / (2j)!
  double sine = inverse_factorial(21);
  for (int n = 19; n >= 1; n -= 2) sine = sine * (-r2) + inverse_factorial(n);
  sine = sine * reduced;
  const long long quadrant = (static_cast<long long>(k) % 4 + 4) % 4;
  switch (quadrant) {
    case 0: return cosine;
    case 1: return -sine;
    case 2: return -cosine;
    default: return sine;
  }
}

}  // namespace zerosim
