// The deterministic mode's dense product on the GPU: C [rows, columns] = C + A [rows, inner] x
// B [inner, columns], row-major in device memory, each output one left fold over the inner
// index in order from C's value, each step one fused multiply-add rounded once (__fmaf_rn):
// vector_ops' add_product bits, for either operand stored transposed.
//
// Tiling decides only which thread holds which outputs, never the order of a fold, so every
// tile gives the same bits; the tiles differ in speed alone. A block holds a tile of outputs,
// each thread a patch of adjacent ones (8 x 8, or 4 x 4 in the one tile that keeps 256 threads
// on 64 x 64), and the inner index is staged through shared memory 16 at a time. The inner
// index is never split across blocks (that would split a fold), so a product with few outputs
// has few blocks. Which tile is fastest is measured, not derived: ordered_product_tile() is the
// backend's pick, bench/ordered_product_bench times them all on a step's shapes.
//
// CUDA host code: included by the CUDA backend's .cu files, its device tests and benchmarks.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>

namespace zerosim {

// A row-major operand of a product: `transposed` says that the matrix is stored as its
// transpose (so element (row, column) is at data[column * rows + row]).
struct DeviceOperand {
  const float* data = nullptr;
  bool transposed = false;
};

// Output tile per block, and each thread's patch.
enum class OrderedProductTile {
  k128x128,       // 256 threads, 8 x 8 each
  k128x64,        // 128 threads, 8 x 8 each
  k64x128,        // 128 threads, 8 x 8 each
  k64x64,         // 64 threads, 8 x 8 each
  k64x64Patch4x4  // 256 threads, 4 x 4 each
};
inline constexpr std::array<OrderedProductTile, 5> kOrderedProductTiles = {
    OrderedProductTile::k128x128, OrderedProductTile::k128x64, OrderedProductTile::k64x128, OrderedProductTile::k64x64,
    OrderedProductTile::k64x64Patch4x4};

// "128x128", "64x64/4x4", ...: the tile as the benchmark prints it.
const char* ordered_product_tile_name(OrderedProductTile tile);

// The most rows a launch takes: every tile is at least 64 rows tall, and a grid has at most
// 65,535 tiles down.
inline constexpr int64_t kOrderedProductMaxRows = int64_t{64} * 65535;

// The tile the backend uses, for every shape (the measurement that chose it is in the definition).
OrderedProductTile ordered_product_tile();

// The kernel's index arithmetic. 32-bit indices where every element a launch addresses (its
// tiles' padding included) has an index below 2^31 save the 8 x 8 patches enough registers to
// fit another block on an SM; larger products need 64-bit ones. Both give the same bits; kWide
// lets the tests hold the 64-bit kernels to that on small shapes.
enum class OrderedProductIndex { kNarrowestFitting, kWide };

// Whether a launch of rows x columns outputs over `inner` in `tile` may index in 32 bits: it
// addresses rows and columns up to a tile past the last and the inner index up to a staging
// tile past its end, and every such element's index in A, B and C must be below 2^31.
bool ordered_product_fits_32_bit_indices(OrderedProductTile tile, int64_t rows, int64_t columns, int64_t inner);

// Enqueues the product on `stream` in `tile`; returns the launch's error. rows must be at most
// kOrderedProductMaxRows and the columns fit 2^31 - 1 tiles of 64 (cudaErrorInvalidValue
// otherwise); an empty product enqueues nothing.
cudaError_t launch_ordered_product(OrderedProductTile tile, int64_t rows, int64_t columns, int64_t inner,
                                   DeviceOperand a, DeviceOperand b, float* c, cudaStream_t stream,
                                   OrderedProductIndex index = OrderedProductIndex::kNarrowestFitting);

}  // namespace zerosim
