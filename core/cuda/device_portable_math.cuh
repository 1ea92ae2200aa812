// portable_exp and portable_log (core/tensor/portable_math.h) on a CUDA device: the host's op
// sequence in round-to-nearest double intrinsics, so exp and log have the host's bits in every
// kernel that needs them (the MLP's loss, the transformer's softmaxes and GELU). Device code:
// included by .cu files only.
#pragma once

#include "core/tensor/portable_math.h"

namespace zerosim {

namespace device_math {
inline constexpr double kLn2High = 6.93147180369123816490e-01;
inline constexpr double kLn2Low = 1.90821492927058770002e-10;
inline constexpr double kInverseLn2 = 1.44269504088896338700e+00;

}  // namespace device_math

// The host's coefficients (portable_math.h), in constant memory. Dividing them out on every call,
// as the host's constexpr does at compile time, took about a hundred double divisions per exp
// and made the loss and GELU kernels the largest part of a GPU step.
static __constant__ double device_exp_inverse_factorials[15] = {
    kExpInverseFactorials[0],  kExpInverseFactorials[1],  kExpInverseFactorials[2],  kExpInverseFactorials[3],
    kExpInverseFactorials[4],  kExpInverseFactorials[5],  kExpInverseFactorials[6],  kExpInverseFactorials[7],
    kExpInverseFactorials[8],  kExpInverseFactorials[9],  kExpInverseFactorials[10], kExpInverseFactorials[11],
    kExpInverseFactorials[12], kExpInverseFactorials[13], kExpInverseFactorials[14]};

__device__ inline double device_portable_exp(double x) {
  if (x != x) return x;
  if (x > 709.782712893384) return __longlong_as_double(0x7ff0000000000000LL);
  if (x < -745.1332191019412) return 0.0;
  const double k = rint(__dmul_rn(x, device_math::kInverseLn2));
  const double reduced = __dsub_rn(__dsub_rn(x, __dmul_rn(k, device_math::kLn2High)), __dmul_rn(k, device_math::kLn2Low));
  double sum = device_exp_inverse_factorials[14];
#pragma unroll
  for (int n = 13; n >= 0; --n) sum = __dadd_rn(__dmul_rn(sum, reduced), device_exp_inverse_factorials[n]);
  return ldexp(sum, static_cast<int>(k));
}

__device__ inline double device_portable_log(double x) {
  if (x != x) return x;
  if (x < 0.0) return __longlong_as_double(0x7ff8000000000000LL);
  if (x == 0.0) return __longlong_as_double(static_cast<long long>(0xfff0000000000000ULL));
  if (x == __longlong_as_double(0x7ff0000000000000LL)) return x;
  int exponent = 0;
  double mantissa = frexp(x, &exponent);
  if (mantissa < 0.70710678118654752440) {
    mantissa = __dmul_rn(mantissa, 2.0);
    exponent -= 1;
  }
  const double s = __ddiv_rn(__dsub_rn(mantissa, 1.0), __dadd_rn(mantissa, 1.0));
  const double s_squared = __dmul_rn(s, s);
  double series = __ddiv_rn(1.0, 25.0);
  for (int k = 11; k >= 0; --k) series = __dadd_rn(__dmul_rn(series, s_squared), __ddiv_rn(1.0, static_cast<double>(2 * k + 1)));
  const double log_mantissa = __dmul_rn(__dmul_rn(2.0, s), series);
  const double e = static_cast<double>(exponent);
  return __dadd_rn(__dmul_rn(e, device_math::kLn2High), __dadd_rn(__dmul_rn(e, device_math::kLn2Low), log_mantissa));
}

__device__ inline float device_portable_expf(float x) { return __double2float_rn(device_portable_exp(static_cast<double>(x))); }
__device__ inline float device_portable_logf(float x) { return __double2float_rn(device_portable_log(static_cast<double>(x))); }

}  // namespace zerosim
