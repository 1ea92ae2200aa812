// The vectorized axpy the model's dense loops are built from: every path gives the scalar loop's
// bits (separate multiply and add, no FMA), tails and special values included.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
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

// Finite values in [-1, 1) for long folds, from a generator seeded by one drawn value: arbitrary
// bit patterns would turn a fold of thousands of terms into NaN or infinity almost surely, which
// every wrong answer also gives (the short folds above cover the special values), and drawing
// each value from RapidCheck would dominate the test's time.
std::vector<float> seeded_unit_floats(size_t n) {
  std::mt19937 generator(*rc::gen::arbitrary<uint32_t>());
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(n);
  for (float& value : values) value = uniform(generator);
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

// Every path of the register-blocked product on one shape is add_scaled's row-by-row fold, bit
// for bit.
void check_blocked_product_is_the_row_fold(size_t rows, size_t inner, size_t n,
                                           std::vector<float> (*values)(size_t) = arbitrary_floats) {
  const std::vector<float> a = values(rows * inner);
  const std::vector<float> b = values(inner * n);
  const std::vector<float> c = values(rows * n);
  std::vector<float> expected = c;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t k = 0; k < inner; ++k) add_scaled_scalar(a[r * inner + k], b.data() + k * n, expected.data() + r * n, n);
  }
  using Path = void (*)(const float*, size_t, size_t, const float*, size_t, float*);
  std::vector<Path> paths = {&add_rows_times_matrix, &add_rows_times_matrix_scalar};
  if (__builtin_cpu_supports("avx2")) paths.push_back(&add_rows_times_matrix_avx2);
  if (__builtin_cpu_supports("avx512f")) paths.push_back(&add_rows_times_matrix_avx512);
  for (const Path path : paths) {
    std::vector<float> actual = c;
    path(a.data(), rows, inner, b.data(), n, actual.data());
    for (size_t k = 0; k < actual.size(); ++k) {
      const bool both_nan = std::isnan(expected[k]) && std::isnan(actual[k]);
      RC_ASSERT(both_nan || std::memcmp(&expected[k], &actual[k], sizeof(float)) == 0);
    }
  }
}

// Row counts past the blocks of 8 and 6, column tails past 16 and 8, odd and even strip counts
// (strips are folded two at a time), an empty fold.
RC_GTEST_PROP(VectorOps, TheBlockedProductIsTheRowByRowFoldBitForBit, ()) {
  const size_t rows = *rc::gen::inRange<size_t>(0, 20);
  const size_t inner = *rc::gen::inRange<size_t>(0, 12);
  const size_t n = *rc::gen::inRange<size_t>(0, 70);
  check_blocked_product_is_the_row_fold(rows, inner, n);
}

// A reduction this long leaves room for the fewest 16-column strips per packed panel of B (two):
// the strips past the second start panels of their own, the last maybe alone and narrower.
RC_GTEST_PROP(VectorOps, TheBlockedProductOverSeveralPanelsIsTheRowByRowFoldBitForBit, ()) {
  const size_t rows = *rc::gen::inRange<size_t>(1, 5);
  const size_t inner = *rc::gen::inRange<size_t>(4097, 4128);
  const size_t n = *rc::gen::inRange<size_t>(33, 56);  // three strips or more: two panels at least
  check_blocked_product_is_the_row_fold(rows, inner, n, seeded_unit_floats);
}

// Rows split among threads: the same bits as one thread, for shapes large enough to be split
// (2^22 products a thread, 32 rows at least), with a last part of ragged size.
TEST(VectorOps, TheProductOnSeveralThreadsHasOneThreadsBits) {
  struct Shape {
    size_t rows, inner, n;
    int threads;
  };
  for (const Shape shape : {Shape{200, 300, 350, 4}, Shape{97, 256, 345, 3}, Shape{64, 520, 257, 2}, Shape{40, 64, 64, 8}}) {
    std::mt19937 generator(static_cast<uint32_t>(shape.rows * 1000 + shape.n));
    std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
    auto values = [&](size_t count) {
      std::vector<float> out(count);
      for (float& value : out) value = uniform(generator);
      return out;
    };
    const std::vector<float> a = values(shape.rows * shape.inner), b = values(shape.inner * shape.n),
                             c = values(shape.rows * shape.n);
    std::vector<float> one = c, several = c;
    add_rows_times_matrix(a.data(), shape.rows, shape.inner, b.data(), shape.n, one.data());
    add_rows_times_matrix_threads(a.data(), shape.rows, shape.inner, b.data(), shape.n, several.data(), shape.threads);
    EXPECT_EQ(std::memcmp(one.data(), several.data(), one.size() * sizeof(float)), 0)
        << shape.rows << " x " << shape.inner << " x " << shape.n << " on " << shape.threads << " threads";
  }
}

TEST(VectorOps, TheBlockedProductFoldsInOrderWithoutFusing) {
  // Row r of A is (1 + 2^-23, 2^-40), B's rows 1 - 2^-23 and 1, C -1. In order and unfused:
  // -1 + (1 - 2^-46 rounded to 1) = 0, then + 2^-40 = 2^-40. Fused: -2^-46 + 2^-40, not 2^-40.
  // The other order: -1 + 2^-40 rounds to -1, then + 1 = 0.
  const size_t rows = 11, inner = 2, n = 37;
  std::vector<float> a(rows * inner), b(inner * n, 1.0f);
  for (size_t r = 0; r < rows; ++r) {
    a[r * inner] = 1.0f + std::ldexp(1.0f, -23);
    a[r * inner + 1] = std::ldexp(1.0f, -40);
  }
  for (size_t j = 0; j < n; ++j) b[j] = 1.0f - std::ldexp(1.0f, -23);
  using Path = void (*)(const float*, size_t, size_t, const float*, size_t, float*);
  std::vector<Path> paths = {&add_rows_times_matrix, &add_rows_times_matrix_scalar};
  if (__builtin_cpu_supports("avx2")) paths.push_back(&add_rows_times_matrix_avx2);
  if (__builtin_cpu_supports("avx512f")) paths.push_back(&add_rows_times_matrix_avx512);
  for (const Path path : paths) {
    std::vector<float> c(rows * n, -1.0f);
    path(a.data(), rows, inner, b.data(), n, c.data());
    for (float value : c) EXPECT_EQ(value, std::ldexp(1.0f, -40));
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
