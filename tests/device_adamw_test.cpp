// The device AdamW kernel writes the CPU kernel's bits (labelled "gpu": needs a CUDA device).
// Every decay mode, bias correction on and off, clipping multipliers, sizes around the
// vector width and the chunk size, unaligned sub-arrays, many tensors in one launch, and
// values that reach denormals.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/cuda/device_adamw.h"

#include "tests/cuda_devices.h"

namespace zerosim {
namespace {

struct State {
  std::vector<float> params, grads, exp_avg, exp_avg_sq;
};

State random_state(size_t count, uint32_t seed, float scale) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  State state;
  for (size_t i = 0; i < count; ++i) {
    state.params.push_back(normal(random) * scale);
    state.grads.push_back(normal(random) * scale);
    state.exp_avg.push_back(normal(random) * scale * 0.1f);
    state.exp_avg_sq.push_back(std::abs(normal(random)) * scale * scale * 0.01f);
  }
  return state;
}

void expect_same_bits(const std::vector<float>& cpu, const std::vector<float>& gpu, const char* what) {
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (std::memcmp(&cpu[i], &gpu[i], sizeof(float)) != 0) {
      FAIL() << what << "[" << i << "]: CPU " << cpu[i] << " vs GPU " << gpu[i];
    }
  }
}

TEST(DeviceAdamW, WritesTheCpuKernelsBitsInEveryMode) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  for (const bool adamw_mode : {true, false}) {
    for (const float weight_decay : {0.0f, 0.01f}) {
      for (const bool bias_correction : {true, false}) {
        for (const size_t count : {size_t{1}, size_t{3}, size_t{4}, size_t{1023}, size_t{65536 + 5}, size_t{300001}}) {
          for (const float scale : {1.0f, 1e-20f}) {  // 1e-20: moments in the denormal range
            SCOPED_TRACE(testing::Message() << "adamw " << adamw_mode << " wd " << weight_decay << " bc "
                                            << bias_correction << " n " << count << " scale " << scale);
            AdamHyperparameters hyperparameters;
            hyperparameters.learning_rate = 3e-3f;
            hyperparameters.weight_decay = weight_decay;
            hyperparameters.adamw_mode = adamw_mode;
            hyperparameters.bias_correction = bias_correction;
            const AdamStepScalars scalars = make_adam_step_scalars(hyperparameters, 7);
            State cpu = random_state(count, static_cast<uint32_t>(count), scale);
            State gpu = cpu;
            adam_update(SimdPath::kScalar, scalars, 0.75f, cpu.params.data(), cpu.grads.data(), cpu.exp_avg.data(),
                        cpu.exp_avg_sq.data(), count);
            ASSERT_TRUE(device_adam_update_from_host(scalars, 0.75f, gpu.params.data(), gpu.grads.data(),
                                                     gpu.exp_avg.data(), gpu.exp_avg_sq.data(), count)
                            .ok());
            expect_same_bits(cpu.params, gpu.params, "params");
            expect_same_bits(cpu.exp_avg, gpu.exp_avg, "exp_avg");
            expect_same_bits(cpu.exp_avg_sq, gpu.exp_avg_sq, "exp_avg_sq");
          }
        }
      }
    }
  }
}

TEST(DeviceAdamW, ManyUnalignedTensorsInOneCallMatchTheCpu) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  // More than 64 tensors (three launches of at most 32) cut from one flat buffer at odd offsets.
  const size_t total = 500000;
  State cpu = random_state(total, 11, 1.0f);
  State gpu_host = cpu;
  AdamHyperparameters hyperparameters;
  hyperparameters.weight_decay = 0.1f;
  const AdamStepScalars scalars = make_adam_step_scalars(hyperparameters, 3);
  adam_update(SimdPath::kScalar, scalars, 1.0f, cpu.params.data(), cpu.grads.data(), cpu.exp_avg.data(),
              cpu.exp_avg_sq.data(), total);
  std::vector<int64_t> counts;
  size_t offset = 0;
  for (size_t k = 0; offset < total; ++k) {
    const size_t count = std::min(total - offset, 1 + (k * 7919) % 12000);  // odd offsets: unaligned starts
    counts.push_back(static_cast<int64_t>(count));
    offset += count;
  }
  ASSERT_GE(counts.size(), 65u);
  ASSERT_TRUE(device_adam_update_from_host(scalars, 1.0f, gpu_host.params.data(), gpu_host.grads.data(),
                                           gpu_host.exp_avg.data(), gpu_host.exp_avg_sq.data(), total, counts)
                  .ok());
  expect_same_bits(cpu.params, gpu_host.params, "params");
  expect_same_bits(cpu.exp_avg, gpu_host.exp_avg, "exp_avg");
  expect_same_bits(cpu.exp_avg_sq, gpu_host.exp_avg_sq, "exp_avg_sq");
}

}  // namespace
}  // namespace zerosim
