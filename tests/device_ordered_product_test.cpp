// The deterministic mode's GPU product gives the CPU's add_product bits in every tile, with
// 32-bit and 64-bit index arithmetic (labelled "gpu": needs a CUDA device): shapes on and off
// the tiles' edges, inner extents on and off the 16-wide staging, either operand stored
// transposed, C starting nonzero, values spread over many binades so that a fold taken in
// another order would round differently.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "core/tensor/vector_ops.h"

#if defined(ZEROSIM_HAVE_CUDA)
#include <cuda_runtime.h>

#include "core/cuda/device_array.h"
#include "core/cuda/ordered_product.h"
#endif

#include "tests/cuda_devices.h"

namespace zerosim {
namespace {

#if defined(ZEROSIM_HAVE_CUDA)

struct Shape {
  int64_t rows, columns, inner;
};

std::vector<float> spread_values(size_t count, std::mt19937& random) {
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-12, 12);
  std::vector<float> values(count);
  for (float& value : values) value = std::ldexp(unit(random), binade(random));
  return values;
}

// The product on the device in `tile`, C copied back.
std::vector<float> device_product(OrderedProductTile tile, OrderedProductIndex index, const Shape& shape,
                                  const std::vector<float>& a, bool a_transposed, const std::vector<float>& b,
                                  bool b_transposed, const std::vector<float>& c) {
  DeviceArray a_device, b_device, c_device;
  EXPECT_EQ(a_device.reserve(a.size() * sizeof(float)), cudaSuccess);
  EXPECT_EQ(b_device.reserve(b.size() * sizeof(float)), cudaSuccess);
  EXPECT_EQ(c_device.reserve(c.size() * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(a_device.as<float>(), a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(b_device.as<float>(), b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(c_device.as<float>(), c.data(), c.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(launch_ordered_product(tile, shape.rows, shape.columns, shape.inner, {a_device.as<float>(), a_transposed},
                                   {b_device.as<float>(), b_transposed}, c_device.as<float>(), nullptr, index),
            cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> result(c.size());
  EXPECT_EQ(cudaMemcpy(result.data(), c_device.as<float>(), c.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return result;
}

TEST(DeviceOrderedProduct, EveryTileGivesTheCpuBitsInEveryLayout) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  const Shape shapes[] = {
      {1, 1, 1},       {7, 130, 33},   {129, 65, 17},  {64, 64, 16},   {128, 128, 32},
      {200, 300, 100}, {257, 129, 15}, {65, 513, 48},  {3, 1000, 768}, {300, 5, 1025},
  };
  std::mt19937 random(47);
  for (const Shape& shape : shapes) {
    const auto r = static_cast<size_t>(shape.rows), n = static_cast<size_t>(shape.columns),
               k = static_cast<size_t>(shape.inner);
    const std::vector<float> a = spread_values(r * k, random), b = spread_values(k * n, random),
                             c = spread_values(r * n, random);
    for (const bool a_transposed : {false, true}) {
      for (const bool b_transposed : {false, true}) {
        const ProductOperand a_view =
            a_transposed ? ProductOperand::transpose_of(a.data(), r) : ProductOperand::row_major(a.data(), k);
        const ProductOperand b_view =
            b_transposed ? ProductOperand::transpose_of(b.data(), k) : ProductOperand::row_major(b.data(), n);
        std::vector<float> expected = c;
        add_product(a_view, r, k, b_view, n, expected.data());
        for (const OrderedProductTile tile : kOrderedProductTiles) {
          for (const OrderedProductIndex index : {OrderedProductIndex::kNarrowestFitting, OrderedProductIndex::kWide}) {
            SCOPED_TRACE(testing::Message() << shape.rows << " x " << shape.columns << " x " << shape.inner << ", A"
                                            << (a_transposed ? "^T" : "") << " B" << (b_transposed ? "^T" : "")
                                            << ", tile " << ordered_product_tile_name(tile) << ", "
                                            << (index == OrderedProductIndex::kWide ? "64" : "32") << "-bit indices");
            const std::vector<float> got = device_product(tile, index, shape, a, a_transposed, b, b_transposed, c);
            size_t differing = 0, first = got.size();
            for (size_t i = 0; i < got.size(); ++i) {
              if (std::memcmp(&got[i], &expected[i], sizeof(float)) != 0) {
                if (differing++ == 0) first = i;
              }
            }
            EXPECT_EQ(differing, 0u) << "first at row " << first / n << ", column " << first % n << ": GPU "
                                     << got[first] << ", CPU " << expected[first];
          }
        }
      }
    }
  }
}

TEST(DeviceOrderedProduct, ThirtyTwoBitIndicesOnlyWhereEveryAddressedElementFits) {
  // Host arithmetic: no device needed. A launch addresses a tile past the last row and column
  // and a staging tile (16) past the inner extent; each of A, B and C must stay below 2^31.
  constexpr int64_t kLimit = int64_t{0x7fffffff};
  for (const OrderedProductTile tile : kOrderedProductTiles) {
    SCOPED_TRACE(ordered_product_tile_name(tile));
    const bool tall = tile == OrderedProductTile::k128x128 || tile == OrderedProductTile::k128x64;
    const bool wide = tile == OrderedProductTile::k128x128 || tile == OrderedProductTile::k64x128;
    const int64_t tile_rows = tall ? 128 : 64, tile_columns = wide ? 128 : 64;
    // A: (rows + tile) x (inner + 16).
    const int64_t inner = 768, most_rows = kLimit / (inner + 16) - tile_rows;
    EXPECT_TRUE(ordered_product_fits_32_bit_indices(tile, most_rows, 1, inner));
    EXPECT_FALSE(ordered_product_fits_32_bit_indices(tile, most_rows + 1, 1, inner));
    // B: (inner + 16) x (columns + tile).
    const int64_t most_columns = kLimit / (inner + 16) - tile_columns;
    EXPECT_TRUE(ordered_product_fits_32_bit_indices(tile, 1, most_columns, inner));
    EXPECT_FALSE(ordered_product_fits_32_bit_indices(tile, 1, most_columns + 1, inner));
    // C: (rows + tile) x (columns + tile), with a short inner extent.
    const int64_t rows = 100'000, most_c_columns = kLimit / (rows + tile_rows) - tile_columns;
    EXPECT_TRUE(ordered_product_fits_32_bit_indices(tile, rows, most_c_columns, 1));
    EXPECT_FALSE(ordered_product_fits_32_bit_indices(tile, rows, most_c_columns + 1, 1));
    // No overflow in the test itself: an inner extent near 2^62 is simply wide.
    EXPECT_FALSE(ordered_product_fits_32_bit_indices(tile, 64, 64, int64_t{1} << 62));
  }
}

// Values over 25 binades, fast enough for billions: sign, exponent and mantissa drawn directly.
void fill_spread_fast(std::vector<float>& values, uint64_t seed) {
  uint64_t state = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (float& value : values) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    const auto exponent = static_cast<uint32_t>(127 - 12 + (state >> 32) % 25);
    const uint32_t sign = static_cast<uint32_t>(state >> 63) << 31;
    const uint32_t bits = sign | (exponent << 23) | (static_cast<uint32_t>(state) & 0x7fffffu);
    std::memcpy(&value, &bits, sizeof(float));
  }
}

TEST(DeviceOrderedProduct, ProductsAtAndPastThe32BitLimitGiveTheCpuBits) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  // The backend's tile on A [rows, 768] x B [768, 1]: the most rows that index in 32 bits, and
  // enough rows that A's own indices pass 2^31 (the 64-bit kernels on real large indices).
  const OrderedProductTile tile = ordered_product_tile();
  constexpr int64_t kInner = 768;
  int64_t narrow_rows = 1;
  while (ordered_product_fits_32_bit_indices(tile, narrow_rows * 2, 1, kInner)) narrow_rows *= 2;
  for (int64_t step = narrow_rows / 2; step > 0; step /= 2) {
    if (ordered_product_fits_32_bit_indices(tile, narrow_rows + step, 1, kInner)) narrow_rows += step;
  }
  const int64_t wide_rows = (int64_t{1} << 31) / kInner + 4'000;
  ASSERT_FALSE(ordered_product_fits_32_bit_indices(tile, wide_rows, 1, kInner));
  ASSERT_LE(wide_rows, kOrderedProductMaxRows);
  std::vector<float> a(static_cast<size_t>(wide_rows * kInner)), b(kInner);
  fill_spread_fast(a, 1);
  fill_spread_fast(b, 2);
  DeviceArray a_device, b_device, c_device;
  ASSERT_EQ(a_device.reserve(a.size() * sizeof(float)), cudaSuccess) << "needs " << a.size() * 4 / (1 << 30) << " GiB";
  ASSERT_EQ(b_device.reserve(b.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(c_device.reserve(static_cast<size_t>(wide_rows) * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(a_device.as<float>(), a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b_device.as<float>(), b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  for (const int64_t rows : {narrow_rows, wide_rows}) {
    SCOPED_TRACE(testing::Message() << rows << " x 1 x " << kInner << ", "
                                    << (ordered_product_fits_32_bit_indices(tile, rows, 1, kInner) ? "32" : "64")
                                    << "-bit indices");
    const auto r = static_cast<size_t>(rows);
    std::vector<float> expected(r);
    fill_spread_fast(expected, 3);
    ASSERT_EQ(cudaMemcpy(c_device.as<float>(), expected.data(), r * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    add_product_threads(ProductOperand::row_major(a.data(), kInner), r, kInner, ProductOperand::row_major(b.data(), 1),
                        1, expected.data(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    ASSERT_EQ(launch_ordered_product(tile, rows, 1, kInner, {a_device.as<float>(), false},
                                     {b_device.as<float>(), false}, c_device.as<float>(), nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> got(r);
    ASSERT_EQ(cudaMemcpy(got.data(), c_device.as<float>(), r * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    size_t differing = 0, first = r;
    for (size_t i = 0; i < r; ++i) {
      if (std::memcmp(&got[i], &expected[i], sizeof(float)) != 0 && differing++ == 0) first = i;
    }
    EXPECT_EQ(differing, 0u) << "first at row " << first << ": GPU " << got[first] << ", CPU " << expected[first];
  }
}

TEST(DeviceOrderedProduct, AnEmptyInnerLeavesCAndTooManyRowsAreRefused) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 random(5);
  const std::vector<float> c = spread_values(6, random);
  for (const OrderedProductTile tile : kOrderedProductTiles) {
    SCOPED_TRACE(ordered_product_tile_name(tile));
    const std::vector<float> got =
        device_product(tile, OrderedProductIndex::kNarrowestFitting, {2, 3, 0}, {0.0f}, false, {0.0f}, false, c);
    EXPECT_EQ(std::memcmp(got.data(), c.data(), c.size() * sizeof(float)), 0);
    EXPECT_EQ(launch_ordered_product(tile, kOrderedProductMaxRows + 1, 1, 1, {}, {}, nullptr, nullptr),
              cudaErrorInvalidValue);
  }
}

#endif

}  // namespace
}  // namespace zerosim
