// The vectorized kernels the model's dense loops are built from: every path gives the scalar
// loop's bits, tails and special values included. add_scaled multiplies and adds separately;
// the products fold with fused multiply-adds, in order, reading transposed operands in place.
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

// A path of the product writing C's n columns in rows ldc floats apart.
using ProductPath = void (*)(ProductOperand, size_t, size_t, ProductOperand, size_t, float*, size_t);

// Each path alone, and the dispatching add_product (which writes a whole C: ldc = n).
std::vector<ProductPath> product_paths(size_t ldc, size_t n) {
  std::vector<ProductPath> paths = {&add_product_scalar};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) paths.push_back(&add_product_avx2);
  if (__builtin_cpu_supports("avx512f")) paths.push_back(&add_product_avx512);
  if (ldc == n) {
    paths.push_back([](ProductOperand a, size_t rows, size_t inner, ProductOperand b, size_t columns, float* c, size_t) {
      add_product(a, rows, inner, b, columns, c);
    });
  }
  return paths;
}

// An operand of `rows` x `columns` whose array is `stored`: row-major, or the row-major array
// of its transpose.
ProductOperand stored_operand(const std::vector<float>& stored, size_t rows, size_t columns, bool transposed) {
  return transposed ? ProductOperand::transpose_of(stored.data(), rows) : ProductOperand::row_major(stored.data(), columns);
}

float at(ProductOperand m, size_t row, size_t column) { return m.data[row * m.row_stride + column * m.column_stride]; }

// Every path of the register-blocked product on one shape and storage is the element-by-element
// fused fold over k in order, bit for bit; C's rows `padding` floats longer than n, whose extra
// floats no path may touch.
void check_product_is_the_fused_fold(size_t rows, size_t inner, size_t n, bool a_transposed, bool b_transposed,
                                     size_t padding = 0, std::vector<float> (*values)(size_t) = arbitrary_floats) {
  const size_t ldc = n + padding;
  const std::vector<float> a_stored = values(rows * inner);
  const std::vector<float> b_stored = values(inner * n);
  const std::vector<float> c = values(rows * ldc);
  const ProductOperand a = stored_operand(a_stored, rows, inner, a_transposed);
  const ProductOperand b = stored_operand(b_stored, inner, n, b_transposed);
  std::vector<float> expected = c;
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < n; ++j) {
      for (size_t k = 0; k < inner; ++k) expected[r * ldc + j] = std::fmaf(at(a, r, k), at(b, k, j), expected[r * ldc + j]);
    }
  }
  for (const ProductPath path : product_paths(ldc, n)) {
    std::vector<float> actual = c;
    path(a, rows, inner, b, n, actual.data(), ldc);
    for (size_t k = 0; k < actual.size(); ++k) {
      const bool both_nan = std::isnan(expected[k]) && std::isnan(actual[k]);
      RC_ASSERT(both_nan || std::memcmp(&expected[k], &actual[k], sizeof(float)) == 0);
    }
  }
}

// Row counts past the blocks of 8 and smaller last blocks, column tails past 16 and 8, odd and even strip counts
// (strips are folded two at a time), an empty fold; each operand row-major or a transpose.
RC_GTEST_PROP(VectorOps, TheBlockedProductIsTheFusedFoldBitForBit, ()) {
  const size_t rows = *rc::gen::inRange<size_t>(0, 20);
  const size_t inner = *rc::gen::inRange<size_t>(0, 12);
  const size_t n = *rc::gen::inRange<size_t>(0, 70);
  check_product_is_the_fused_fold(rows, inner, n, *rc::gen::arbitrary<bool>(), *rc::gen::arbitrary<bool>(),
                                  *rc::gen::inRange<size_t>(0, 4));
}

// B a transpose (its columns contiguous) with folds of 16 k's or more: a full strip is packed 16
// k's at a time through a transpose in registers, the k's past the last 16 and a narrower last
// strip by gathers.
RC_GTEST_PROP(VectorOps, ATransposedBPackedSixteenKsAtATimeIsTheFusedFoldBitForBit, ()) {
  const size_t rows = *rc::gen::inRange<size_t>(1, 12);
  const size_t inner = *rc::gen::inRange<size_t>(16, 72);
  const size_t n = *rc::gen::inRange<size_t>(1, 72);
  check_product_is_the_fused_fold(rows, inner, n, *rc::gen::arbitrary<bool>(), true, *rc::gen::inRange<size_t>(0, 4));
}

// A reduction this long leaves room for the fewest 16-column strips per packed panel of B (two):
// the strips past the second start panels of their own, the last maybe alone and narrower.
RC_GTEST_PROP(VectorOps, TheBlockedProductOverSeveralPanelsIsTheFusedFoldBitForBit, ()) {
  const size_t rows = *rc::gen::inRange<size_t>(1, 5);
  const size_t inner = *rc::gen::inRange<size_t>(4097, 4128);
  const size_t n = *rc::gen::inRange<size_t>(33, 56);  // three strips or more: two panels at least
  check_product_is_the_fused_fold(rows, inner, n, *rc::gen::arbitrary<bool>(), *rc::gen::arbitrary<bool>(), 0,
                                  seeded_unit_floats);
}

// Split among threads: the same bits as one thread, for shapes large enough to be split (2^22
// products a part). The columns go first, in units of 32, four units a part at least; the
// parts left split the rows (32 a part at least). Each shape's comment says its split; the
// last part ragged in rows or columns; each in the four layouts (A or A^T, B or B^T read in
// place: a part's rows are then columns of the stored A^T, its columns rows of the stored B^T).
TEST(VectorOps, TheProductOnSeveralThreadsHasOneThreadsBits) {
  struct Shape {
    size_t rows, inner, n;
    int threads;
  };
  for (const Shape shape : {Shape{200, 300, 350, 4},   // 2 column parts x 2 row parts
                            Shape{97, 256, 345, 3},    // 2 parts of work: 2 column parts
                            Shape{2048, 64, 96, 3},    // 3 units of columns: 3 row parts
                            Shape{250, 512, 300, 6},   // 2 column parts x 3 row parts
                            Shape{300, 200, 1000, 8},  // 8 column parts, the last 104 columns wide
                            Shape{48, 1024, 500, 8},   // 5 parts of work, too few rows: 4 column parts
                            Shape{40, 64, 64, 8}}) {   // too small to split
    for (const int layout : {0, 1, 2, 3}) {
      const bool a_transposed = (layout & 1) != 0, b_transposed = (layout & 2) != 0;
      std::mt19937 generator(static_cast<uint32_t>(shape.rows * 1000 + shape.n));
      std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
      auto values = [&](size_t count) {
        std::vector<float> out(count);
        for (float& value : out) value = uniform(generator);
        return out;
      };
      const std::vector<float> a_stored = values(shape.rows * shape.inner), b_stored = values(shape.inner * shape.n),
                               c = values(shape.rows * shape.n);
      const ProductOperand a = stored_operand(a_stored, shape.rows, shape.inner, a_transposed);
      const ProductOperand b = stored_operand(b_stored, shape.inner, shape.n, b_transposed);
      std::vector<float> one = c, several = c;
      add_product(a, shape.rows, shape.inner, b, shape.n, one.data());
      add_product_threads(a, shape.rows, shape.inner, b, shape.n, several.data(), shape.threads);
      EXPECT_EQ(std::memcmp(one.data(), several.data(), one.size() * sizeof(float)), 0)
          << shape.rows << " x " << shape.inner << " x " << shape.n << " on " << shape.threads << " threads, "
          << (a_transposed ? "A^T" : "A") << " in place, " << (b_transposed ? "B^T" : "B") << " in place";
    }
  }
}

TEST(VectorOps, TheBlockedProductFoldsInOrderWithFusedMultiplyAdds) {
  // Row r of A is (1 + 2^-23, 2^-40), B's rows 1 - 2^-23 and 1, C -1. In order and fused:
  // -1 + (1 - 2^-46) = -2^-46 exactly, then + 2^-40 = 2^-40 - 2^-46 exactly. Unfused, the first
  // product rounds to 1 and the result is 2^-40. The other order: -1 + 2^-40 rounds to -1, then
  // the fused step gives -2^-46.
  const size_t rows = 11, inner = 2, n = 37;
  std::vector<float> a(rows * inner), b(inner * n, 1.0f);
  for (size_t r = 0; r < rows; ++r) {
    a[r * inner] = 1.0f + std::ldexp(1.0f, -23);
    a[r * inner + 1] = std::ldexp(1.0f, -40);
  }
  for (size_t j = 0; j < n; ++j) b[j] = 1.0f - std::ldexp(1.0f, -23);
  const float expected = std::ldexp(1.0f, -40) - std::ldexp(1.0f, -46);
  for (const ProductPath path : product_paths(n, n)) {
    std::vector<float> c(rows * n, -1.0f);
    path(ProductOperand::row_major(a.data(), inner), rows, inner, ProductOperand::row_major(b.data(), n), n, c.data(), n);
    for (float value : c) EXPECT_EQ(value, expected);
  }
}

// A B^T whose stored rows are too long for the gathers' 32-bit lane offsets (16 lanes x the
// stride must fit) is packed element by element: one column, so only its stored row is read.
TEST(VectorOps, ATransposeTooLongForGatherOffsetsIsPackedElementByElement) {
  const size_t rows = 3, inner = 5, n = 1;
  const std::vector<float> a = {1, 2, 3, 4, 5, -1, -2, -3, -4, -5, 0.5f, 0.25f, 0.125f, 2, 4};
  const std::vector<float> column = {1, -1, 2, -2, 3};  // B's one column: the first stored row of B^T
  const ProductOperand b{column.data(), 1, size_t{1} << 31};
  for (const ProductPath path : product_paths(n, n)) {
    std::vector<float> c(rows, 0.0f);
    path(ProductOperand::row_major(a.data(), inner), rows, inner, b, n, c.data(), n);
    EXPECT_EQ(c[0], 1 - 2 + 6 - 8 + 15);
    EXPECT_EQ(c[1], -1 + 2 - 6 + 8 - 15);
    EXPECT_EQ(c[2], 0.5f - 0.25f + 0.25f - 4 + 12);
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
