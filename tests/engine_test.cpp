// The ZeRO-3 core end to end on CPU ranks: world-size invariance (the determinism
// contract), padding, empty partitions, a falling loss, fp16 overflow handling.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "core/checkpoint/manifest.h"
#include "core/engine/engine.h"
#include "core/model/gpt.h"
#include "core/zero/exact_square_sum.h"
#include "faults/faulty_disk.h"
#include "tests/test_directory.h"
#include "tests/test_training.h"

namespace zerosim {
namespace {

RC_GTEST_PROP(EngineProperty, StateAfterKStepsIsBitIdenticalToWorldSizeOne, ()) {
  // One case in three trains the transformer (tied weights, every stage of its plan).
  const bool transformer = *rc::gen::element(false, false, true);
  ModelSpec model;
  if (transformer) {
    model = draw_transformer();
  } else {
    const int64_t layer_count = *rc::gen::inRange<int64_t>(1, 4);
    model.layer_widths.clear();
    for (int64_t i = 0; i <= layer_count; ++i) model.layer_widths.push_back(*rc::gen::inRange<int64_t>(2, 40));
  }
  const int world_size = *rc::gen::inRange(1, 17);
  const int64_t micro_batch = *rc::gen::inRange<int64_t>(1, 4);
  const int64_t accumulation = *rc::gen::inRange<int64_t>(1, 3);
  const int64_t sub_group_size = *rc::gen::element<int64_t>(1, 7, 64, 500, 1000000000);
  const Precision precision = *rc::gen::element(Precision::kFp32, Precision::kFp16, Precision::kBf16);
  const uint64_t seed = *rc::gen::inRange<uint64_t>(1, 1000000);
  const int64_t steps = 5;
  RC_TAG(world_size, precision_name(precision), transformer ? "gpt" : "mlp");

  const TrainingOptions sharded =
      make_options(model, precision, micro_batch, accumulation, world_size, sub_group_size, seed);
  // The same global batch on one rank: W times the accumulation steps.
  const TrainingOptions single =
      make_options(model, precision, micro_batch, accumulation * world_size, 1, 1000000000, seed);
  RealEnv real_env;
  Result<TrainingRun> sharded_run = run_training(sharded, steps, real_env.env());
  Result<TrainingRun> single_run = run_training(single, steps, real_env.env());
  RC_ASSERT(sharded_run.ok());
  RC_ASSERT(single_run.ok());
  RC_ASSERT(first_difference(single_run->digests, sharded_run->digests) == std::string());
  for (size_t s = 0; s < single_run->steps.size(); ++s) {
    RC_ASSERT(std::memcmp(&single_run->steps[s].loss, &sharded_run->steps[s].loss, sizeof(float)) == 0);
    RC_ASSERT(single_run->steps[s].grad_norm == sharded_run->steps[s].grad_norm ||
              (std::isnan(single_run->steps[s].grad_norm) && std::isnan(sharded_run->steps[s].grad_norm)));
  }
}

// Offload invariance: the optimizer state and the 16-bit parameters in memory ("none" or
// "cpu") or swapped to NVMe through libaio (optimizer, params or both), with any pool, block
// size, queue depth and pipelining, give the same bits.
RC_GTEST_PROP(EngineProperty, OffloadDeviceDoesNotChangeABit, ()) {
  const bool transformer = *rc::gen::element(false, false, true);
  ModelSpec model;
  if (transformer) {
    model = draw_transformer();
  } else {
    model.layer_widths = {*rc::gen::inRange<int64_t>(2, 40), *rc::gen::inRange<int64_t>(2, 60),
                          *rc::gen::inRange<int64_t>(2, 9)};
  }
  const int world_size = *rc::gen::inRange(1, 5);
  const Precision precision = *rc::gen::element(Precision::kFp32, Precision::kFp16, Precision::kBf16);
  const int64_t sub_group_size = *rc::gen::element<int64_t>(1, 50, 300, 1000000000);
  const uint64_t seed = *rc::gen::inRange<uint64_t>(1, 1000000);
  TrainingOptions in_memory = make_options(model, precision, 2, 2, world_size, sub_group_size, seed);
  TrainingOptions on_cpu = in_memory;
  on_cpu.config.zero.offload_optimizer.device = OffloadDevice::kCpu;
  TrainingOptions on_nvme = in_memory;
  TestDirectory directory;
  const int what = *rc::gen::element(0, 1, 2);  // 0 optimizer, 1 params, 2 both
  if (what >= 1) {
    on_nvme.config.zero.offload_param.device = OffloadDevice::kNvme;
    on_nvme.config.zero.offload_param.nvme_path = directory.path();
  }
  if (what == 1) on_cpu.config.zero.offload_param.device = OffloadDevice::kCpu;
  OffloadConfig& offload = on_nvme.config.zero.offload_optimizer;
  offload.device = what == 1 ? OffloadDevice::kNone : OffloadDevice::kNvme;
  offload.nvme_path = directory.path();
  offload.pipeline_read = *rc::gen::arbitrary<bool>();
  offload.pipeline_write = *rc::gen::arbitrary<bool>();
  offload.buffer_count = minimum_swap_buffer_count(offload.pipeline_read, offload.pipeline_write) +
                         *rc::gen::inRange<int64_t>(0, 4);
  on_nvme.config.aio.block_size = 4096 * *rc::gen::inRange<int64_t>(1, 8);
  on_nvme.config.aio.queue_depth = *rc::gen::inRange<int64_t>(1, 9);
  on_nvme.config.aio.intra_op_parallelism = *rc::gen::inRange<int64_t>(1, 3);
  on_nvme.config.aio.single_submit = *rc::gen::arbitrary<bool>();
  on_nvme.config.aio.overlap_events = *rc::gen::arbitrary<bool>();
  // Mark both flags as given, so the engine obeys them instead of choosing its defaults.
  on_nvme.config.input["zero_optimization"]["offload_optimizer"] = {{"pipeline_read", offload.pipeline_read},
                                                                     {"pipeline_write", offload.pipeline_write}};
  RC_TAG(what == 0 ? "optimizer" : what == 1 ? "params" : "both", offload.pipeline_read, offload.pipeline_write,
         transformer ? "gpt" : "mlp");

  RealEnv real_env;
  Result<TrainingRun> memory_run = run_training(in_memory, 3, real_env.env());
  Result<TrainingRun> cpu_run = run_training(on_cpu, 3, real_env.env());
  Result<TrainingRun> nvme_run = run_training(on_nvme, 3, real_env.env());
  RC_ASSERT(memory_run.ok());
  RC_ASSERT(cpu_run.ok());
  if (!nvme_run.ok()) RC_FAIL(nvme_run.status().to_string());
  RC_ASSERT(first_difference(memory_run->digests, cpu_run->digests) == std::string());
  RC_ASSERT(first_difference(memory_run->digests, nvme_run->digests) == std::string());
}

// The engine's walk over the transformer's plan (gathers, the tied wte gathered twice, its
// gradient held from the head to the embeddings and exchanged once) gives the whole model's
// gradient: the first step's loss and gradient norm equal those of gpt_forward_backward over the
// same windows, at W = 1 and 3 (one micro-batch per rank), bit for bit.
TEST(Engine, TheTransformersStepIsTheWholeModelsGradient) {
  const GptSpec spec{2, 8, 2, 11, 5};
  for (int world_size : {1, 3}) {
    TrainingOptions options = make_options(transformer_model(spec), Precision::kFp32, 1, 3 / world_size, world_size,
                                           1000000000, 17);
    options.config.loss_scaler.dynamic = false;
    options.config.loss_scaler.static_loss_scale = 1.0;
    RealEnv real_env;
    Result<TrainingRun> run = run_training(options, 1, real_env.env());
    ASSERT_TRUE(run.ok()) << run.status().to_string();

    // The same three windows through the whole model, one micro-batch (one window) at a time.
    TokenDatasetSpec token_spec{spec.vocab, spec.block, options.data.sample_count, options.data.seed, ""};
    Result<std::unique_ptr<TokenDataset>> tokens = TokenDataset::open(token_spec, *real_env.env().disk);
    ASSERT_TRUE(tokens.ok());
    const ShuffledSampler sampler(options.data);
    const std::vector<ParameterInfo> infos = gpt_parameters(spec);
    const std::vector<std::vector<float>> parameters = gpt_initial_parameters(spec, options.seed);
    std::vector<std::vector<float>> total(infos.size());
    for (size_t p = 0; p < infos.size(); ++p) total[p].assign(static_cast<size_t>(infos[p].element_count), 0.0f);
    float loss_sum = 0.0f;
    for (int64_t position = 0; position < 3; ++position) {
      std::vector<int32_t> window(static_cast<size_t>(spec.block + 1));
      ASSERT_TRUE((*tokens)->tokens(sampler.sample_at(position), window).ok());
      std::vector<std::vector<float>> gradients(infos.size());
      for (size_t p = 0; p < infos.size(); ++p) gradients[p].assign(static_cast<size_t>(infos[p].element_count), 0.0f);
      Result<float> loss = gpt_forward_backward<float>(spec, parameters, window, 1, spec.block,
                                                       1.0f / static_cast<float>(3 * spec.block), gradients);
      ASSERT_TRUE(loss.ok());
      loss_sum = loss_sum + *loss;
      // The exchange folds the micro-batches' gradients in global order, from zero.
      for (size_t p = 0; p < infos.size(); ++p) {
        for (size_t k = 0; k < total[p].size(); ++k) total[p][k] = total[p][k] + gradients[p][k];
      }
    }
    ExactSquareSum squares;
    for (const std::vector<float>& gradient : total) squares.add_squares(gradient);
    const float norm = static_cast<float>(std::sqrt(squares.to_double()));
    EXPECT_EQ(run->steps[0].grad_norm, static_cast<double>(norm)) << "W=" << world_size;
    EXPECT_EQ(run->steps[0].loss, loss_sum / 3.0f) << "W=" << world_size;
  }
}

TEST(Engine, TheFallbackEngineWhereODirectIsRefusedGivesTheSameBits) {
  TrainingOptions in_memory = make_options(ModelSpec{}, Precision::kFp16, 2, 2, 2, 200, 17);
  TrainingOptions on_nvme = in_memory;
  TestDirectory directory;
  on_nvme.config.zero.offload_optimizer.device = OffloadDevice::kNvme;
  on_nvme.config.zero.offload_optimizer.nvme_path = directory.path();
  RealEnv real_env;
  FaultyDisk refusing_direct(*real_env.env().disk, {{"*", FaultOperation::kOpen, 0, FaultKind::kRefuseDirect, 0, 0}});
  Env env = real_env.env();
  env.disk = &refusing_direct;
  const TrainingRun reference = train_or_fail(in_memory, 4);
  Result<TrainingRun> fallback = run_training(on_nvme, 4, env);
  ASSERT_TRUE(fallback.ok()) << fallback.status().to_string();
  ASSERT_EQ(fallback->notes.size(), 1u);
  EXPECT_NE(fallback->notes[0].find("pread/pwrite"), std::string::npos) << fallback->notes[0];
  EXPECT_EQ(first_difference(reference.digests, fallback->digests), "");
  EXPECT_EQ(reference.digests.state, fallback->digests.state);
}

TEST(Engine, SkippedStepsWithStateOnNvmeMatchTheInMemoryRun) {
  // Overflowing first steps: the early read of sub-group 0 is adopted by the next step.
  TrainingOptions in_memory = make_options(ModelSpec{}, Precision::kFp16, 2, 1, 2, 100, 23);
  in_memory.config.loss_scaler.initial_scale_power = 40;
  in_memory.config.loss_scaler.hysteresis = 1;
  TrainingOptions on_nvme = in_memory;
  TestDirectory directory;
  on_nvme.config.zero.offload_optimizer.device = OffloadDevice::kNvme;
  on_nvme.config.zero.offload_optimizer.nvme_path = directory.path();
  on_nvme.config.zero.offload_optimizer.buffer_count = 9;
  const TrainingRun reference = train_or_fail(in_memory, 30);
  const TrainingRun swapped = train_or_fail(on_nvme, 30);
  EXPECT_GT(reference.final_state.counters.skipped_steps, 5);
  EXPECT_EQ(first_difference(reference.digests, swapped.digests), "");
}

TEST(Engine, WorldSizesOneTwoThreeFourEightAgreeOnTheDefaultShape) {
  const ModelSpec model;  // 13,37,29,5
  const TrainingRun reference = train_or_fail(make_options(model, Precision::kFp16, 2, 24, 1, 1000000000, 7), 6);
  for (int world_size : {2, 3, 4, 8}) {
    const TrainingRun run =
        train_or_fail(make_options(model, Precision::kFp16, 2, 24 / world_size, world_size, 100, 7), 6);
    EXPECT_EQ(first_difference(reference.digests, run.digests), "") << "world size " << world_size;
    EXPECT_EQ(reference.digests.state, run.digests.state) << "world size " << world_size;
  }
}

TEST(Engine, SixtyFourRanksMatchOneRank) {
  ModelSpec model;
  model.layer_widths = {9, 11, 3};  // biases of 11 and 3 elements: most of the 64 ranks hold only padding
  const TrainingRun reference = train_or_fail(make_options(model, Precision::kBf16, 1, 64, 1, 1000000000, 21), 3);
  const TrainingRun sharded = train_or_fail(make_options(model, Precision::kBf16, 1, 1, 64, 2, 21), 3);
  EXPECT_EQ(first_difference(reference.digests, sharded.digests), "");
  EXPECT_EQ(reference.digests.state, sharded.digests.state);
}

TEST(Engine, SameRunTwiceGivesTheSameDigestAndADifferentSeedDoesNot) {
  const ModelSpec model;
  const TrainingRun first = train_or_fail(make_options(model, Precision::kBf16, 2, 2, 3, 50, 11), 4);
  const TrainingRun second = train_or_fail(make_options(model, Precision::kBf16, 2, 2, 3, 50, 11), 4);
  const TrainingRun other_seed = train_or_fail(make_options(model, Precision::kBf16, 2, 2, 3, 50, 12), 4);
  EXPECT_EQ(first.digests.state, second.digests.state);
  EXPECT_NE(first.digests.state, other_seed.digests.state);
  EXPECT_NE(first.digests.params, other_seed.digests.params);
}

TEST(Engine, SimdPathDoesNotChangeABit) {
  const ModelSpec model;
  TrainingOptions options = make_options(model, Precision::kFp32, 2, 2, 2, 64, 5);
  options.simd_path = SimdPath::kScalar;
  const TrainingRun scalar = train_or_fail(options, 4);
  for (SimdPath path : {SimdPath::kAvx2, SimdPath::kAvx512}) {
    if (!simd_path_available(path)) continue;
    options.simd_path = path;
    EXPECT_EQ(train_or_fail(options, 4).digests.state, scalar.digests.state) << simd_path_name(path);
  }
}

// A model whose every parameter (6, 3, 6 and 2 elements) is smaller than the world size (8):
// ranks 6 and 7 hold only padding. The padding stays zero through training, on every rank.
TEST(Engine, PaddingStaysZeroAndRanksWithEmptyPartitionsWork) {
  ModelSpec model;
  model.layer_widths = {2, 3, 2};
  const int world_size = 8;
  TrainingOptions options = make_options(model, Precision::kFp16, 1, 1, world_size, 4, 3);
  ThreadCommWorld world(world_size);
  RealEnv real_env;
  std::vector<std::unique_ptr<RankEngine>> engines;
  for (int rank = 0; rank < world_size; ++rank) {
    engines.push_back(std::make_unique<RankEngine>(options, world.comm(rank), real_env.env()));
    ASSERT_TRUE(engines.back()->initialize().ok());
  }
  std::vector<std::thread> threads;
  std::vector<Status> statuses(world_size);
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      for (int step = 0; step < 5 && statuses[rank].ok(); ++step) {
        Result<StepRecord> record = engines[rank]->train_step();
        if (!record.ok()) statuses[rank] = record.status();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int rank = 0; rank < world_size; ++rank) ASSERT_TRUE(statuses[rank].ok()) << statuses[rank].to_string();

  int ranks_with_only_padding = 0;
  for (int rank = 0; rank < world_size; ++rank) {
    const RankEngine& engine = *engines[rank];
    const PartitionLayout& layout = engine.layout();
    bool holds_nothing = true;
    for (const ParameterPartition& partition : layout.parameters) {
      if (partition.owned_count(rank) > 0) holds_nothing = false;
      for (int64_t k = partition.owned_count(rank); k < partition.partition_size; ++k) {
        const size_t index = static_cast<size_t>(partition.flat_offset + k);
        EXPECT_EQ(float_bits(engine.master_partition()[index]), 0u) << "rank " << rank << " master padding " << index;
        EXPECT_EQ(float_bits(engine.exp_avg_partition()[index]), 0u) << "rank " << rank << " exp_avg padding";
        EXPECT_EQ(float_bits(engine.exp_avg_sq_partition()[index]), 0u) << "rank " << rank << " exp_avg_sq padding";
        EXPECT_EQ(engine.param_partition()[index * 2], std::byte{0}) << "rank " << rank << " param padding";
        EXPECT_EQ(engine.param_partition()[index * 2 + 1], std::byte{0}) << "rank " << rank << " param padding";
      }
    }
    // The last bias has 2 elements over 8 ranks: ranks 2..7 hold none of it.
    EXPECT_EQ(layout.parameters.back().owned_count(rank), rank < 2 ? 1 : 0);
    if (holds_nothing) ++ranks_with_only_padding;
  }
  EXPECT_EQ(ranks_with_only_padding, 2);
}

// Frozen parameters (requires_grad=False) never move, have no optimizer state (master = the
// 16-bit value widened, zero moments), and the run stays W-invariant; the rest still trains.
RC_GTEST_PROP(EngineProperty, FrozenParametersNeverMoveAndTheRunStaysWorldSizeInvariant, ()) {
  ModelSpec model;
  model.layer_widths = {*rc::gen::inRange<int64_t>(2, 20), *rc::gen::inRange<int64_t>(2, 30),
                        *rc::gen::inRange<int64_t>(2, 6)};
  const std::vector<ParameterInfo> parameters = mlp_parameters(model);
  const std::vector<bool> frozen_mask =
      *rc::gen::suchThat(rc::gen::container<std::vector<bool>>(parameters.size(), rc::gen::arbitrary<bool>()),
                         [](const std::vector<bool>& mask) { return std::find(mask.begin(), mask.end(), false) != mask.end(); });
  const int world_size = *rc::gen::inRange(1, 6);
  const Precision precision = *rc::gen::element(Precision::kFp32, Precision::kFp16, Precision::kBf16);
  const int64_t sub_group_size = *rc::gen::element<int64_t>(1, 7, 64, 1000000000);
  const uint64_t seed = *rc::gen::inRange<uint64_t>(1, 1000000);
  const int64_t steps = 4;
  TrainingOptions sharded = make_options(model, precision, 2, 1, world_size, sub_group_size, seed);
  TrainingOptions single = make_options(model, precision, 2, world_size, 1, 1000000000, seed);
  for (size_t p = 0; p < parameters.size(); ++p) {
    if (frozen_mask[p]) sharded.frozen_parameters.push_back(parameters[p].name);
  }
  single.frozen_parameters = sharded.frozen_parameters;
  sharded.capture_state_at_step = steps;
  RealEnv real_env;
  Result<TrainingRun> sharded_run = run_training(sharded, steps, real_env.env());
  Result<TrainingRun> single_run = run_training(single, steps, real_env.env());
  RC_ASSERT(sharded_run.ok());
  RC_ASSERT(single_run.ok());
  RC_ASSERT(first_difference(single_run->digests, sharded_run->digests) == std::string());
  RC_ASSERT(sharded_run->captured.has_value());
  bool some_trainable_moved = false;
  for (const CapturedTensor& tensor : sharded_run->captured->tensors) {
    const size_t p = static_cast<size_t>(std::find_if(parameters.begin(), parameters.end(), [&](const ParameterInfo& info) {
                                           return info.name == tensor.parameter;
                                         }) - parameters.begin());
    RC_ASSERT(p < parameters.size());
    const int64_t count = parameters[p].element_count;
    std::vector<float> values(static_cast<size_t>(count));
    cast_to_fp32(tensor.dtype, tensor.bytes.data(), values.data(), values.size());
    for (int64_t e = 0; e < count; ++e) {
      const float initial = round_through(precision, mlp_initial_value(model, seed, static_cast<int64_t>(p), e));
      const float value = values[static_cast<size_t>(e)];
      if (!frozen_mask[p]) {
        if (tensor.component == "params" && float_bits(value) != float_bits(initial)) some_trainable_moved = true;
        continue;
      }
      if (tensor.component == "params" || tensor.component == "master") {
        RC_ASSERT(float_bits(value) == float_bits(initial));
      } else {
        RC_ASSERT(float_bits(value) == 0u);  // no optimizer state
      }
    }
  }
  RC_ASSERT(some_trainable_moved);
}

// A frozen parameter's gradient is not kept, so it adds nothing to the global norm (DeepSpeed
// norms the optimizer's partitions only): at step 1 (same weights, same batch) the norm with the
// last layer frozen is below the norm of the run where everything trains, at every W.
TEST(Engine, FrozenGradientsAddNothingToTheNorm) {
  const ModelSpec model{{6, 8, 3}};
  for (const int world_size : {1, 3}) {
    SCOPED_TRACE("W=" + std::to_string(world_size));
    TrainingOptions everything = make_options(model, Precision::kFp32, 2, 1, world_size, 64, 11);
    everything.config.gradient_clipping = 0.0;
    TrainingOptions frozen = everything;
    frozen.frozen_parameters = {"layers.1.weight", "layers.1.bias"};
    const TrainingRun all_run = train_or_fail(everything, 1);
    const TrainingRun frozen_run = train_or_fail(frozen, 1);
    ASSERT_EQ(all_run.steps.size(), 1u);
    ASSERT_EQ(frozen_run.steps.size(), 1u);
    EXPECT_GT(frozen_run.steps[0].grad_norm, 0.0);
    EXPECT_LT(frozen_run.steps[0].grad_norm, all_run.steps[0].grad_norm);
  }
}

TEST(Engine, FrozenParameterNamesAreChecked) {
  TrainingOptions options = make_options(ModelSpec{{4, 3, 2}}, Precision::kFp32, 1, 1, 1, 64, 1);
  options.frozen_parameters = {"layers.0.weight", "layers.9.bias"};
  Status status = validate_training_options(options);
  EXPECT_NE(status.message().find("frozen parameter 'layers.9.bias': the model 4,3,2 has no parameter of that name"),
            std::string::npos) << status.to_string();
  options.frozen_parameters = {"layers.0.weight", "layers.0.weight"};
  status = validate_training_options(options);
  EXPECT_NE(status.message().find("'layers.0.weight' is named twice"), std::string::npos) << status.to_string();
  options.frozen_parameters = {""};
  EXPECT_FALSE(validate_training_options(options).ok());
  options.frozen_parameters = {"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"};
  status = validate_training_options(options);
  EXPECT_NE(status.message().find("nothing is left to train"), std::string::npos) << status.to_string();
  options.frozen_parameters = {"layers.1.bias"};
  EXPECT_TRUE(validate_training_options(options).ok());
}

TEST(Engine, LossFallsOnTheDefaultShape) {
  const ModelSpec model;
  TrainingOptions options = make_options(model, Precision::kFp16, 4, 2, 2, 1000000000, 1234);
  options.config.scheduler.warmup_num_steps = 10;
  options.config.scheduler.warmup_max_lr = 1e-2;
  options.data.sample_count = 4096;
  const TrainingRun run = train_or_fail(options, 150);
  ASSERT_EQ(run.steps.size(), 150u);
  double first_mean = 0, last_mean = 0;
  for (int i = 0; i < 20; ++i) first_mean += run.steps[i].loss / 20.0;
  for (int i = 130; i < 150; ++i) last_mean += run.steps[i].loss / 20.0;
  EXPECT_LT(last_mean, 0.8 * first_mean) << "first 20 steps " << first_mean << ", last 20 " << last_mean;
}

TEST(Engine, Fp16OverflowSkipsTheUpdateAndTheSchedulerAndCountsSkippedSteps) {
  const ModelSpec model;
  TrainingOptions options = make_options(model, Precision::kFp16, 4, 1, 2, 1000000000, 9);
  // 2^40 times a gradient overflows fp16 (max 65504) on the first step.
  options.config.loss_scaler.initial_scale_power = 40;
  options.config.loss_scaler.hysteresis = 1;
  const TrainingRun run = train_or_fail(options, 3);
  ASSERT_EQ(run.steps.size(), 3u);
  EXPECT_TRUE(run.steps[0].skipped);
  EXPECT_EQ(run.steps[0].loss_scale, std::ldexp(1.0, 40));
  EXPECT_EQ(run.steps[1].loss_scale, std::ldexp(1.0, 39));
  EXPECT_EQ(run.final_state.counters.global_steps, 3);
  int64_t skipped = 0;
  for (const StepRecord& step : run.steps) skipped += step.skipped ? 1 : 0;
  EXPECT_EQ(run.final_state.counters.skipped_steps, skipped);
  EXPECT_EQ(run.final_state.counters.optimizer_steps, 3 - skipped);
  // The scheduler steps only on updates: it started at -1.
  EXPECT_EQ(run.final_state.scheduler_last_batch_iteration, -1 + (3 - skipped));
  EXPECT_EQ(run.final_state.counters.global_samples, 3 * options.config.train_batch_size);
}

// The first loss-scale power at which step 1 overflows (and is skipped).
int first_overflowing_power(TrainingOptions options) {
  options.config.loss_scaler.hysteresis = 1;
  for (int power = 0; power <= 60; ++power) {
    options.config.loss_scaler.initial_scale_power = power;
    const TrainingRun run = train_or_fail(options, 1);
    if (run.steps.empty()) return -1;
    if (run.steps[0].skipped) return power;
  }
  return -1;
}

// DeepSpeed casts each rank's micro-batch gradient of S * mean loss / G to fp16 before it
// divides by W; the portable numerics cast S * mean loss / (G * W). So at W = 4 an overflow
// fires at a scale 4 times (two powers) smaller under the "deepspeed" numerics, with one
// micro-step; with three, DeepSpeed's fp16 accumulation of the micro-steps can overflow
// earlier still. These are DeepSpeed's overflow steps, which the portable default moves.
TEST(Engine, DeepSpeedNumericsOverflowAtTheScaleDeepSpeedOverflowsAt) {
  const ModelSpec model;
  for (int64_t accumulation : {1, 3}) {
    TrainingOptions portable = make_options(model, Precision::kFp16, 2, accumulation, 4, 1000000000, 5);
    TrainingOptions deepspeed = portable;
    deepspeed.config.numerics = NumericsMode::kDeepSpeed;
    const int portable_power = first_overflowing_power(portable);
    const int deepspeed_power = first_overflowing_power(deepspeed);
    ASSERT_GT(deepspeed_power, 0);
    if (accumulation == 1) {
      EXPECT_EQ(portable_power, deepspeed_power + 2);
    } else {
      EXPECT_LE(deepspeed_power, portable_power - 2);
    }
  }
}

// The portable numerics give the same bits at every W for one global batch; the "deepspeed"
// numerics do not (fp16 pre-division, fp16 sums and fp16 accumulation depend on W), which is
// why only its same-W resume is bit-exact (checkpoint_test).
TEST(Engine, DeepSpeedNumericsDependOnTheWorldSizeAndPortableOnesDoNot) {
  const ModelSpec model;
  for (NumericsMode numerics : {NumericsMode::kPortable, NumericsMode::kDeepSpeed}) {
    TrainingOptions one = make_options(model, Precision::kFp16, 2, 4, 1, 1000000000, 13);
    TrainingOptions two = make_options(model, Precision::kFp16, 2, 2, 2, 1000000000, 13);
    one.config.numerics = two.config.numerics = numerics;
    const TrainingRun at_one = train_or_fail(one, 4);
    const TrainingRun at_two = train_or_fail(two, 4);
    if (numerics == NumericsMode::kPortable) {
      EXPECT_EQ(at_one.digests.state, at_two.digests.state);
    } else {
      EXPECT_NE(at_one.digests.master, at_two.digests.master);
    }
  }
}

TEST(Engine, RefusesHyperparametersThatWouldTurnIntoNaN) {
  RealEnv real_env;
  TrainingOptions options = make_options(ModelSpec{}, Precision::kFp32, 2, 1, 1, 100, 1);
  options.config.optimizer.epsilon = 0.0;
  Result<TrainingRun> run = run_training(options, 1, real_env.env());
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("eps"), std::string::npos) << run.status().message();
  options = make_options(ModelSpec{}, Precision::kFp32, 2, 1, 1, 100, 1);
  options.config.scheduler.warmup_max_lr = 1e300;  // not a float
  run = run_training(options, 1, real_env.env());
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("warmup_max_lr"), std::string::npos) << run.status().message();
  options = make_options(ModelSpec{}, Precision::kFp32, 2, 1, 1, 100, 1);
  options.config.optimizer.beta2 = 1.0;
  run = run_training(options, 1, real_env.env());
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("betas[1]"), std::string::npos) << run.status().message();
}

// Throws std::bad_alloc on one rank at one crash point, as an allocation deep in a step would.
class ThrowingCrashPoints final : public CrashPointHook {
 public:
  ThrowingCrashPoints(std::string site, int rank) : site_(std::move(site)), rank_(rank) {}
  void hit(std::string_view site, int rank) override {
    if (site == site_ && rank == rank_) throw std::bad_alloc();
  }

 private:
  std::string site_;
  int rank_;
};

TEST(Engine, AnExceptionInARankBecomesAnErrorNotACrash) {
  // Rank 2 fails between its sub-group updates while the others go on to the next step's
  // collectives: they must be released, and the run must return an error naming rank 2.
  TrainingOptions options = make_options(ModelSpec{}, Precision::kFp32, 2, 1, 4, 10, 1);
  RealEnv real_env;
  ThrowingCrashPoints crash_points("optimizer.sub_group_stepped", 2);
  Env env = real_env.env();
  env.crash_points = &crash_points;
  Result<TrainingRun> run = run_training(options, 3, env);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kResourceExhausted) << run.status().to_string();
  EXPECT_NE(run.status().message().find("rank 2"), std::string::npos) << run.status().message();
}

TEST(Engine, RefusesARunThatCannotFitTheMemoryLimit) {
  TrainingOptions options = make_options(ModelSpec{}, Precision::kFp32, int64_t{1} << 40, 1, 2, 100, 1);
  options.memory_limit_bytes = uint64_t{64} << 30;
  RealEnv real_env;
  Result<TrainingRun> run = run_training(options, 1, real_env.env());
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kResourceExhausted) << run.status().to_string();
  EXPECT_NE(run.status().message().find("micro batch"), std::string::npos) << run.status().message();
  // The default shape fits easily.
  options = make_options(ModelSpec{}, Precision::kFp32, 4, 1, 2, 100, 1);
  options.memory_limit_bytes = uint64_t{64} << 30;
  EXPECT_TRUE(run_training(options, 1, real_env.env()).ok());
  EXPECT_LT(estimate_rank_memory_bytes(options), uint64_t{4} << 20);
}

TEST(Engine, RefusesABatchThatDoesNotMatchTheWorldSize) {
  TrainingOptions options = make_options(ModelSpec{}, Precision::kFp32, 2, 2, 2, 100, 1);
  options.world_size = 3;
  RealEnv real_env;
  Result<TrainingRun> run = run_training(options, 1, real_env.env());
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(run.status().message().find("train_batch_size"), std::string::npos) << run.status().message();
}

}  // namespace
}  // namespace zerosim

namespace zerosim {
namespace {

// run_training_rank, the loop of one process of a multi-process run, on W threads with one
// ThreadComm each: the same steps, digests and checkpoints as run_training, and a save by the
// per-rank loop resumes in run_training (and the other way) bit for bit. The multi-process launch
// over NCCL runs on the GPU machine (scripts/gpu-check.sh).
TEST(Engine, TheSingleRankLoopGivesRunTrainingsBitsAndCheckpoints) {
  TestDirectory directory;
  const int world_size = 3;
  TrainingOptions options = make_options(ModelSpec{}, Precision::kBf16, 2, 2, world_size, 300, 17);
  options.digest_every_step = true;
  RealEnv real_env;
  Result<TrainingRun> reference = run_training(options, 6, real_env.env());
  ASSERT_TRUE(reference.ok()) << reference.status().to_string();

  auto per_rank = [&](const CheckpointPlan& plan, int64_t steps) {
    ThreadCommWorld world(world_size), checkpoint_world(world_size);
    std::vector<Result<TrainingRun>> runs(static_cast<size_t>(world_size), Result<TrainingRun>(aborted("not run")));
    std::vector<std::thread> threads;
    for (int rank = 0; rank < world_size; ++rank) {
      threads.emplace_back([&, rank] {
        RealEnv rank_env;
        runs[static_cast<size_t>(rank)] =
            run_training_rank(options, steps, world.comm(rank), &checkpoint_world.comm(rank), rank_env.env(), plan);
      });
    }
    for (std::thread& thread : threads) thread.join();
    return runs;
  };
  CheckpointPlan saving;
  saving.save_directory = directory.path() + "/per-rank";
  saving.save_every_steps = 3;
  std::vector<Result<TrainingRun>> runs = per_rank(saving, 6);
  for (const Result<TrainingRun>& run : runs) ASSERT_TRUE(run.ok()) << run.status().to_string();
  EXPECT_EQ(runs[0]->digests.state, reference->digests.state);
  ASSERT_EQ(runs[0]->step_digests.size(), reference->step_digests.size());
  for (size_t k = 0; k < runs[0]->step_digests.size(); ++k) {
    EXPECT_EQ(first_difference(reference->step_digests[k], runs[0]->step_digests[k]), "") << "step " << k + 1;
  }
  EXPECT_TRUE(runs[1]->steps.empty()) << "only rank 0 reports the run";

  // The per-rank loop's step-3 checkpoint, resumed by run_training; and run_training's, by the loop.
  CheckpointPlan resuming;
  resuming.resume_directory = saving.save_directory;
  resuming.resume_tag = "global_step3";
  Result<TrainingRun> resumed = run_training(options, 6, real_env.env(), resuming);
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  EXPECT_EQ(resumed->digests.state, reference->digests.state);
  CheckpointPlan threads_saving;
  threads_saving.save_directory = directory.path() + "/threads";
  ASSERT_TRUE(run_training(options, 3, real_env.env(), threads_saving).ok());
  CheckpointPlan loop_resuming;
  loop_resuming.resume_directory = threads_saving.save_directory;
  runs = per_rank(loop_resuming, 6);
  for (const Result<TrainingRun>& run : runs) ASSERT_TRUE(run.ok()) << run.status().to_string();
  EXPECT_EQ(runs[0]->digests.state, reference->digests.state);
}

TEST(Engine, TheSingleRankLoopRefusesACommOfAnotherWorldSize) {
  TrainingOptions options = make_options(ModelSpec{}, Precision::kFp32, 2, 1, 2, 300, 17);
  ThreadCommWorld world(1);
  RealEnv real_env;
  Result<TrainingRun> run = run_training_rank(options, 1, world.comm(0), nullptr, real_env.env());
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(run.status().message().find("communicator has 1 ranks, the run 2"), std::string::npos) << run.status().to_string();
}

}  // namespace
}  // namespace zerosim

namespace zerosim {
namespace {

// Counts the steps the ranks finish (engine.step_end hits), to show a refusal came first.
class StepCounter final : public CrashPointHook {
 public:
  void hit(std::string_view site, int) override {
    if (site == "engine.step_end") ++steps_;
  }
  int steps() const { return steps_.load(); }

 private:
  std::atomic<int> steps_{0};
};

// A stop request (the CLI's SIGTERM/SIGINT) ends every rank after the same step; with
// save_on_stop that step is saved, and resuming from it gives the uninterrupted run's bits.
TEST(Engine, AStopRequestEndsEveryRankAfterTheSameStepAndSavesIt) {
  TestDirectory directory;
  TrainingOptions options = make_options(ModelSpec{}, Precision::kFp16, 2, 2, 3, 300, 17);
  RealEnv real_env;
  Result<TrainingRun> reference = run_training(options, 5, real_env.env());
  ASSERT_TRUE(reference.ok()) << reference.status().to_string();

  std::atomic<bool> stop{true};  // already requested: every rank sees it after its first step
  CheckpointPlan plan;
  plan.save_directory = directory.path() + "/stopped";
  plan.stop_requested = &stop;
  plan.save_on_stop = true;
  Result<TrainingRun> stopped = run_training(options, 5, real_env.env(), plan);
  ASSERT_TRUE(stopped.ok()) << stopped.status().to_string();
  EXPECT_TRUE(stopped->stopped_early);
  ASSERT_EQ(stopped->steps.size(), 1u);
  EXPECT_EQ(stopped->last_saved_step, 1);
  CheckpointPlan resuming;
  resuming.resume_directory = plan.save_directory;
  Result<TrainingRun> resumed = run_training(options, 5, real_env.env(), resuming);
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  EXPECT_EQ(resumed->steps.size(), 4u);
  EXPECT_EQ(resumed->digests.state, reference->digests.state);

  // Without save_on_stop: stopped, nothing saved (the save directory holds no tag).
  plan.save_directory = directory.path() + "/unsaved";
  plan.save_on_stop = false;
  stopped = run_training(options, 5, real_env.env(), plan);
  ASSERT_TRUE(stopped.ok()) << stopped.status().to_string();
  EXPECT_TRUE(stopped->stopped_early);
  EXPECT_EQ(stopped->last_saved_step, -1);
  std::unique_ptr<Disk> disk = make_posix_disk();
  EXPECT_FALSE(*disk->exists(plan.save_directory + "/latest"));

  // Never requested: the whole run, and not stopped_early.
  stop = false;
  plan.save_on_stop = true;
  Result<TrainingRun> whole = run_training(options, 5, real_env.env(), plan);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  EXPECT_FALSE(whole->stopped_early);
  EXPECT_EQ(whole->steps.size(), 5u);
  EXPECT_EQ(whole->digests.state, reference->digests.state);
}

// A checkpoint directory that cannot be written is refused before the first step.
TEST(Engine, ASaveDirectoryThatCannotBeWrittenIsRefusedBeforeTraining) {
  TestDirectory directory;
  TrainingOptions options = make_options(ModelSpec{}, Precision::kFp32, 2, 1, 2, 300, 17);
  RealEnv real_env;
  for (const FaultOperation operation : {FaultOperation::kCreateDirectory, FaultOperation::kOpen, FaultOperation::kWrite}) {
    FaultyDisk disk(*real_env.env().disk, {{directory.path() + "/ckpt*", operation, 0, FaultKind::kIoError, 0, 0}});
    StepCounter steps;
    Env env = real_env.env();
    env.disk = &disk;
    env.crash_points = &steps;
    CheckpointPlan plan;
    plan.save_directory = directory.path() + "/ckpt";
    plan.save_every_steps = 2;
    const Result<TrainingRun> run = run_training(options, 4, env, plan);
    ASSERT_FALSE(run.ok()) << fault_operation_name(operation);
    EXPECT_EQ(run.status().code(), StatusCode::kFailedPrecondition) << run.status().to_string();
    EXPECT_NE(run.status().message().find("checkpoint directory " + plan.save_directory + " cannot be saved into"),
              std::string::npos)
        << run.status().to_string();
    EXPECT_EQ(steps.steps(), 0) << fault_operation_name(operation) << ": a step ran before the refusal";
  }
}

// The disk fills during the second save: the run fails saying which checkpoint is still the
// committed one, and a resume from the directory loads it and continues bit for bit.
TEST(Engine, ADiskFullDuringASaveLeavesThePreviousCheckpointAndSaysSo) {
  TestDirectory directory;
  TrainingOptions options = make_options(ModelSpec{}, Precision::kBf16, 2, 1, 2, 300, 17);
  RealEnv real_env;
  Result<TrainingRun> reference = run_training(options, 6, real_env.env());
  ASSERT_TRUE(reference.ok()) << reference.status().to_string();
  FaultyDisk disk(*real_env.env().disk,
                  {{"*/global_step4/rank-00001-of-00002.safetensors", FaultOperation::kWrite, 1, FaultKind::kNoSpace, 0, 0}});
  Env env = real_env.env();
  env.disk = &disk;
  CheckpointPlan plan;
  plan.save_directory = directory.path() + "/ckpt";
  plan.save_every_steps = 2;
  const Result<TrainingRun> run = run_training(options, 6, env, plan);
  ASSERT_FALSE(run.ok());
  EXPECT_EQ(run.status().code(), StatusCode::kResourceExhausted) << run.status().to_string();
  EXPECT_NE(run.status().message().find("global_step4"), std::string::npos) << run.status().to_string();
  EXPECT_NE(run.status().message().find("the last committed checkpoint is " + plan.save_directory + "/global_step2"),
            std::string::npos)
      << run.status().to_string();
  CheckpointPlan resuming;
  resuming.resume_directory = plan.save_directory;
  Result<TrainingRun> resumed = run_training(options, 6, real_env.env(), resuming);
  ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
  EXPECT_EQ(resumed->steps.size(), 4u) << "resumed from global_step2";
  EXPECT_EQ(resumed->digests.state, reference->digests.state);
}

}  // namespace
}  // namespace zerosim

namespace zerosim {
namespace {

// CheckpointPlan::save_at_steps: the listed steps are saved (0: the fresh state, before any
// step), save_at_end = false leaves the last step unsaved, and a resume from a listed step
// continues bit for bit; a negative step is refused by name.
TEST(Engine, SavesAtListedStepsOnlyWhenAskedNotAtTheEnd) {
  TestDirectory directory;
  TrainingOptions options = make_options(ModelSpec{}, Precision::kFp32, 2, 1, 2, 300, 17);
  RealEnv real_env;
  Result<TrainingRun> reference = run_training(options, 5, real_env.env());
  ASSERT_TRUE(reference.ok()) << reference.status().to_string();
  CheckpointPlan listed;
  listed.save_directory = directory.path() + "/listed";
  listed.save_at_steps = {0, 3};
  listed.save_at_end = false;
  Result<TrainingRun> saving = run_training(options, 5, real_env.env(), listed);
  ASSERT_TRUE(saving.ok()) << saving.status().to_string();
  EXPECT_EQ(saving->digests.state, reference->digests.state) << "saving changed the run";
  EXPECT_EQ(saving->last_saved_step, 3);
  for (const char* tag : {"global_step0", "global_step3"}) {
    EXPECT_TRUE(std::filesystem::exists(listed.save_directory + "/" + tag + "/" + kManifestFileName)) << tag;
  }
  EXPECT_FALSE(std::filesystem::exists(listed.save_directory + "/global_step5")) << "save_at_end = false saved the end";
  for (const char* tag : {"global_step0", "global_step3"}) {
    CheckpointPlan resuming;
    resuming.resume_directory = listed.save_directory;
    resuming.resume_tag = tag;
    Result<TrainingRun> resumed = run_training(options, 5, real_env.env(), resuming);
    ASSERT_TRUE(resumed.ok()) << tag << ": " << resumed.status().to_string();
    EXPECT_EQ(resumed->digests.state, reference->digests.state) << "resumed from " << tag;
  }
  CheckpointPlan negative;
  negative.save_directory = directory.path() + "/negative";
  negative.save_at_steps = {2, -1};
  Result<TrainingRun> refused = run_training(options, 5, real_env.env(), negative);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("save at steps: expected steps >= 0, got -1"), std::string::npos)
      << refused.status().to_string();
  CheckpointPlan nowhere;
  nowhere.save_at_steps = {2};
  Result<TrainingRun> no_directory = run_training(options, 5, real_env.env(), nowhere);
  ASSERT_FALSE(no_directory.ok());
  EXPECT_NE(no_directory.status().message().find("needs a save directory"), std::string::npos)
      << no_directory.status().to_string();
}

}  // namespace
}  // namespace zerosim
