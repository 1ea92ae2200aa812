#include "core/tensor/vector_ops.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/tensor/thread_split.h"

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

namespace {

// B's columns column..column+width packed as [k][strip width], so that a fold step reads one
// short contiguous run of B rather than a strip n floats from the last (each on another page);
// the strip (inner x 64 bytes at most) is reused by every block of rows. A is read in place:
// each of a block's rows is a stream in k. Packing moves values; it computes nothing.
constexpr size_t kBlockRows = 8;

// A's element (r, k) for the rows of one block: the rows' starts, and the step between k's.
template <int kRows>
struct RowBlock {
  const float* row[kRows];
  size_t step;
  RowBlock(ProductOperand a, size_t first_row) : step(a.column_stride) {
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) row[r] = a.data + (first_row + static_cast<size_t>(r)) * a.row_stride;
  }
};

// The lanes of the 16-column strip starting at `column` that lie inside a row of n columns.
__mmask16 strip_mask(size_t n, size_t column) {
  const size_t width = n - column < 16 ? n - column : 16;
  return static_cast<__mmask16>(width == 16 ? 0xffffu : (1u << width) - 1u);
}

// rows[i] (i < 16) turned into rows[k] = the k-th float of each of the 16 rows, in row order:
// a 16 x 16 transpose in registers (pairs within 128-bit lanes, then quads, then the lanes).
__attribute__((target("avx512f"))) inline void transpose_16x16(__m512 rows[16]) {
  __m512 pairs[16], quads[16];
  for (int i = 0; i < 16; i += 2) {
    pairs[i] = _mm512_unpacklo_ps(rows[i], rows[i + 1]);
    pairs[i + 1] = _mm512_unpackhi_ps(rows[i], rows[i + 1]);
  }
  // quads[4g + m], lane L: float 4L + m of rows 4g .. 4g + 3.
  for (int g = 0; g < 16; g += 4) {
    quads[g] = _mm512_shuffle_ps(pairs[g], pairs[g + 2], _MM_SHUFFLE(1, 0, 1, 0));
    quads[g + 1] = _mm512_shuffle_ps(pairs[g], pairs[g + 2], _MM_SHUFFLE(3, 2, 3, 2));
    quads[g + 2] = _mm512_shuffle_ps(pairs[g + 1], pairs[g + 3], _MM_SHUFFLE(1, 0, 1, 0));
    quads[g + 3] = _mm512_shuffle_ps(pairs[g + 1], pairs[g + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int m = 0; m < 4; ++m) {
    const __m512 even_lanes_low = _mm512_shuffle_f32x4(quads[m], quads[4 + m], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 odd_lanes_low = _mm512_shuffle_f32x4(quads[m], quads[4 + m], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512 even_lanes_high = _mm512_shuffle_f32x4(quads[8 + m], quads[12 + m], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 odd_lanes_high = _mm512_shuffle_f32x4(quads[8 + m], quads[12 + m], _MM_SHUFFLE(3, 1, 3, 1));
    rows[m] = _mm512_shuffle_f32x4(even_lanes_low, even_lanes_high, _MM_SHUFFLE(2, 0, 2, 0));
    rows[8 + m] = _mm512_shuffle_f32x4(even_lanes_low, even_lanes_high, _MM_SHUFFLE(3, 1, 3, 1));
    rows[4 + m] = _mm512_shuffle_f32x4(odd_lanes_low, odd_lanes_high, _MM_SHUFFLE(2, 0, 2, 0));
    rows[12 + m] = _mm512_shuffle_f32x4(odd_lanes_low, odd_lanes_high, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// B's columns column..column+15 (those under `mask`) into strip[k * 16 + j]: vector loads where
// B's rows are contiguous; where B is a transpose (its columns are contiguous), a full strip
// goes 16 k's at a time through a transpose in registers, and the rest by gathers (one gather
// of 16 floats per k had made the head's 128-row forward 15-20 % slower on this path's VM).
__attribute__((target("avx512f"))) void pack_strip_avx512(ProductOperand b, size_t inner, size_t column,
                                                          __mmask16 mask, float* strip) {
  if (b.column_stride == 1) {
    for (size_t k = 0; k < inner; ++k) {
      _mm512_storeu_ps(strip + k * 16, _mm512_maskz_loadu_ps(mask, b.data + k * b.row_stride + column));
    }
    return;
  }
  const float* first = b.data + column * b.column_stride;
  size_t transposed_k = 0;  // k's packed by the transpose
  if (b.row_stride == 1 && mask == 0xffffu) {
    for (; transposed_k + 16 <= inner; transposed_k += 16) {
      __m512 rows[16];
      for (int j = 0; j < 16; ++j) rows[j] = _mm512_loadu_ps(first + static_cast<size_t>(j) * b.column_stride + transposed_k);
      transpose_16x16(rows);
      for (int k = 0; k < 16; ++k) _mm512_storeu_ps(strip + (transposed_k + static_cast<size_t>(k)) * 16, rows[k]);
    }
  }
  if (b.column_stride <= size_t{INT32_MAX} / 16) {
    const __m512i offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32(static_cast<int32_t>(b.column_stride)));
    for (size_t k = transposed_k; k < inner; ++k) {
      _mm512_storeu_ps(strip + k * 16,
                       _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, offsets, first + k * b.row_stride, 4));
    }
    return;
  }
  for (size_t k = transposed_k; k < inner; ++k) {
    for (size_t j = 0; j < 16; ++j) {
      strip[k * 16 + j] = (mask >> j) & 1u ? first[k * b.row_stride + j * b.column_stride] : 0.0f;
    }
  }
}

// kRows rows of C by one strip of columns held in registers across the whole fold.
template <int kRows>
__attribute__((target("avx512f"))) void rows_block_avx512(const RowBlock<kRows>& a, size_t inner, const float* strip,
                                                          float* c, size_t ldc, __mmask16 mask) {
  __m512 sums[kRows];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) sums[r] = _mm512_maskz_loadu_ps(mask, c + r * ldc);
  size_t offset = 0;
  for (size_t k = 0; k < inner; ++k, offset += a.step) {
    const __m512 row_of_b = _mm512_loadu_ps(strip + k * 16);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) sums[r] = _mm512_fmadd_ps(_mm512_set1_ps(a.row[r][offset]), row_of_b, sums[r]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) _mm512_mask_storeu_ps(c + r * ldc, mask, sums[r]);
}

// The same fold for two strips side by side (the second's width under `second_mask`): twice the
// sums in registers for each broadcast of A, and twice the independent multiply-adds in flight.
template <int kRows>
__attribute__((target("avx512f"))) void rows_block_pair_avx512(const RowBlock<kRows>& a, size_t inner,
                                                               const float* first_strip, const float* second_strip,
                                                               float* c, size_t ldc, __mmask16 second_mask) {
  __m512 first[kRows], second[kRows];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    first[r] = _mm512_loadu_ps(c + r * ldc);
    second[r] = _mm512_maskz_loadu_ps(second_mask, c + r * ldc + 16);
  }
  size_t offset = 0;
  for (size_t k = 0; k < inner; ++k, offset += a.step) {
    const __m512 first_row_of_b = _mm512_loadu_ps(first_strip + k * 16);
    const __m512 second_row_of_b = _mm512_loadu_ps(second_strip + k * 16);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512 a_value = _mm512_set1_ps(a.row[r][offset]);
      first[r] = _mm512_fmadd_ps(a_value, first_row_of_b, first[r]);
      second[r] = _mm512_fmadd_ps(a_value, second_row_of_b, second[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    _mm512_storeu_ps(c + r * ldc, first[r]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, second_mask, second[r]);
  }
}

template <int kRows>
__attribute__((target("avx2,fma"))) void rows_block_avx2(const RowBlock<kRows>& a, size_t inner, const float* strip,
                                                         float* c, size_t ldc) {
  __m256 sums[kRows];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) sums[r] = _mm256_loadu_ps(c + r * ldc);
  size_t offset = 0;
  for (size_t k = 0; k < inner; ++k, offset += a.step) {
    const __m256 row_of_b = _mm256_loadu_ps(strip + k * 8);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) sums[r] = _mm256_fmadd_ps(_mm256_set1_ps(a.row[r][offset]), row_of_b, sums[r]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) _mm256_storeu_ps(c + r * ldc, sums[r]);
}

// Blocks of kBlockRows rows of C in order; the last block's row count picks its instance.
template <typename Block>
void for_each_row_block(size_t rows, Block&& block) {
  constexpr int kMaxRows = static_cast<int>(kBlockRows);
  size_t r = 0;
  for (; r + kBlockRows <= rows; r += kBlockRows) block(r, std::integral_constant<int, kMaxRows>{});
  const size_t left = rows - r;
  [&]<int... kCounts>(std::integer_sequence<int, kCounts...>) {
    ((left == static_cast<size_t>(kCounts + 1) ? block(r, std::integral_constant<int, kCounts + 1>{}) : void()), ...);
  }(std::make_integer_sequence<int, kMaxRows - 1>{});
}

float element(ProductOperand m, size_t row, size_t column) {
  return m.data[row * m.row_stride + column * m.column_stride];
}

}  // namespace

// B is packed a panel of strips at a time (as many 16-column strips as fit kPanelBytes, two at
// least, which the kernel folds side by side); every block of rows then folds over each strip of
// the panel while the block's rows of A stay cached.
// A is read once per panel and B once in all, whichever of the two is the large one (the head's
// vocabulary-wide product has either shape). Each C element's fold is the kernel's, unchanged.
__attribute__((target("avx512f"))) void add_product_avx512(ProductOperand a, size_t rows, size_t inner,
                                                           ProductOperand b, size_t n, float* c, size_t ldc) {
  if (rows == 0 || n == 0) return;
  constexpr size_t kPanelBytes = size_t{256} << 10;
  const size_t strip_floats = inner * 16;
  const size_t strips_total = (n + 15) / 16;
  const size_t strips_per_panel =
      std::min(strips_total, std::max<size_t>(2, kPanelBytes / std::max<size_t>(1, strip_floats * sizeof(float))));
  std::vector<float> panel(strips_per_panel * strip_floats);
  for (size_t first_strip = 0; first_strip < strips_total; first_strip += strips_per_panel) {
    const size_t strips = std::min(strips_per_panel, strips_total - first_strip);
    for (size_t s = 0; s < strips; ++s) {
      const size_t column = (first_strip + s) * 16;
      pack_strip_avx512(b, inner, column, strip_mask(n, column), panel.data() + s * strip_floats);
    }
    for_each_row_block(rows, [&](size_t r, auto count) {
      constexpr int kRows = decltype(count)::value;
      const RowBlock<kRows> block(a, r);
      size_t s = 0;
      // Strips two at a time; only the last strip of all can be narrower than 16 columns.
      for (; s + 1 < strips; s += 2) {
        const size_t column = (first_strip + s) * 16;
        rows_block_pair_avx512<kRows>(block, inner, panel.data() + s * strip_floats,
                                      panel.data() + (s + 1) * strip_floats, c + r * ldc + column, ldc,
                                      strip_mask(n, column + 16));
      }
      if (s < strips) {
        const size_t column = (first_strip + s) * 16;
        rows_block_avx512<kRows>(block, inner, panel.data() + s * strip_floats, c + r * ldc + column, ldc,
                                 strip_mask(n, column));
      }
    });
  }
}

__attribute__((target("avx2,fma"))) void add_product_avx2(ProductOperand a, size_t rows, size_t inner,
                                                          ProductOperand b, size_t n, float* c, size_t ldc) {
  if (rows == 0 || n == 0) return;
  std::vector<float> strip(inner * 8);
  size_t column = 0;
  for (; column + 8 <= n; column += 8) {
    for (size_t k = 0; k < inner; ++k) {
      if (b.column_stride == 1) {
        _mm256_storeu_ps(&strip[k * 8], _mm256_loadu_ps(b.data + k * b.row_stride + column));
      } else {
        for (size_t j = 0; j < 8; ++j) strip[k * 8 + j] = element(b, k, column + j);
      }
    }
    for_each_row_block(rows, [&](size_t r, auto count) {
      constexpr int kRows = decltype(count)::value;
      rows_block_avx2<kRows>(RowBlock<kRows>(a, r), inner, strip.data(), c + r * ldc + column, ldc);
    });
  }
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = column; j < n; ++j) {
      float sum = c[r * ldc + j];
      for (size_t k = 0; k < inner; ++k) sum = std::fmaf(element(a, r, k), element(b, k, j), sum);
      c[r * ldc + j] = sum;
    }
  }
}

void add_product_scalar(ProductOperand a, size_t rows, size_t inner, ProductOperand b, size_t n, float* c,
                        size_t ldc) {
  for (size_t r = 0; r < rows; ++r) {
    for (size_t k = 0; k < inner; ++k) {
      const float a_value = element(a, r, k);
      for (size_t j = 0; j < n; ++j) c[r * ldc + j] = std::fmaf(a_value, element(b, k, j), c[r * ldc + j]);
    }
  }
}

namespace {

// The widest path this CPU has.
void product(ProductOperand a, size_t rows, size_t inner, ProductOperand b, size_t n, float* c, size_t ldc) {
  if (__builtin_cpu_supports("avx512f")) return add_product_avx512(a, rows, inner, b, n, c, ldc);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return add_product_avx2(a, rows, inner, b, n, c, ldc);
  add_product_scalar(a, rows, inner, b, n, c, ldc);
}

}  // namespace

void add_product(ProductOperand a, size_t rows, size_t inner, ProductOperand b, size_t n, float* c) {
  product(a, rows, inner, b, n, c, n);
}

void add_product_threads(ProductOperand a, size_t rows, size_t inner, ProductOperand b, size_t n, float* c,
                         int threads) {
  // A thread is worth starting for about 2^22 multiply-adds (a millisecond's share or so).
  constexpr size_t kMinProductsPerThread = size_t{1} << 22;
  constexpr size_t kMinRowsPerPart = 32;
  // Columns go to parts in units of a strip pair, four units a part at least, part k taking
  // units [k * units / parts, (k + 1) * units / parts): no two parts differ by more than a unit.
  constexpr size_t kColumnsPerUnit = 32;
  constexpr size_t kMinUnitsPerPart = 4;
  const size_t parts = part_count(rows * inner * n, threads, kMinProductsPerThread);
  // Split the columns first: a part that owns columns packs only its own strips of B, where
  // parts that own rows each pack all of B (T threads would read B T times: on a host whose
  // cores share the memory bus, the weights' traffic, not the multiply-adds, set the time).
  // The parts the columns cannot take split the rows, in whole register blocks: the column
  // parts then divide the parts, so that every thread gets a block, unless the rows are too few
  // to split (then as many column parts as the columns allow).
  const size_t units = (n + kColumnsPerUnit - 1) / kColumnsPerUnit;
  const size_t most_column_parts = std::max<size_t>(1, std::min(parts, units / kMinUnitsPerPart));
  size_t column_parts = most_column_parts;
  if (rows >= 2 * kMinRowsPerPart) {
    while (parts % column_parts != 0) --column_parts;
  }
  const size_t row_parts = std::max<size_t>(1, std::min(parts / column_parts, rows / kMinRowsPerPart));
  if (row_parts * column_parts == 1) return add_product(a, rows, inner, b, n, c);
  const size_t rows_per_part = ((rows + row_parts - 1) / row_parts + kBlockRows - 1) / kBlockRows * kBlockRows;
  const size_t row_count = (rows + rows_per_part - 1) / rows_per_part;
  run_in_parts(row_count * column_parts, [&](size_t k) {
    const size_t first_row = (k / column_parts) * rows_per_part;
    const size_t column_part = k % column_parts;
    const size_t first_column = column_part * units / column_parts * kColumnsPerUnit;
    const size_t end_row = std::min(rows, first_row + rows_per_part);
    const size_t end_column = std::min(n, (column_part + 1) * units / column_parts * kColumnsPerUnit);
    const ProductOperand rows_of_a{a.data + first_row * a.row_stride, a.row_stride, a.column_stride};
    const ProductOperand columns_of_b{b.data + first_column * b.column_stride, b.row_stride, b.column_stride};
    product(rows_of_a, end_row - first_row, inner, columns_of_b, end_column - first_column, c + first_row * n + first_column,
            n);
  });
}

void add_rows_times_matrix(const float* a, size_t rows, size_t inner, const float* b, size_t n, float* c) {
  add_product(ProductOperand::row_major(a, inner), rows, inner, ProductOperand::row_major(b, n), n, c);
}

void add_scaled(float a, const float* x, float* y, size_t n) {
  if (__builtin_cpu_supports("avx512f")) return add_scaled_avx512(a, x, y, n);
  if (__builtin_cpu_supports("avx2")) return add_scaled_avx2(a, x, y, n);
  add_scaled_scalar(a, x, y, n);
}

}  // namespace zerosim
