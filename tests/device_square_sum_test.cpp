// The device's exact sum of squares gives the CPU's bins (labelled "gpu"): any size around
// the per-block limit, denormals, huge values, infinities and NaNs.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "core/cuda/cuda_probe.h"
#include "core/cuda/device_square_sum.h"

#if defined(ZEROSIM_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

#include "tests/cuda_devices.h"

namespace zerosim {
namespace {

#if defined(ZEROSIM_HAVE_CUDA)

TEST(DeviceSquareSum, GivesTheCpuBinsForAnyValuesAndSizes) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  std::mt19937 random(13);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  DeviceSquareSummer reused;  // one scratch across every size, growing and shrinking
  for (const size_t count : {size_t{1}, size_t{1000}, size_t{65536}, size_t{65539}, size_t{5000003}, size_t{777}}) {
    for (const int kind : {0, 1, 2}) {  // gradients; arbitrary bit patterns (denormals, huge, inf, NaN); finite extremes
      SCOPED_TRACE(testing::Message() << count << " values of kind " << kind);
      std::vector<float> values(count);
      for (float& value : values) {
        if (kind == 0) value = normal(random) * 1e-3f;
        else if (kind == 1) value = std::bit_cast<float>(any_bits(random));
        else value = (random() % 2 == 0) ? std::numeric_limits<float>::max() : std::numeric_limits<float>::denorm_min();
      }
      ExactSquareSum cpu;
      cpu.add_squares(values);
      float* device = nullptr;
      ASSERT_EQ(cudaMalloc(&device, count * sizeof(float)), cudaSuccess);
      cudaMemcpy(device, values.data(), count * sizeof(float), cudaMemcpyHostToDevice);
      ExactSquareSum gpu;
      ASSERT_TRUE(device_add_squares(device, static_cast<int64_t>(count), gpu).ok());
      ExactSquareSum gpu_reused;
      ASSERT_TRUE(reused.add_squares(device, static_cast<int64_t>(count), gpu_reused, nullptr).ok());
      // From the second value on: an array that is not 16-byte aligned takes single loads.
      ExactSquareSum cpu_unaligned, gpu_unaligned;
      cpu_unaligned.add_squares(std::span<const float>(values).subspan(1));
      ASSERT_TRUE(reused.add_squares(device + 1, static_cast<int64_t>(count) - 1, gpu_unaligned, nullptr).ok());
      cudaFree(device);
      std::array<std::byte, ExactSquareSum::kSerializedBytes> cpu_unaligned_bytes{}, gpu_unaligned_bytes{};
      cpu_unaligned.serialize(cpu_unaligned_bytes);
      gpu_unaligned.serialize(gpu_unaligned_bytes);
      EXPECT_EQ(cpu_unaligned_bytes, gpu_unaligned_bytes) << "from an unaligned start";
      std::array<std::byte, ExactSquareSum::kSerializedBytes> cpu_bytes{}, gpu_bytes{};
      cpu.serialize(cpu_bytes);
      gpu.serialize(gpu_bytes);
      EXPECT_EQ(cpu_bytes, gpu_bytes);
      std::array<std::byte, ExactSquareSum::kSerializedBytes> reused_bytes{};
      gpu_reused.serialize(reused_bytes);
      EXPECT_EQ(cpu_bytes, reused_bytes) << "with scratch kept from the previous sizes";
      EXPECT_EQ(std::bit_cast<uint64_t>(cpu.to_double()), std::bit_cast<uint64_t>(gpu.to_double()));
    }
  }
}

#else

TEST(DeviceSquareSum, TheStubSaysTheBackendIsAbsent) {
  ExactSquareSum sum;
  EXPECT_EQ(device_add_squares(nullptr, 1, sum).code(), StatusCode::kFailedPrecondition);
  DeviceSquareSummer summer;
  EXPECT_EQ(summer.add_squares(nullptr, 1, sum, nullptr).code(), StatusCode::kFailedPrecondition);
}

#endif

}  // namespace
}  // namespace zerosim
