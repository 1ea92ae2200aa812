// The device casts give the CPU casts' bits (labelled "gpu"): every fp16 and bf16 pattern to
// fp32, and a sweep of fp32 patterns (every 251st, plus the boundaries) to fp16 and bf16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
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

// The batch tests' jobs: 40 (more than one launch holds), sizes around a block's threads and past
// the blocks a job gets, an empty job among them, laid out one after another with one sentinel
// element after each, each job's first element at a multiple of `alignment` elements (4: every
// job takes the kernel's four-element path; 1: most take the element-wise one).
struct BatchJobs {
  std::vector<int64_t> counts, offsets;
  int64_t total = 0;
};
BatchJobs batch_jobs(int64_t alignment) {
  BatchJobs jobs;
  for (int j = 0; j < 40; ++j) {
    const int64_t sizes[] = {1, 255, 256, 257, 0, 4099, 2048 * 256 + 13, 65536, 3, 768};
    jobs.counts.push_back(sizes[j % 10] + j / 10);
  }
  jobs.counts[4] = 0;
  for (const int64_t count : jobs.counts) {
    jobs.total = (jobs.total + alignment - 1) / alignment * alignment;
    jobs.offsets.push_back(jobs.total);
    jobs.total += count + 1;
  }
  return jobs;
}

void expect_batch_widenings_match_single_ones(const BatchJobs& jobs) {
  const auto& [counts, offsets, total] = jobs;
  std::vector<uint32_t> source_words(static_cast<size_t>(total));
  for (size_t k = 0; k < source_words.size(); ++k) source_words[k] = static_cast<uint32_t>((k + 1) * 2654435761u);
  std::byte* d_source = nullptr;
  float* d_single = nullptr;
  float* d_batch = nullptr;
  const size_t float_bytes = static_cast<size_t>(total) * sizeof(float);
  ASSERT_EQ(cudaMalloc(&d_source, float_bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_single, float_bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_batch, float_bytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_source, source_words.data(), float_bytes, cudaMemcpyHostToDevice), cudaSuccess);
  for (const DType dtype : {DType::kFp16, DType::kBf16, DType::kFp32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const size_t element_bytes = dtype_size_bytes(dtype);
    ASSERT_EQ(cudaMemset(d_single, 0x5a, float_bytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(d_batch, 0x5a, float_bytes), cudaSuccess);
    std::vector<DeviceWidening> jobs;
    for (size_t j = 0; j < counts.size(); ++j) {
      const std::byte* source = d_source + static_cast<size_t>(offsets[j]) * element_bytes;
      ASSERT_TRUE(device_cast_to_fp32(dtype, source, d_single + offsets[j], counts[j]).ok());
      jobs.push_back(DeviceWidening{source, d_batch + offsets[j], counts[j]});
    }
    ASSERT_TRUE(device_cast_to_fp32_batch(dtype, jobs).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint32_t> single(static_cast<size_t>(total)), batch(static_cast<size_t>(total));
    ASSERT_EQ(cudaMemcpy(single.data(), d_single, float_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(batch.data(), d_batch, float_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t j = 0; j < counts.size(); ++j) {
      const size_t first = static_cast<size_t>(offsets[j]);
      for (int64_t k = 0; k <= counts[j]; ++k) {  // the sentinel too: 0x5a5a5a5a in both
        ASSERT_EQ(batch[first + static_cast<size_t>(k)], single[first + static_cast<size_t>(k)])
            << "job " << j << " of " << counts[j] << " elements, element " << k << "; replay: ctest -R DeviceCast";
      }
      ASSERT_EQ(batch[first + static_cast<size_t>(counts[j])], 0x5a5a5a5au) << "job " << j << " wrote past its end";
    }
  }
  const DeviceWidening negative{d_source, d_batch, -1};
  const Status refused = device_cast_to_fp32_batch(DType::kBf16, std::span<const DeviceWidening>(&negative, 1));
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("job 0"), std::string::npos) << refused.to_string();
  cudaFree(d_source);
  cudaFree(d_single);
  cudaFree(d_batch);
}

void expect_batch_narrowings_give_the_cpu_casts_bits(const BatchJobs& jobs) {
  const auto& [counts, offsets, total] = jobs;
  std::vector<float> source(static_cast<size_t>(total));
  for (size_t k = 0; k < source.size(); ++k) {
    const uint32_t word = static_cast<uint32_t>((k + 1) * 2654435761u);
    std::memcpy(&source[k], &word, sizeof word);
  }
  float* d_source = nullptr;
  std::byte* d_batch = nullptr;
  const size_t float_bytes = static_cast<size_t>(total) * sizeof(float);
  ASSERT_EQ(cudaMalloc(&d_source, float_bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_batch, float_bytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_source, source.data(), float_bytes, cudaMemcpyHostToDevice), cudaSuccess);
  for (const DType dtype : {DType::kFp16, DType::kBf16, DType::kFp32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const size_t element_bytes = dtype_size_bytes(dtype);
    ASSERT_EQ(cudaMemset(d_batch, 0x5a, float_bytes), cudaSuccess);
    std::vector<DeviceNarrowing> jobs;
    for (size_t j = 0; j < counts.size(); ++j) {
      jobs.push_back(DeviceNarrowing{d_source + offsets[j], d_batch + static_cast<size_t>(offsets[j]) * element_bytes,
                                     counts[j]});
    }
    ASSERT_TRUE(device_cast_from_fp32_batch(dtype, jobs).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<std::byte> batch(static_cast<size_t>(total) * element_bytes), expected(batch.size());
    ASSERT_EQ(cudaMemcpy(batch.data(), d_batch, batch.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    cast_from_fp32(dtype, source.data(), expected.data(), source.size());
    for (size_t j = 0; j < counts.size(); ++j) {
      const size_t first = static_cast<size_t>(offsets[j]) * element_bytes;
      const size_t bytes = static_cast<size_t>(counts[j]) * element_bytes;
      ASSERT_EQ(std::memcmp(batch.data() + first, expected.data() + first, bytes), 0)
          << "job " << j << " of " << counts[j] << " elements; replay: ctest -R DeviceCast";
      for (size_t b = 0; b < element_bytes; ++b) {
        ASSERT_EQ(batch[first + bytes + b], std::byte{0x5a}) << "job " << j << " wrote past its end";
      }
    }
  }
  const DeviceNarrowing negative{d_source, d_batch, -1};
  const Status refused = device_cast_from_fp32_batch(DType::kBf16, std::span<const DeviceNarrowing>(&negative, 1));
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("job 0"), std::string::npos) << refused.to_string();
  cudaFree(d_source);
  cudaFree(d_batch);
}

// A batch's widenings give each single widening's bits and write nothing past a destination:
// 40 jobs (more than one launch holds), sizes around a block's threads and past the blocks a job
// gets, an empty job among them, each dtype, jobs at any element and at 16-byte boundaries.
TEST(DeviceCast, ABatchOfWideningsGivesEachSingleWideningsBits) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  for (const int64_t alignment : {1, 4}) {
    SCOPED_TRACE(testing::Message() << "jobs aligned to " << alignment << " elements");
    expect_batch_widenings_match_single_ones(batch_jobs(alignment));
  }
}

// The narrowing batch (the fast mode's product operands): each job's elements are the CPU cast's
// bits, and no job writes past its end, on the element-wise and the four-element paths.
TEST(DeviceCast, ABatchOfNarrowingsGivesTheCpuCastsBits) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  for (const int64_t alignment : {1, 4}) {
    SCOPED_TRACE(testing::Message() << "jobs aligned to " << alignment << " elements");
    expect_batch_narrowings_give_the_cpu_casts_bits(batch_jobs(alignment));
  }
}

// Rows narrowed into a longer stride (a product's padded operand): each row is the CPU cast's
// bits of its source row, read from a stride longer than the row too, and the destination's
// padding is zeros (written over a filled buffer); strides that take four elements a thread and
// one that does not (7), more rows than a grid's y extent and rows longer than its x extent take
// the kernel's paths and loops. A stride shorter than a row is refused by name.
TEST(DeviceCast, RowsNarrowedIntoAPaddedStrideGiveTheCpuCastsBits) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  struct Shape {
    int64_t rows, row_elements, source_stride, destination_stride;
  };
  for (const Shape shape : {Shape{1, 1, 1, 8}, Shape{210, 301, 301, 304}, Shape{3, 300001, 300004, 300008},
                            Shape{70001, 5, 7, 8}, Shape{9, 5, 5, 7}, Shape{4, 8, 8, 8}}) {
    SCOPED_TRACE(testing::Message() << shape.rows << " rows of " << shape.row_elements << ", read "
                                    << shape.source_stride << " apart, written " << shape.destination_stride
                                    << " apart; replay: ctest -R DeviceCast");
    std::vector<float> source(static_cast<size_t>(shape.rows * shape.source_stride));
    for (size_t k = 0; k < source.size(); ++k) {
      const uint32_t word = static_cast<uint32_t>((k + 7) * 2654435761u);
      std::memcpy(&source[k], &word, sizeof word);
    }
    float* d_source = nullptr;
    std::byte* d_destination = nullptr;
    const size_t destination_capacity = static_cast<size_t>(shape.rows * shape.destination_stride) * sizeof(float);
    ASSERT_EQ(cudaMalloc(&d_source, source.size() * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&d_destination, destination_capacity), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_source, source.data(), source.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    for (const DType dtype : {DType::kFp16, DType::kBf16, DType::kFp32}) {
      SCOPED_TRACE(dtype_name(dtype));
      const size_t element_bytes = dtype_size_bytes(dtype);
      const size_t destination_bytes = static_cast<size_t>(shape.rows * shape.destination_stride) * element_bytes;
      ASSERT_EQ(cudaMemset(d_destination, 0x5a, destination_bytes), cudaSuccess);
      const Status cast = device_cast_rows_from_fp32(dtype, d_source, shape.rows, shape.row_elements, shape.source_stride,
                                                     d_destination, shape.destination_stride);
      ASSERT_TRUE(cast.ok()) << cast.to_string();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<std::byte> written(destination_bytes), expected(destination_bytes, std::byte{0});
      ASSERT_EQ(cudaMemcpy(written.data(), d_destination, destination_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      for (int64_t row = 0; row < shape.rows; ++row) {
        cast_from_fp32(dtype, source.data() + row * shape.source_stride,
                       expected.data() + static_cast<size_t>(row * shape.destination_stride) * element_bytes,
                       static_cast<size_t>(shape.row_elements));
      }
      const auto differs = std::mismatch(written.begin(), written.end(), expected.begin());
      ASSERT_TRUE(differs.first == written.end())
          << "first differing byte " << (differs.first - written.begin()) << ", in row "
          << (differs.first - written.begin()) / static_cast<std::ptrdiff_t>(shape.destination_stride * element_bytes);
    }
    const Status refused = device_cast_rows_from_fp32(DType::kBf16, d_source, shape.rows, shape.row_elements,
                                                      shape.source_stride, d_destination, shape.row_elements - 1);
    EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.message().find(std::to_string(shape.row_elements - 1) + " apart"), std::string::npos)
        << refused.to_string();
    cudaFree(d_source);
    cudaFree(d_destination);
  }
}

#else

TEST(DeviceCast, TheStubSaysTheBackendIsAbsent) {
  EXPECT_EQ(device_cast_to_fp32(DType::kFp16, nullptr, nullptr, 1).code(), StatusCode::kFailedPrecondition);
}

#endif

}  // namespace
}  // namespace zerosim
