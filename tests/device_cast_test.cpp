// The device casts give the CPU casts' bits (labelled "gpu"): every fp16 and bf16 pattern to
// fp32, and a sweep of fp32 patterns (every 251st, plus the boundaries) to fp16 and bf16.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/cuda/cuda_probe.h"
#include "core/cuda/device_cast.h"

#if defined(ZEROSIM_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

#include "tests/cuda_devices.h"

namespace zerosim {
namespace {

#if defined(ZEROSIM_HAVE_CUDA)

TEST(DeviceCast, EveryConversionGivesTheCpuBits) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  std::vector<uint32_t> patterns;
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 251) patterns.push_back(static_cast<uint32_t>(bits));
  for (uint32_t special : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0x477ff000u,
                           0x477fefffu, 0x33000000u, 0x33000001u, 0x387fc000u, 0x00000001u, 0x7f7fffffu}) {
    patterns.push_back(special);
  }
  std::vector<float> values(patterns.size());
  std::memcpy(values.data(), patterns.data(), patterns.size() * sizeof(float));
  const int64_t count = static_cast<int64_t>(values.size());
  float* d_values = nullptr;
  std::byte* d_half = nullptr;
  ASSERT_EQ(cudaMalloc(&d_values, values.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_half, values.size() * 2), cudaSuccess);
  cudaMemcpy(d_values, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice);
  for (const DType dtype : {DType::kFp16, DType::kBf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<std::byte> cpu(values.size() * 2), gpu(values.size() * 2);
    cast_from_fp32(dtype, values.data(), cpu.data(), values.size());
    ASSERT_TRUE(device_cast_from_fp32(dtype, d_values, d_half, count).ok());
    ASSERT_EQ(cudaMemcpy(gpu.data(), d_half, gpu.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(cpu.data(), gpu.data(), cpu.size()), 0) << "fp32 -> " << dtype_name(dtype);
    // Every 16-bit pattern back to fp32.
    std::vector<uint16_t> halves(65536);
    for (uint32_t bits = 0; bits < 65536; ++bits) halves[bits] = static_cast<uint16_t>(bits);
    std::vector<float> cpu_back(65536), gpu_back(65536);
    cast_to_fp32(dtype, reinterpret_cast<const std::byte*>(halves.data()), cpu_back.data(), 65536);
    cudaMemcpy(d_half, halves.data(), 65536 * 2, cudaMemcpyHostToDevice);
    ASSERT_TRUE(device_cast_to_fp32(dtype, d_half, d_values, 65536).ok());
    ASSERT_EQ(cudaMemcpy(gpu_back.data(), d_values, 65536 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(cpu_back.data(), gpu_back.data(), 65536 * sizeof(float)), 0) << dtype_name(dtype) << " -> fp32";
    cudaMemcpy(d_values, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice);
  }
  cudaFree(d_values);
  cudaFree(d_half);
}

#else

TEST(DeviceCast, TheStubSaysTheBackendIsAbsent) {
  EXPECT_EQ(device_cast_to_fp32(DType::kFp16, nullptr, nullptr, 1).code(), StatusCode::kFailedPrecondition);
}

#endif

}  // namespace
}  // namespace zerosim
