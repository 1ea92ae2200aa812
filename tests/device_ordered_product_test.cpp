// The deterministic mode's GPU product gives the CPU's add_product bits in every tile, with
// 32-bit and 64-bit index arithmetic (labelled "gpu": needs a CUDA device): shapes on and off
// the tiles' edges, inner extents on and off the 16-wide staging, either operand stored
// transposed, C starting nonzero, values spread over many binades so that a fold taken in
// another order would round differently.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
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

TEST(DeviceOrderedProduct, AnEmptyInnerLeavesCAndTooManyRowsAreRefused) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 random(5);
  const std::vector<float> c = spread_values(6, random);
  for (const OrderedProductTile tile : kOrderedProductTiles) {
    SCOPED_TRACE(ordered_product_tile_name(tile));
    const std::vector<float> got = device_product(tile, OrderedProductIndex::kNarrowestFitting, {2, 3, 0}, {0.0f}, false, {0.0f}, false, c);
    EXPECT_EQ(std::memcmp(got.data(), c.data(), c.size() * sizeof(float)), 0);
    EXPECT_EQ(launch_ordered_product(tile, kOrderedProductMaxRows + 1, 1, 1, {}, {}, nullptr, nullptr),
              cudaErrorInvalidValue);
  }
}

#endif

}  // namespace
}  // namespace zerosim
