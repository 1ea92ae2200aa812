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
// step apart, so it keeps one pointer and one stride, not an address per element: the 8 x 8
// patches already hold 64 sums and the next tile's operands in registers.
template <int kExtent, int kThreads, bool kInnerContiguous>
struct OperandStager {
  static constexpr int kLoads = kInnerTile * kExtent / kThreads;
  static constexpr int kInnerStep = kInnerContiguous ? 0 : kThreads / kExtent;  // per element, in the tile
  static constexpr int kExtentStep = kInnerContiguous ? kThreads / kInnerTile : 0;
  static_assert(kLoads * kThreads == kInnerTile * kExtent, "every thread stages the same number of elements");
  static_assert(kInnerContiguous ? kThreads % kInnerTile == 0 : kThreads % kExtent == 0,
                "a thread's elements lie a fixed step apart");

  int first_inner, first_place;  // this thread's first element in the tile
  const float* first;            // that element in global memory, for the inner tile at 0
  int64_t leading;               // the operand's row length in memory
  int64_t step;                  // elements between this thread's consecutive elements
  bool extent_in_range[kLoads];  // the element's row (column) exists
  int64_t inner;
  float next[kLoads];

  // `origin`: the operand's storage; `leading_elements`: its row length there; `start`: the tile's
  // first row (column); `extent`: the operand's rows (columns).
  __device__ OperandStager(const float* origin, int64_t leading_elements, int64_t start, int64_t extent, int64_t inner_extent,
                           int thread)
      : leading(leading_elements), inner(inner_extent) {
    first_inner = kInnerContiguous ? thread % kInnerTile : thread / kExtent;
    first_place = kInnerContiguous ? thread / kInnerTile : thread % kExtent;
    first = kInnerContiguous ? origin + (start + first_place) * leading + first_inner
                             : origin + first_inner * leading + start + first_place;
    step = kInnerContiguous ? kExtentStep * leading : kInnerStep * leading;
#pragma unroll
    for (int q = 0; q < kLoads; ++q) extent_in_range[q] = start + first_place + q * kExtentStep < extent;
  }
  // The inner tile starting at k0 into registers (zeros outside the operand).
  __device__ void load(int64_t k0) {
    const float* from = first + (kInnerContiguous ? k0 : k0 * leading);
#pragma unroll
    for (int q = 0; q < kLoads; ++q, from += step) {
      next[q] = extent_in_range[q] && k0 + first_inner + q * kInnerStep < inner ? *from : 0.0f;
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
template <int kRows, int kColumns, int kThreads, bool kATransposed, bool kBTransposed>
__global__ void __launch_bounds__(kThreads)
    ordered_product_kernel(int64_t rows, int64_t columns, int64_t inner, const float* a, const float* b, float* c) {
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
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRows, column0 = static_cast<int64_t>(blockIdx.x) * kColumns;
  const int64_t my_row0 = row0 + ty * kThreadRows;
  // Column j of this thread's patch, counted from the tile's first column.
  auto patch_column = [&](int j) { return (j / 4) * kGroupStride + tx * 4 + j % 4; };
  // A's inner index is contiguous in memory unless A is stored transposed; B's only when B is.
  OperandStager<kRows, kThreads, !kATransposed> a_stager(a, kATransposed ? rows : inner, row0, rows, inner, thread);
  OperandStager<kColumns, kThreads, kBTransposed> b_stager(b, kBTransposed ? inner : columns, column0, columns, inner,
                                                            thread);
  float sums[kThreadRows][kThreadColumns];
#pragma unroll
  for (int i = 0; i < kThreadRows; ++i) {
#pragma unroll
    for (int j = 0; j < kThreadColumns; ++j) {
      const int64_t r = my_row0 + i, col = column0 + patch_column(j);
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
  a_stager.load(0);
  b_stager.load(0);
  a_stager.stage(a_tile[0]);
  b_stager.stage(b_tile[0]);
  __syncthreads();
  int buffer = 0;
  for (int64_t k0 = 0; k0 < inner; k0 += kInnerTile) {
    const bool more = k0 + kInnerTile < inner;
    if (more) {
      a_stager.load(k0 + kInnerTile);
      b_stager.load(k0 + kInnerTile);
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
      const int64_t r = my_row0 + i, col = column0 + patch_column(j);
      if (r < rows && col < columns) c[r * columns + col] = sums[i][j];
    }
  }
}

template <int kRows, int kColumns, int kThreads>
cudaError_t launch(int64_t rows, int64_t columns, int64_t inner, DeviceOperand a, DeviceOperand b, float* c,
                   cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((columns + kColumns - 1) / kColumns),
                  static_cast<unsigned>((rows + kRows - 1) / kRows));
  if (a.transposed && b.transposed) {
    ordered_product_kernel<kRows, kColumns, kThreads, true, true><<<grid, kThreads, 0, stream>>>(rows, columns, inner, a.data, b.data, c);
  } else if (a.transposed) {
    ordered_product_kernel<kRows, kColumns, kThreads, true, false><<<grid, kThreads, 0, stream>>>(rows, columns, inner, a.data, b.data, c);
  } else if (b.transposed) {
    ordered_product_kernel<kRows, kColumns, kThreads, false, true><<<grid, kThreads, 0, stream>>>(rows, columns, inner, a.data, b.data, c);
  } else {
    ordered_product_kernel<kRows, kColumns, kThreads, false, false><<<grid, kThreads, 0, stream>>>(rows, columns, inner, a.data, b.data, c);
  }
  return cudaGetLastError();
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

OrderedProductTile ordered_product_tile(int64_t rows, int64_t columns, int multiprocessors) {
  // 128 x 128 where its tiles fill the GPU twice over, else 64 x 64 in 4 x 4 patches: a
  // product of 1,024 x 768 outputs has only 48 tiles of 128 x 128.
  const int64_t large_tiles = ((rows + 127) / 128) * ((columns + 127) / 128);
  return large_tiles >= 2 * static_cast<int64_t>(multiprocessors) ? OrderedProductTile::k128x128
                                                                  : OrderedProductTile::k64x64Patch4x4;
}

cudaError_t launch_ordered_product(OrderedProductTile tile, int64_t rows, int64_t columns, int64_t inner,
                                   DeviceOperand a, DeviceOperand b, float* c, cudaStream_t stream) {
  if (rows <= 0 || columns <= 0 || inner <= 0) return cudaSuccess;
  if (rows > kOrderedProductMaxRows || (columns + 63) / 64 > int64_t{0x7fffffff}) return cudaErrorInvalidValue;
  switch (tile) {
    case OrderedProductTile::k128x128: return launch<128, 128, 256>(rows, columns, inner, a, b, c, stream);
    case OrderedProductTile::k128x64: return launch<128, 64, 128>(rows, columns, inner, a, b, c, stream);
    case OrderedProductTile::k64x128: return launch<64, 128, 128>(rows, columns, inner, a, b, c, stream);
    case OrderedProductTile::k64x64: return launch<64, 64, 64>(rows, columns, inner, a, b, c, stream);
    case OrderedProductTile::k64x64Patch4x4: return launch<64, 64, 256>(rows, columns, inner, a, b, c, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace zerosim
