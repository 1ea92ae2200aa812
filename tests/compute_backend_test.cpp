// The CPU compute backend's own work beside the model kernels: AdamW on a rank's threads.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/engine/compute_backend.h"
#include "core/env/random_bits.h"
#include "core/model/model_spec.h"
#include "core/optim/adamw.h"

namespace zerosim {
namespace {

uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

struct AdamState {
  std::vector<float> master, gradient, exp_avg, exp_avg_sq;
};

AdamState make_state(size_t count) {
  AdamState state{std::vector<float>(count), std::vector<float>(count), std::vector<float>(count),
                  std::vector<float>(count)};
  for (size_t k = 0; k < count; ++k) {
    state.master[k] = random_symmetric_unit_float(mix_random_bits(3, 1, k));
    state.gradient[k] = 0.01f * random_symmetric_unit_float(mix_random_bits(3, 2, k));
    state.exp_avg[k] = 0.001f * random_symmetric_unit_float(mix_random_bits(3, 3, k));
    state.exp_avg_sq[k] = 1e-6f * (1.0f + random_symmetric_unit_float(mix_random_bits(3, 4, k)));
  }
  return state;
}

// AdamW split among a rank's threads (ranges of 2^18 elements or more, a count that is no
// multiple of the split) gives one thread's bits for every element, and a step of no elements
// changes nothing.
TEST(ComputeBackend, CpuAdamWOnSeveralThreadsHasOneThreadsBits) {
  const Result<ModelSpec> model = parse_model_spec("8,4,2");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  AdamHyperparameters hyperparameters;
  hyperparameters.weight_decay = 0.01f;
  const AdamStepScalars scalars = make_adam_step_scalars(hyperparameters, 3);
  constexpr size_t kCount = (size_t{1} << 20) + 37;
  AdamState one_thread = make_state(kCount);
  const std::unique_ptr<ComputeBackend> serial = make_cpu_compute_backend(*model, best_simd_path(), 1);
  ASSERT_TRUE(serial->adam_update(scalars, 0.5f, one_thread.master.data(), one_thread.gradient.data(),
                                  one_thread.exp_avg.data(), one_thread.exp_avg_sq.data(), kCount)
                  .ok());
  for (const int threads : {2, 3, 5}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    AdamState state = make_state(kCount);
    const std::unique_ptr<ComputeBackend> backend = make_cpu_compute_backend(*model, best_simd_path(), threads);
    ASSERT_TRUE(backend->adam_update(scalars, 0.5f, state.master.data(), state.gradient.data(), state.exp_avg.data(),
                                     state.exp_avg_sq.data(), kCount)
                    .ok());
    size_t differing = 0;
    for (size_t k = 0; k < kCount; ++k) {
      differing += float_bits(state.master[k]) != float_bits(one_thread.master[k]) ||
                   float_bits(state.exp_avg[k]) != float_bits(one_thread.exp_avg[k]) ||
                   float_bits(state.exp_avg_sq[k]) != float_bits(one_thread.exp_avg_sq[k]);
    }
    EXPECT_EQ(differing, 0u) << differing << " of " << kCount << " elements differ";
    const AdamState untouched = state;
    EXPECT_TRUE(backend->adam_update(scalars, 0.5f, state.master.data(), state.gradient.data(), state.exp_avg.data(),
                                     state.exp_avg_sq.data(), 0)
                    .ok());
    EXPECT_EQ(state.master, untouched.master);
  }
}

}  // namespace
}  // namespace zerosim
