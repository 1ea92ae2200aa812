// The engine with --device cuda (labelled "gpu": needs a CUDA device). The compute seam's
// promise, held end to end: a run whose forward, backward and AdamW run on the GPU has the CPU
// run's bits at every step (every state component, every loss), for every precision, world size
// and placement of the state; and a save and resume on the GPU, at the same or another world
// size, or resumed on the other backend, reproduces the uninterrupted run bit for bit.
// On a machine with two GPUs, W = 2 and W = 4 put the ranks on both.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda/device_compute_backend.h"
#include "core/engine/engine.h"
#include "tests/test_directory.h"
#include "tests/test_training.h"

#include "tests/cuda_devices.h"

namespace zerosim {
namespace {

ComputeDevice cuda_device(CudaGemm gemm = CudaGemm::kDeterministic) {
  Result<ComputeBackendFactory> factory = cuda_compute_backend_factory(gemm);
  EXPECT_TRUE(factory.ok()) << factory.status().to_string();
  return ComputeDevice{gemm == CudaGemm::kCublas ? "cuda-fast" : "cuda",
                       factory.ok() ? std::move(factory).value() : ComputeBackendFactory{}};
}

// 0 memory, 1 optimizer state on NVMe, 2 optimizer state and parameters on NVMe.
void place_state(TrainingOptions& options, int placement, const std::string& nvme_path) {
  OffloadConfig& optimizer = options.config.zero.offload_optimizer;
  OffloadConfig& params = options.config.zero.offload_param;
  optimizer.device = placement >= 1 ? OffloadDevice::kNvme : OffloadDevice::kNone;
  params.device = placement == 2 ? OffloadDevice::kNvme : OffloadDevice::kNone;
  optimizer.nvme_path = nvme_path;
  params.nvme_path = nvme_path;
  optimizer.buffer_count = 9;
}

TEST(DeviceEngine, EveryConfigurationHasTheCpuBitsAtEveryStep) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  const ComputeDevice cuda = cuda_device();
  for (const ModelSpec& model : {ModelSpec{}, ModelSpec{{64, 256, 128, 10}}, transformer_model(GptSpec{2, 24, 3, 41, 6})}) {
    for (Precision precision : {Precision::kFp32, Precision::kFp16, Precision::kBf16}) {
      for (int world_size : {1, 2, 3}) {
        for (int placement : {0, 1, 2}) {
          SCOPED_TRACE(model_spec_to_string(model) + " " + precision_name(precision) + " W=" +
                       std::to_string(world_size) + " placement " + std::to_string(placement));
          TestDirectory directory;
          TrainingOptions options = make_options(model, precision, 3, 2, world_size, 700, 29);
          options.digest_every_step = true;
          place_state(options, placement, directory.path() + "/cpu");
          Result<TrainingRun> on_cpu = train_on_real_env(options, 6);
          ASSERT_TRUE(on_cpu.ok()) << on_cpu.status().to_string();
          options.compute = cuda;
          place_state(options, placement, directory.path() + "/cuda");
          Result<TrainingRun> on_gpu = train_on_real_env(options, 6);
          ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().to_string();
          EXPECT_EQ(first_step_difference(*on_cpu, *on_gpu), "");
          EXPECT_EQ(on_cpu->digests.state, on_gpu->digests.state);
        }
      }
    }
  }
}

TEST(DeviceEngine, SaveAndResumeOnTheGpuIsBitIdenticalAtAnyWorldSizeAndOnTheCpu) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  for (const auto& [model, precision] : {std::pair{ModelSpec{{32, 96, 64, 7}}, Precision::kFp16},
                                         std::pair{ModelSpec{{32, 96, 64, 7}}, Precision::kBf16},
                                         std::pair{transformer_model(GptSpec{2, 16, 2, 29, 5}), Precision::kBf16}}) {
    SCOPED_TRACE(model_spec_to_string(model) + " " + precision_name(precision));
    TestDirectory directory;
    TrainingOptions options = make_options(model, precision, 2, 2, 2, 1000, 41);
    options.compute = cuda_device();
    options.digest_every_step = true;
    place_state(options, 1, directory.path() + "/nvme");
    Result<TrainingRun> reference = train_on_real_env(options, 8);
    ASSERT_TRUE(reference.ok()) << reference.status().to_string();

    CheckpointPlan saving;
    saving.save_directory = directory.path() + "/checkpoints";
    saving.save_every_steps = 4;
    ASSERT_TRUE(train_on_real_env(options, 4, saving).ok());

    // Resume at W' in {2, 1, 4} on the GPU (the train batch kept, the accumulation following W'),
    // and at W' = 2 on the CPU.
    for (const auto& [resume_world_size, on_gpu] : {std::pair{2, true}, std::pair{1, true}, std::pair{4, true},
                                                     std::pair{2, false}}) {
      SCOPED_TRACE("resume at W=" + std::to_string(resume_world_size) + (on_gpu ? " on the GPU" : " on the CPU"));
      TrainingOptions resumed_options = options;
      resumed_options.world_size = resume_world_size;
      resumed_options.config.gradient_accumulation_steps = options.config.train_batch_size /
                                                           (options.config.micro_batch_size * resume_world_size);
      if (!on_gpu) resumed_options.compute = ComputeDevice{};
      place_state(resumed_options, 1, directory.path() + "/nvme-resumed-" + std::to_string(resume_world_size));
      CheckpointPlan resuming;
      resuming.resume_directory = saving.save_directory;
      resuming.resume_tag = "global_step4";
      Result<TrainingRun> resumed = train_on_real_env(resumed_options, 8, resuming);
      ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
      ASSERT_EQ(resumed->steps.size(), 4u);
      EXPECT_EQ(first_differing_component(reference->step_digests[3], resumed->initial_digests), "");
      for (size_t k = 0; k < 4; ++k) {
        EXPECT_EQ(first_differing_component(reference->step_digests[4 + k], resumed->step_digests[k]), "")
            << "step " << 5 + k;
        EXPECT_EQ(std::memcmp(&reference->steps[4 + k].loss, &resumed->steps[k].loss, sizeof(float)), 0)
            << "loss at step " << 5 + k;
      }
      EXPECT_EQ(reference->digests.state, resumed->digests.state);
    }
  }
}

// Ranks with nothing offloaded keep their partitions in device memory (ResidentState; W ranks
// share the GPU and read each other's partitions and gradients there): the run says so, and
// every step (the host copy refreshed after each by the digests, or only at
// the end), a save on the GPU and its resume on the GPU and on the CPU, have the host path's
// bits; the fp16 runs skip overflowing steps there too. With the optimizer offloaded (cpu or
// NVMe) the 16-bit parameters and gradients stay on the GPU and AdamW steps on the CPU.
TEST(DeviceEngine, ResidentPartitionsHaveTheCpuBitsAndResume) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  const ComputeDevice cuda = cuda_device();
  for (const ModelSpec& model : {ModelSpec{{64, 256, 128, 10}}, transformer_model(GptSpec{2, 24, 3, 41, 6})}) {
    for (const auto& [precision, world_size] : {std::pair{Precision::kFp32, 1}, std::pair{Precision::kFp16, 1},
                                                std::pair{Precision::kBf16, 1}, std::pair{Precision::kFp32, 3},
                                                std::pair{Precision::kFp16, 2}, std::pair{Precision::kBf16, 3}}) {
      SCOPED_TRACE(model_spec_to_string(model) + " " + precision_name(precision) + " W=" + std::to_string(world_size));
      TestDirectory directory;
      TrainingOptions options = make_options(model, precision, 3, 2, world_size, 700, 29);
      options.digest_every_step = true;
      // fp16: a scale that overflows in the first steps of both models, then fits (2^16 never does here).
      if (precision == Precision::kFp16) options.config.loss_scaler.initial_scale_power = 20;
      Result<TrainingRun> on_cpu = train_on_real_env(options, 6);
      ASSERT_TRUE(on_cpu.ok()) << on_cpu.status().to_string();
      EXPECT_FALSE(notes_say_partitions_were_resident(*on_cpu));
      if (precision == Precision::kFp16 && world_size == 1) {
        EXPECT_TRUE(std::any_of(on_cpu->steps.begin(), on_cpu->steps.end(), [](const StepRecord& r) { return r.skipped; }))
            << "the fp16 run should see an overflow";
        EXPECT_FALSE(on_cpu->steps.back().skipped) << "and then update";
      }
      TrainingOptions on_gpu_options = options;
      on_gpu_options.compute = cuda;
      Result<TrainingRun> on_gpu = train_on_real_env(on_gpu_options, 6);
      ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().to_string();
      EXPECT_TRUE(notes_say_partitions_were_resident(*on_gpu));
      EXPECT_EQ(first_step_difference(*on_cpu, *on_gpu), "");
      EXPECT_EQ(on_cpu->digests.state, on_gpu->digests.state);

      TrainingOptions quiet = on_gpu_options;
      quiet.digest_every_step = false;
      Result<TrainingRun> only_at_end = train_on_real_env(quiet, 6);
      ASSERT_TRUE(only_at_end.ok()) << only_at_end.status().to_string();
      EXPECT_EQ(only_at_end->digests.state, on_cpu->digests.state);

      CheckpointPlan saving;
      saving.save_directory = directory.path() + "/checkpoints";
      saving.save_every_steps = 3;
      ASSERT_TRUE(train_on_real_env(quiet, 3, saving).ok());
      for (bool resume_on_gpu : {true, false}) {
        SCOPED_TRACE(resume_on_gpu ? "resumed on the GPU" : "resumed on the CPU");
        TrainingOptions resumed_options = resume_on_gpu ? on_gpu_options : options;
        CheckpointPlan resuming;
        resuming.resume_directory = saving.save_directory;
        Result<TrainingRun> resumed = train_on_real_env(resumed_options, 6, resuming);
        ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
        ASSERT_EQ(resumed->steps.size(), 3u);
        EXPECT_EQ(first_differing_component(on_cpu->step_digests[2], resumed->initial_digests), "");
        for (size_t k = 0; k < 3; ++k) {
          EXPECT_EQ(first_differing_component(on_cpu->step_digests[3 + k], resumed->step_digests[k]), "") << "step " << 4 + k;
        }
      }

      // The offloaded optimizer (cpu, nvme): parameters and gradients stay on the GPU, master and
      // moments on the host, AdamW on the CPU, in several sub-groups; the CPU's bits at every
      // step, and a save there resumed on the CPU device.
      for (OffloadDevice device : {OffloadDevice::kCpu, OffloadDevice::kNvme}) {
        SCOPED_TRACE(std::string("optimizer offloaded to ") + offload_device_name(device));
        TrainingOptions offloaded = on_gpu_options;
        place_state(offloaded, 1, directory.path() + "/nvme-" + offload_device_name(device));
        offloaded.config.zero.offload_optimizer.device = device;
        offloaded.config.zero.sub_group_size = 3000;
        Result<TrainingRun> partly_resident = train_on_real_env(offloaded, 6);
        ASSERT_TRUE(partly_resident.ok()) << partly_resident.status().to_string();
        EXPECT_TRUE(notes_say_partitions_were_resident(*partly_resident));
        EXPECT_EQ(first_step_difference(*on_cpu, *partly_resident), "");
        CheckpointPlan offloaded_saving;
        offloaded_saving.save_directory = directory.path() + "/offloaded-" + offload_device_name(device);
        offloaded_saving.save_every_steps = 3;
        ASSERT_TRUE(train_on_real_env(offloaded, 3, offloaded_saving).ok());
        CheckpointPlan resuming;
        resuming.resume_directory = offloaded_saving.save_directory;
        Result<TrainingRun> resumed_on_cpu = train_on_real_env(options, 6, resuming);
        ASSERT_TRUE(resumed_on_cpu.ok()) << resumed_on_cpu.status().to_string();
        EXPECT_EQ(resumed_on_cpu->digests.state, on_cpu->digests.state);
        // And on the GPU in the same placement: the load hands the parameters over again.
        Result<TrainingRun> resumed_on_gpu = train_on_real_env(offloaded, 6, resuming);
        ASSERT_TRUE(resumed_on_gpu.ok()) << resumed_on_gpu.status().to_string();
        EXPECT_TRUE(notes_say_partitions_were_resident(*resumed_on_gpu));
        EXPECT_EQ(resumed_on_gpu->digests.state, on_cpu->digests.state);
      }
    }
  }
}

// The fast mode with resident partitions repeats its own bits.
TEST(DeviceEngine, ResidentPartitionsInFastModeRepeatTheirBits) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  for (const ModelSpec& model : {ModelSpec{{64, 256, 128, 10}}, transformer_model(GptSpec{2, 64, 2, 97, 12})}) {
    SCOPED_TRACE(model_spec_to_string(model));
    TrainingOptions options = make_options(model, Precision::kBf16, 4, 2, 1, 5000, 43);
    options.compute = cuda_device(CudaGemm::kCublas);
    options.digest_every_step = true;
    Result<TrainingRun> first = train_on_real_env(options, 5);
    Result<TrainingRun> second = train_on_real_env(options, 5);
    ASSERT_TRUE(first.ok() && second.ok());
    EXPECT_TRUE(notes_say_partitions_were_resident(*first));
    EXPECT_EQ(first_step_difference(*first, *second), "");
  }
}

// The fast mode computes the same function: each layer's outputs and gradients agree with the
// CPU's to fp32 rounding (relative to the largest magnitude of the array; the sums run in another
// order), so the GEMM operands and transposes are right.
TEST(DeviceEngine, FastModeLayersComputeTheCpuLayersToRounding) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  const ModelSpec model{{48, 96, 80, 6}};
  const int64_t samples = 9;
  Result<std::unique_ptr<ComputeBackend>> fast = make_cuda_compute_backend(model, 0, CudaGemm::kCublas);
  ASSERT_TRUE(fast.ok()) << fast.status().to_string();
  EXPECT_EQ((*fast)->name(), "cuda-fast:0");
  std::unique_ptr<ComputeBackend> cpu = make_cpu_compute_backend(model, SimdPath::kScalar);
  std::vector<float> input(static_cast<size_t>(samples * 48));
  for (size_t k = 0; k < input.size(); ++k) input[k] = static_cast<float>((k * 7919) % 101) / 50.0f - 1.0f;
  const std::vector<int32_t> labels = {0, 5, 3, 1, 2, 4, 5, 0, 3};
  const std::vector<ParameterInfo> parameters = mlp_parameters(model);
  std::vector<std::vector<float>> weights;
  for (size_t p = 0; p < parameters.size(); ++p) {
    std::vector<float> values(static_cast<size_t>(parameters[p].element_count));
    for (size_t k = 0; k < values.size(); ++k) values[k] = mlp_initial_value(model, 5, static_cast<int64_t>(p), static_cast<int64_t>(k)) + 0.01f;
    weights.push_back(values);
  }
  auto near = [](const std::vector<float>& expected, const std::vector<float>& actual, const std::string& what) {
    float largest = 0.0f;
    for (float value : expected) largest = std::max(largest, std::abs(value));
    for (size_t k = 0; k < expected.size(); ++k) {
      EXPECT_LE(std::abs(expected[k] - actual[k]), 1e-5f * largest + 1e-30f) << what << " element " << k;
    }
  };
  ComputeBackend* backends[2] = {cpu.get(), fast->get()};
  float losses[2];
  std::vector<std::vector<float>> gradients[2];
  for (int b = 0; b < 2; ++b) {
    MicroBatchInput batch;
    batch.samples = samples;
    batch.features = input;
    batch.labels = labels;
    ASSERT_TRUE(backends[b]->begin_micro_batch(batch).ok());
    for (int64_t layer = 0; layer < 3; ++layer) {
      ASSERT_TRUE(backends[b]->forward(layer, std::span<const std::vector<float>>(weights).subspan(static_cast<size_t>(2 * layer), 2)).ok());
    }
    Result<float> loss = backends[b]->loss(0.5f);
    ASSERT_TRUE(loss.ok()) << loss.status().to_string();
    losses[b] = *loss;
    for (int64_t layer = 2; layer >= 0; --layer) {
      std::vector<std::vector<float>> layer_gradients = {std::vector<float>(weights[static_cast<size_t>(2 * layer)].size()),
                                                         std::vector<float>(weights[static_cast<size_t>(2 * layer + 1)].size())};
      ASSERT_TRUE(backends[b]->backward(2 - layer, std::span<const std::vector<float>>(weights).subspan(static_cast<size_t>(2 * layer), 2),
                                        layer_gradients).ok());
      gradients[b].push_back(layer_gradients[0]);
      gradients[b].push_back(layer_gradients[1]);
    }
  }
  EXPECT_NEAR(losses[0], losses[1], 1e-5f * std::abs(losses[0]));
  for (size_t k = 0; k < gradients[0].size(); ++k) near(gradients[0][k], gradients[1][k], "gradient " + std::to_string(k));
}

// Within the fast mode: the same run twice, and a save and resume at W' = 2 and 1, give the same
// bits (on one GPU model: the ranks of W = 2 run on both H200s where there are two).
TEST(DeviceEngine, FastModeIsReproducibleAndResumesBitIdentically) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  for (const ModelSpec& model : {ModelSpec{{64, 256, 128, 10}}, transformer_model(GptSpec{2, 64, 2, 97, 12})}) {
    SCOPED_TRACE(model_spec_to_string(model));
    TestDirectory directory;
    TrainingOptions options = make_options(model, Precision::kBf16, 4, 2, 2, 5000, 43);
    options.compute = cuda_device(CudaGemm::kCublas);
    options.digest_every_step = true;
    Result<TrainingRun> reference = train_on_real_env(options, 8);
    ASSERT_TRUE(reference.ok()) << reference.status().to_string();
    Result<TrainingRun> again = train_on_real_env(options, 8);
    ASSERT_TRUE(again.ok()) << again.status().to_string();
    EXPECT_EQ(first_step_difference(*reference, *again), "");
    TrainingOptions deterministic = options;
    deterministic.compute = cuda_device();
    Result<TrainingRun> exact = train_on_real_env(deterministic, 8);
    ASSERT_TRUE(exact.ok()) << exact.status().to_string();
    // Another summation order: not the same bits (else the mode would not be using cuBLAS), the
    // same training to a few ULP of the loss.
    EXPECT_NE(exact->digests.params, reference->digests.params);
    EXPECT_NEAR(exact->steps[0].loss, reference->steps[0].loss, 1e-5f * std::abs(exact->steps[0].loss));

    CheckpointPlan saving;
    saving.save_directory = directory.path() + "/checkpoints";
    saving.save_every_steps = 4;
    ASSERT_TRUE(train_on_real_env(options, 4, saving).ok());
    for (int resume_world_size : {2, 1}) {
      SCOPED_TRACE("resume at W=" + std::to_string(resume_world_size));
      TrainingOptions resumed_options = options;
      resumed_options.world_size = resume_world_size;
      resumed_options.config.gradient_accumulation_steps = options.config.train_batch_size /
                                                           (options.config.micro_batch_size * resume_world_size);
      CheckpointPlan resuming;
      resuming.resume_directory = saving.save_directory;
      Result<TrainingRun> resumed = train_on_real_env(resumed_options, 8, resuming);
      ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
      ASSERT_EQ(resumed->steps.size(), 4u);
      for (size_t k = 0; k < 4; ++k) {
        EXPECT_EQ(first_differing_component(reference->step_digests[4 + k], resumed->step_digests[k]), "")
            << "step " << 5 + k;
      }
    }
  }
}

TEST(DeviceEngine, ABackendOnADeviceThatDoesNotExistIsANamedError) {
  if (usable_cuda_devices() == 0) GTEST_SKIP() << "no CUDA device";
  Result<std::unique_ptr<ComputeBackend>> backend = make_cuda_compute_backend(ModelSpec{}, 4096);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(backend.status().message().find("CUDA device 4096"), std::string::npos) << backend.status().message();
  Result<std::unique_ptr<ComputeBackend>> first = make_cuda_compute_backend(ModelSpec{}, 0);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ((*first)->name(), "cuda:0");
}

}  // namespace
}  // namespace zerosim
