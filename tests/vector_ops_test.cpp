// The vectorized axpy the model's dense loops are built from: every path gives the scalar loop's
// bits (separate multiply and add, no FMA), tails and special values included.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/tensor/vector_ops.h"

namespace zerosim {
namespace {

std::vector<float> arbitrary_floats(size_t n) {
  std::vector<float> values(n);
  for (float& value : values) {
    value = std::bit_cast<float>(*rc::gen::arbitrary<uint32_t>());  // every bit pattern: NaN, inf, denormals, -0
  }
  return values;
}

RC_GTEST_PROP(VectorOps, EveryPathIsTheScalarLoopBitForBit, ()) {
  const size_t n = *rc::gen::inRange<size_t>(0, 100);
  const float a = *rc::gen::element(1.0f, -0.0f, 3.0e-39f, std::numeric_limits<float>::infinity(),
                                    std::bit_cast<float>(*rc::gen::arbitrary<uint32_t>()));
  const std::vector<float> x = arbitrary_floats(n);
  const std::vector<float> y = arbitrary_floats(n);
  std::vector<float> expected = y;
  add_scaled_scalar(a, x.data(), expected.data(), n);
  using Path = void (*)(float, const float*, float*, size_t);
  std::vector<Path> paths = {&add_scaled};
  if (__builtin_cpu_supports("avx2")) paths.push_back(&add_scaled_avx2);
  if (__builtin_cpu_supports("avx512f")) paths.push_back(&add_scaled_avx512);
  for (const Path path : paths) {
    std::vector<float> actual = y;
    path(a, x.data(), actual.data(), n);
    for (size_t k = 0; k < n; ++k) {
      const bool both_nan = std::isnan(expected[k]) && std::isnan(actual[k]);
      RC_ASSERT(both_nan || std::memcmp(&expected[k], &actual[k], sizeof(float)) == 0);
    }
  }
}

// The rounding is a multiply then an add: (1 + 2^-23)(1 - 2^-23) = 1 - 2^-46 rounds to 1, so
// -1 + that is 0; a fused multiply-add would round once and give -2^-46.
TEST(VectorOps, NoFusedMultiplyAdd) {
  const float a = 1.0f + std::ldexp(1.0f, -23);
  using Path = void (*)(float, const float*, float*, size_t);
  std::vector<Path> paths = {&add_scaled, &add_scaled_scalar};
  if (__builtin_cpu_supports("avx2")) paths.push_back(&add_scaled_avx2);
  if (__builtin_cpu_supports("avx512f")) paths.push_back(&add_scaled_avx512);
  for (const Path path : paths) {
    std::vector<float> x(37, 1.0f - std::ldexp(1.0f, -23)), y(37, -1.0f);
    path(a, x.data(), y.data(), x.size());
    for (float value : y) EXPECT_EQ(value, 0.0f);
  }
}

}  // namespace
}  // namespace zerosim
