// The transformer's CUDA backend (labelled "gpu": needs a CUDA device). It must give the CPU
// backend's bits: every stage of the plan is run on both with the same weights, tokens, mask
// and starting gradients, and the loss and every gradient tensor are compared bit for bit.
// The fast mode (cuBLAS products) must compute the same function to fp32 rounding and repeat
// its own bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/device_compute_backend.h"
#include "core/env/rng.h"
#include "core/model/gpt.h"
#include "tests/cuda_devices.h"

namespace zerosim {
namespace {

// What one micro-batch through every stage of the plan gives.
struct StageRun {
  float loss = 0.0f;
  std::vector<std::vector<float>> gradients;  // one full tensor per parameter
};

// Weights: GPT-2's initialization plus a seeded perturbation (LayerNorm weights and biases not
// exactly 1 and 0, so every product is exercised).
std::vector<std::vector<float>> perturbed_parameters(const GptSpec& spec, uint64_t seed) {
  std::vector<std::vector<float>> parameters = gpt_initial_parameters(spec, seed);
  for (size_t p = 0; p < parameters.size(); ++p) {
    for (size_t k = 0; k < parameters[p].size(); ++k) {
      parameters[p][k] += 0.05f * random_symmetric_unit_float(mix_random_bits(seed, 0x51 + p, static_cast<uint64_t>(k)));
    }
  }
  return parameters;
}

// Runs the plan's stages on `backend`. The gradients start at seeded nonzero values (the engine
// zeroes them; a backend must add, not write, so a tied parameter gets both uses).
StageRun run_stages(ComputeBackend& backend, const ModelSpec& model, const std::vector<std::vector<float>>& parameters,
                    const std::vector<int32_t>& tokens, int64_t sequences, int64_t length,
                    const std::vector<float>& mask, uint64_t seed) {
  StageRun run;
  for (size_t p = 0; p < parameters.size(); ++p) {
    std::vector<float> start(parameters[p].size());
    for (size_t k = 0; k < start.size(); ++k) start[k] = 1e-3f * random_symmetric_unit_float(mix_random_bits(seed, 0x77 + p, k));
    run.gradients.push_back(std::move(start));
  }
  MicroBatchInput batch;
  batch.samples = sequences;
  batch.tokens = tokens;
  batch.sequence_length = length;
  batch.causal_mask = mask;
  const Status begun = backend.begin_micro_batch(batch);
  EXPECT_TRUE(begun.ok()) << begun.to_string();
  const ModelPlan plan = model_plan(model);
  auto tensors = [&](ParameterRange range) {
    return std::span<const std::vector<float>>(parameters).subspan(static_cast<size_t>(range.first),
                                                                    static_cast<size_t>(range.size()));
  };
  for (size_t stage = 0; stage < plan.forward.size(); ++stage) {
    const Status status = backend.forward(static_cast<int64_t>(stage), tensors(plan.forward[stage].gathered));
    EXPECT_TRUE(status.ok()) << "forward " << stage << ": " << status.to_string();
  }
  Result<float> loss = backend.loss(0.25f);
  EXPECT_TRUE(loss.ok()) << loss.status().to_string();
  run.loss = loss.ok() ? *loss : NAN;
  for (size_t stage = 0; stage < plan.backward.size(); ++stage) {
    const BackwardStage& step = plan.backward[stage];
    const Status status =
        backend.backward(static_cast<int64_t>(stage), tensors(step.gathered),
                         std::span<std::vector<float>>(run.gradients)
                             .subspan(static_cast<size_t>(step.gradients.first), static_cast<size_t>(step.gradients.size())));
    EXPECT_TRUE(status.ok()) << "backward " << stage << ": " << status.to_string();
  }
  return run;
}

// The first element whose bits differ, named, or "".
std::string first_bit_difference(const GptSpec& spec, const StageRun& expected, const StageRun& actual) {
  if (std::memcmp(&expected.loss, &actual.loss, sizeof(float)) != 0) {
    return "loss " + std::to_string(expected.loss) + " vs " + std::to_string(actual.loss);
  }
  const std::vector<ParameterInfo> infos = gpt_parameters(spec);
  for (size_t p = 0; p < infos.size(); ++p) {
    for (size_t k = 0; k < expected.gradients[p].size(); ++k) {
      if (std::memcmp(&expected.gradients[p][k], &actual.gradients[p][k], sizeof(float)) != 0) {
        char text[160];
        std::snprintf(text, sizeof text, "[%zu]: %.9g vs %.9g", k, expected.gradients[p][k], actual.gradients[p][k]);
        return "gradient of " + infos[p].name + text;
      }
    }
  }
  return "";
}

enum class MaskKind { kCausal, kNone, kScattered };

std::vector<float> make_mask(const GptSpec& spec, MaskKind kind, uint64_t seed) {
  if (kind == MaskKind::kCausal) return gpt_causal_mask(spec);
  std::vector<float> mask(static_cast<size_t>(spec.block * spec.block), 0.0f);
  if (kind == MaskKind::kScattered) {
    // Allowed keys that are not a prefix, and some rows with none (those attend uniformly).
    for (size_t k = 0; k < mask.size(); ++k) mask[k] = mix_random_bits(seed, 0x3a, k) % 3 == 0 ? 1.0f : 0.0f;
  }
  return mask;
}

struct Case {
  GptSpec spec;
  int64_t sequences, length;
  MaskKind mask;
};

std::vector<Case> cases() {
  return {
      {{1, 4, 1, 3, 1}, 1, 1, MaskKind::kCausal},                // the smallest: one position, one head
      {{2, 12, 3, 37, 9}, 3, 9, MaskKind::kCausal},              // odd sizes everywhere
      {{2, 16, 2, 50, 8}, 2, 5, MaskKind::kCausal},              // sequences shorter than the block
      {{1, 8, 2, 11, 6}, 2, 6, MaskKind::kNone},                 // the mask lost: every row uniform
      {{2, 10, 5, 19, 7}, 3, 7, MaskKind::kScattered},           // keys that are not a prefix
      {{2, 96, 4, 301, 70}, 3, 70, MaskKind::kCausal},           // past one product tile and 64 threads
      {{1, 32, 2, 20000, 128}, 2, 128, MaskKind::kCausal},       // the head's product in 128 x 128 tiles
      {{1, 136, 2, 50, 40}, 2, 40, MaskKind::kScattered},        // heads wider than one pass of 64 dimensions
      {{1, 16, 1, 20, 1000}, 1, 1000, MaskKind::kCausal},        // too long for the attention's tiles: its row kernels
  };
}

TEST(DeviceGptBackend, EveryStageHasTheCpuBits) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = 3;
  for (const Case& test : cases()) {
    const ModelSpec model = transformer_model(test.spec);
    SCOPED_TRACE(gpt_spec_to_string(test.spec) + " sequences " + std::to_string(test.sequences) + " length " +
                 std::to_string(test.length) + " mask " + std::to_string(static_cast<int>(test.mask)));
    ++seed;
    const std::vector<std::vector<float>> parameters = perturbed_parameters(test.spec, seed);
    const std::vector<int32_t> tokens = gpt_check_tokens(test.spec, seed, test.sequences, test.length);
    const std::vector<float> mask = make_mask(test.spec, test.mask, seed);
    std::unique_ptr<ComputeBackend> cpu = make_cpu_compute_backend(model, best_simd_path());
    Result<std::unique_ptr<ComputeBackend>> gpu = make_cuda_compute_backend(model, 0);
    ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
    EXPECT_EQ((*gpu)->name(), "cuda:0");
    const StageRun expected = run_stages(*cpu, model, parameters, tokens, test.sequences, test.length, mask, seed);
    const StageRun actual = run_stages(**gpu, model, parameters, tokens, test.sequences, test.length, mask, seed);
    ASSERT_TRUE(std::isfinite(expected.loss));
    EXPECT_EQ(first_bit_difference(test.spec, expected, actual), "");
    // A second micro-batch on the same backend (buffers reused) is the same again.
    const StageRun again = run_stages(**gpu, model, parameters, tokens, test.sequences, test.length, mask, seed);
    EXPECT_EQ(first_bit_difference(test.spec, expected, again), "");
  }
}

// A fast-mode case's inputs, and the CPU's stages over them.
struct FastCase {
  Case test{{2, 96, 4, 301, 70}, 3, 70, MaskKind::kCausal};
  ModelSpec model;
  std::vector<std::vector<float>> parameters;
  std::vector<int32_t> tokens;
  std::vector<float> mask;
  StageRun cpu;
  uint64_t seed = 0;

  explicit FastCase(uint64_t case_seed) : seed(case_seed) {
    model = transformer_model(test.spec);
    parameters = perturbed_parameters(test.spec, seed);
    tokens = gpt_check_tokens(test.spec, seed, test.sequences, test.length);
    mask = make_mask(test.spec, test.mask, seed);
    std::unique_ptr<ComputeBackend> backend = make_cpu_compute_backend(model, best_simd_path());
    cpu = run(*backend);
  }
  StageRun run(ComputeBackend& backend) const {
    return run_stages(backend, model, parameters, tokens, test.sequences, test.length, mask, seed);
  }
  // The loss within `loss_tolerance` of the CPU's (relative), and each gradient element within
  // `gradient_tolerance` of its tensor's largest magnitude on the CPU (the products sum in
  // another order, and maybe in another type).
  void expect_near_the_cpu(const StageRun& actual, double loss_tolerance, float gradient_tolerance) const {
    EXPECT_NEAR(actual.loss, cpu.loss, loss_tolerance * std::fabs(cpu.loss));
    const std::vector<ParameterInfo> infos = gpt_parameters(test.spec);
    for (size_t p = 0; p < infos.size(); ++p) {
      float largest = 0.0f;
      for (float value : cpu.gradients[p]) largest = std::max(largest, std::fabs(value));
      for (size_t k = 0; k < cpu.gradients[p].size(); ++k) {
        ASSERT_NEAR(actual.gradients[p][k], cpu.gradients[p][k], gradient_tolerance * largest)
            << infos[p].name << "[" << k << "]";
      }
    }
  }
};

TEST(DeviceGptBackend, FastModeComputesTheSameFunctionToRoundingAndRepeatsItsBits) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  const FastCase fast_case(8);
  Result<std::unique_ptr<ComputeBackend>> fast = make_cuda_compute_backend(fast_case.model, 0, CudaGemm::kCublas);
  ASSERT_TRUE(fast.ok()) << fast.status().to_string();
  EXPECT_EQ((*fast)->name(), "cuda-fast:0");
  const StageRun first = fast_case.run(**fast);
  const StageRun second = fast_case.run(**fast);
  EXPECT_EQ(first_bit_difference(fast_case.test.spec, first, second), "");
  fast_case.expect_near_the_cpu(first, 1e-5, 1e-4f);
}

// A bf16 or fp16 run's fast mode puts the products on the tensor cores (inputs down-converted):
// the same function to that type's rounding, its own bits again at a second run, and not the
// fp32 fast mode's bits (so the 16-bit math is what ran).
TEST(DeviceGptBackend, FastModeOfA16BitRunUsesItsTypeOnTheTensorCoresAndRepeatsItsBits) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  const FastCase fast_case(9);
  Result<std::unique_ptr<ComputeBackend>> fp32 =
      make_cuda_compute_backend(fast_case.model, 0, CudaGemm::kCublas, DType::kFp32);
  ASSERT_TRUE(fp32.ok()) << fp32.status().to_string();
  const StageRun fp32_run = fast_case.run(**fp32);
  for (const DType dtype : {DType::kBf16, DType::kFp16}) {
    SCOPED_TRACE(dtype == DType::kBf16 ? "bf16" : "fp16");
    Result<std::unique_ptr<ComputeBackend>> fast = make_cuda_compute_backend(fast_case.model, 0, CudaGemm::kCublas, dtype);
    ASSERT_TRUE(fast.ok()) << fast.status().to_string();
    const StageRun first = fast_case.run(**fast);
    const StageRun second = fast_case.run(**fast);
    EXPECT_EQ(first_bit_difference(fast_case.test.spec, first, second), "");
    EXPECT_NE(first_bit_difference(fast_case.test.spec, first, fp32_run), "");
    // bf16 keeps 8 significant bits (fp16 11): a product's inputs are off by up to 2^-9 of
    // themselves, and the errors of a few layers add up to about a percent.
    fast_case.expect_near_the_cpu(first, 1e-2, 5e-2f);
  }
}

TEST(DeviceGptBackend, BadBatchesAreRefusedWithTheCpusMessages) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  const GptSpec spec{1, 4, 1, 5, 3};
  const ModelSpec model = transformer_model(spec);
  const std::vector<float> mask = gpt_causal_mask(spec);
  std::unique_ptr<ComputeBackend> cpu = make_cpu_compute_backend(model, best_simd_path());
  Result<std::unique_ptr<ComputeBackend>> gpu = make_cuda_compute_backend(model, 0);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  for (const auto& [tokens, length] : {std::pair{std::vector<int32_t>{0, 1, 9}, int64_t{2}},  // a token outside the vocabulary
                                       std::pair{std::vector<int32_t>{0, 1, 2, 3, 4}, int64_t{4}},  // longer than the block
                                       std::pair{std::vector<int32_t>{0, 1}, int64_t{2}}}) {  // too few tokens
    MicroBatchInput batch;
    batch.samples = 1;
    batch.tokens = tokens;
    batch.sequence_length = length;
    batch.causal_mask = mask;
    const Status on_cpu = cpu->begin_micro_batch(batch);
    const Status on_gpu = (*gpu)->begin_micro_batch(batch);
    EXPECT_FALSE(on_gpu.ok());
    EXPECT_EQ(on_gpu.to_string(), on_cpu.to_string());
  }
}

}  // namespace
}  // namespace zerosim
