#include "core/cuda/ordered_product.h"

namespace zerosim {
namespace {

constexpr int kInnerTile = 16;
// Each staged row of a tile is padded by four floats: a warp storing an operand whose inner
// index is contiguous in memory writes 16 inner indices of one row or column at once, which
// without the pad all fall in one bank (a 16-way conflict), with it in 2-way pairs. Four keeps
// the patches' 16-byte reads aligned.
constexpr int kPadFloats = 4;

// `kCount` floats from 16-byte aligned shared memory.
template <int kCount>
__device__ inline void load_vector(const float* from, float* to) {
#pragma unroll
  for (int q = 0; q < kCount; q += 4) {
    const float4 v = *reinterpret_cast<const float4*>(from + q);
    to[q] = v.x;
    to[q + 1] = v.y;
    to[q + 2] = v.z;
    to[q + 3] = v.w;
  }
}

// One operand's staging: each thread's share of a tile (kInnerTile inner indices x kExtent rows
// or columns of the operand) travels from global memory into registers (load) while the
// previous tile is folded, then into shared memory (stage). Consecutive threads take the
// operand's contiguous index, so the loads coalesce: the inner index when kInnerContiguous
// (A row-major, B stored transposed), else the rows or columns. A thread's elements lie a fixed
// step apart, so it keeps one pointer, one stride and the count of its elements whose row
// (column) exists, not an address or a flag per element: the 8 x 8 patches already hold 64 sums
// and the next tile's operands in registers, and every register more costs the SM a block.
// Elements outside the operand are staged as zeros; they reach only outputs that are never
// written or inner indices past the fold's end, so what they hold never matters, only that
// they are not read from memory.
template <typename Index, int kExtent, int kThreads, bool kInnerContiguous>
struct OperandStager {
  static constexpr int kLoads = kInnerTile * kExtent / kThreads;
  static constexpr int kInnerStep = kInnerContiguous ? 0 : kThreads / kExtent;  // per element, in the tile
  static constexpr int kExtentStep = kInnerContiguous ? kThreads / kInnerTile : 0;
  static_assert(kLoads * kThreads == kInnerTile * kExtent, "every thread stages the same number of elements");
  static_assert(kInnerContiguous ? kThreads % kInnerTile == 0 : kThreads % kExtent == 0,
                "a thread's elements lie a fixed step apart");

  int first_inner, first_place;  // this thread's first element in the tile
  int places_in_range;           // its elements 0 .. places_in_range - 1 have a row (column)
  const float* first;            // that element in global memory, for the inner tile at 0
  Index leading;                 // the operand's row length in memory
  Index step;                    // elements between this thread's consecutive elements
  float next[kLoads];

  // `origin`: the operand's storage; `leading_elements`: its row length there; `start`: the tile's
  // first row (column); `extent`: the operand's rows (columns).
  __device__ OperandStager(const float* origin, Index leading_elements, Index start, Index extent, int thread)
      : leading(leading_elements) {
    first_inner = kInnerContiguous ? thread % kInnerTile : thread / kExtent;
    first_place = kInnerContiguous ? thread / kInnerTile : thread % kExtent;
    first = kInnerContiguous ? origin + (start + first_place) * leading + first_inner
                             : origin + first_inner * leading + start + first_place;
    step = kInnerContiguous ? kExtentStep * leading : kInnerStep * leading;
    const Index places_left = extent - start - first_place;  // this thread's rows (columns) from its first
    if constexpr (kInnerContiguous) {
      places_in_range =
          places_left <= 0 ? 0 : static_cast<int>(min(Index{kLoads}, (places_left + kExtentStep - 1) / kExtentStep));
    } else {
      places_in_range = places_left > 0 ? kLoads : 0;
    }
  }
  // The inner tile starting at k0 into registers. kWhole: the tile lies inside the inner extent.
  template <bool kWhole>
  __device__ void load(Index k0, Index inner) {
    const float* from = first + (kInnerContiguous ? k0 : k0 * leading);
#pragma unroll
    for (int q = 0; q < kLoads; ++q, from += step) {
      const bool inside = q < places_in_range && (kWhole || k0 + first_inner + q * kInnerStep < inner);
      next[q] = inside ? *from : 0.0f;
    }
  }
  __device__ void load_any(Index k0, Index inner) {
    if (k0 + kInnerTile <= inner) {
      load<true>(k0, inner);
    } else {
      load<false>(k0, inner);
    }
  }
  template <int kRowLength>
  __device__ void stage(float (*tile)[kRowLength]) const {
#pragma unroll
    for (int q = 0; q < kLoads; ++q) tile[first_inner + q * kInnerStep][first_place + q * kExtentStep] = next[q];
  }
};

// A block of kThreads holds a kRows x kColumns tile of outputs. Each thread holds kThreadRows
// adjacent rows and kThreadColumns columns in groups of four adjacent ones; with two groups the
// second lies half a tile to the right, so that the eight threads of a quarter warp read 128
// contiguous bytes of the staged B (with eight adjacent columns they would read every other 16
// bytes of 256 and conflict in pairs). The next inner tile's operands travel into registers
// while the current one is folded, and the staging is double-buffered: one barrier a tile.
// Index: the type of the launch's element indices (OrderedProductIndex says which and why).
template <typename Index, int kRows, int kColumns, int kThreads, bool kATransposed, bool kBTransposed>
__global__ void __launch_bounds__(kThreads)
    ordered_product_kernel(Index rows, Index columns, Index inner, const float* a, const float* b, float* c) {
  constexpr int kThreadColumns = kColumns * kRows / kThreads >= 64 ? 8 : 4;
  constexpr int kThreadRows = kRows * kColumns / kThreads / kThreadColumns;
  constexpr int kColumnGroups = kThreadColumns / 4;
  constexpr int kGroupStride = kColumns / kColumnGroups;
  constexpr int kColumnThreads = kColumns / kThreadColumns;
  static_assert(kThreadRows * kThreadColumns * kThreads == kRows * kColumns, "one patch per thread");
  static_assert(kThreadRows % 4 == 0 && kThreadColumns % 4 == 0, "patches are read as 16-byte vectors");
  __shared__ __align__(16) float a_tile[2][kInnerTile][kRows + kPadFloats];
  __shared__ __align__(16) float b_tile[2][kInnerTile][kColumns + kPadFloats];
  const int thread = static_cast<int>(threadIdx.x);
  const int tx = thread % kColumnThreads, ty = thread / kColumnThreads;
  const Index row0 = static_cast<Index>(blockIdx.y) * kRows, column0 = static_cast<Index>(blockIdx.x) * kColumns;
  const Index my_row0 = row0 + ty * kThreadRows;
  // Column j of this thread's patch, counted from the tile's first column.
  auto patch_column = [&](int j) { return (j / 4) * kGroupStride + tx * 4 + j % 4; };
  // A's inner index is contiguous in memory unless A is stored transposed; B's only when B is.
  OperandStager<Index, kRows, kThreads, !kATransposed> a_stager(a, kATransposed ? rows : inner, row0, rows, thread);
  OperandStager<Index, kColumns, kThreads, kBTransposed> b_stager(b, kBTransposed ? inner : columns, column0, columns,
                                                                   thread);
  float sums[kThreadRows][kThreadColumns];
#pragma unroll
  for (int i = 0; i < kThreadRows; ++i) {
#pragma unroll
    for (int j = 0; j < kThreadColumns; ++j) {
      const Index r = my_row0 + i, col = column0 + patch_column(j);
      sums[i][j] = r < rows && col < columns ? c[r * columns + col] : 0.0f;
    }
  }
  auto fold = [&](int buffer, int kk) {
    float a_values[kThreadRows], b_values[kThreadColumns];
    load_vector<kThreadRows>(&a_tile[buffer][kk][ty * kThreadRows], a_values);
#pragma unroll
    for (int g = 0; g < kColumnGroups; ++g) load_vector<4>(&b_tile[buffer][kk][g * kGroupStride + tx * 4], b_values + 4 * g);
#pragma unroll
    for (int i = 0; i < kThreadRows; ++i) {
#pragma unroll
      for (int j = 0; j < kThreadColumns; ++j) sums[i][j] = __fmaf_rn(a_values[i], b_values[j], sums[i][j]);
    }
  };
  a_stager.load_any(0, inner);
  b_stager.load_any(0, inner);
  a_stager.stage(a_tile[0]);
  b_stager.stage(b_tile[0]);
  __syncthreads();
  int buffer = 0;
  for (Index k0 = 0; k0 < inner; k0 += kInnerTile) {
    const bool more = k0 + kInnerTile < inner;
    if (more) {
      a_stager.load_any(k0 + kInnerTile, inner);
      b_stager.load_any(k0 + kInnerTile, inner);
    }
    if (inner - k0 >= kInnerTile) {
#pragma unroll
      for (int kk = 0; kk < kInnerTile; ++kk) fold(buffer, kk);
    } else {
      const int k_count = static_cast<int>(inner - k0);
      for (int kk = 0; kk < k_count; ++kk) fold(buffer, kk);
    }
    // The other buffer was last read before the previous barrier; this tile's, after the next.
    if (more) {
      a_stager.stage(a_tile[buffer ^ 1]);
      b_stager.stage(b_tile[buffer ^ 1]);
    }
    __syncthreads();
    buffer ^= 1;
  }
#pragma unroll
  for (int i = 0; i < kThreadRows; ++i) {
#pragma unroll
    for (int j = 0; j < kThreadColumns; ++j) {
      const Index r = my_row0 + i, col = column0 + patch_column(j);
      if (r < rows && col < columns) c[r * columns + col] = sums[i][j];
    }
  }
}

// ordered_product_fits_32_bit_indices for a tile of tile_rows x tile_columns outputs.
bool indices_fit_32_bits(int64_t rows, int64_t columns, int64_t inner, int tile_rows, int tile_columns) {
  const int64_t padded_rows = rows + tile_rows, padded_columns = columns + tile_columns;
  const int64_t padded_inner = inner + kInnerTile;
  auto fits = [](int64_t x, int64_t y) { return x <= int64_t{0x7fffffff} / y; };  // x * y < 2^31, without overflow
  return rows >= 0 && columns >= 0 && inner >= 0 && fits(padded_rows, padded_inner) &&
         fits(padded_inner, padded_columns) && fits(padded_rows, padded_columns);
}

template <typename Index, int kRows, int kColumns, int kThreads>
cudaError_t launch_indexed(int64_t rows, int64_t columns, int64_t inner, DeviceOperand a, DeviceOperand b, float* c,
                           cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((columns + kColumns - 1) / kColumns),
                  static_cast<unsigned>((rows + kRows - 1) / kRows));
  const Index m = static_cast<Index>(rows), n = static_cast<Index>(columns), k = static_cast<Index>(inner);
  if (a.transposed && b.transposed) {
    ordered_product_kernel<Index, kRows, kColumns, kThreads, true, true>
        <<<grid, kThreads, 0, stream>>>(m, n, k, a.data, b.data, c);
  } else if (a.transposed) {
    ordered_product_kernel<Index, kRows, kColumns, kThreads, true, false>
        <<<grid, kThreads, 0, stream>>>(m, n, k, a.data, b.data, c);
  } else if (b.transposed) {
    ordered_product_kernel<Index, kRows, kColumns, kThreads, false, true>
        <<<grid, kThreads, 0, stream>>>(m, n, k, a.data, b.data, c);
  } else {
    ordered_product_kernel<Index, kRows, kColumns, kThreads, false, false>
        <<<grid, kThreads, 0, stream>>>(m, n, k, a.data, b.data, c);
  }
  return cudaGetLastError();
}

template <int kRows, int kColumns, int kThreads>
cudaError_t launch(int64_t rows, int64_t columns, int64_t inner, DeviceOperand a, DeviceOperand b, float* c,
                   cudaStream_t stream, OrderedProductIndex index) {
  const bool narrow = index == OrderedProductIndex::kNarrowestFitting &&
                      indices_fit_32_bits(rows, columns, inner, kRows, kColumns);
  return narrow ? launch_indexed<int32_t, kRows, kColumns, kThreads>(rows, columns, inner, a, b, c, stream)
                : launch_indexed<int64_t, kRows, kColumns, kThreads>(rows, columns, inner, a, b, c, stream);
}

}  // namespace

const char* ordered_product_tile_name(OrderedProductTile tile) {
  switch (tile) {
    case OrderedProductTile::k128x128: return "128x128";
    case OrderedProductTile::k128x64: return "128x64";
    case OrderedProductTile::k64x128: return "64x128";
    case OrderedProductTile::k64x64: return "64x64";
    case OrderedProductTile::k64x64Patch4x4: return "64x64/4x4";
  }
  return "unknown";
}

bool ordered_product_fits_32_bit_indices(OrderedProductTile tile, int64_t rows, int64_t columns, int64_t inner) {
  const bool tall = tile == OrderedProductTile::k128x128 || tile == OrderedProductTile::k128x64;
  const bool wide = tile == OrderedProductTile::k128x128 || tile == OrderedProductTile::k64x128;
  return indices_fit_32_bits(rows, columns, inner, tall ? 128 : 64, wide ? 128 : 64);
}

OrderedProductTile ordered_product_tile() {
  // 64 x 128 in 8 x 8 patches: on an H100 it was the fastest tile, or within 1.3 % of it, on
  // every product of a GPT-2 small step, from 768 x 768 outputs (72 tiles for 132 SMs) to the
  // head's 1,024 x 50,257 (bench/ordered_product_bench; docs/benchmarks.md).
  return OrderedProductTile::k64x128;
}

cudaError_t launch_ordered_product(OrderedProductTile tile, int64_t rows, int64_t columns, int64_t inner,
                                   DeviceOperand a, DeviceOperand b, float* c, cudaStream_t stream,
                                   OrderedProductIndex index) {
  if (rows <= 0 || columns <= 0 || inner <= 0) return cudaSuccess;
  if (rows > kOrderedProductMaxRows || (columns + 63) / 64 > int64_t{0x7fffffff}) return cudaErrorInvalidValue;
  switch (tile) {
    case OrderedProductTile::k128x128: return launch<128, 128, 256>(rows, columns, inner, a, b, c, stream, index);
    case OrderedProductTile::k128x64: return launch<128, 64, 128>(rows, columns, inner, a, b, c, stream, index);
    case OrderedProductTile::k64x128: return launch<64, 128, 128>(rows, columns, inner, a, b, c, stream, index);
    case OrderedProductTile::k64x64: return launch<64, 64, 64>(rows, columns, inner, a, b, c, stream, index);
    case OrderedProductTile::k64x64Patch4x4: return launch<64, 64, 256>(rows, columns, inner, a, b, c, stream, index);
  }
  return cudaErrorInvalidValue;
}

}  // namespace zerosim
