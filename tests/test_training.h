// Training options and comparisons shared by the engine and checkpoint tests.
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <string>
#include <utility>

#include "core/engine/engine.h"

namespace zerosim {

inline ResolvedConfig base_config(Precision precision, int64_t micro_batch, int64_t accumulation, int world_size) {
  ResolvedConfig config;
  config.precision = precision;
  config.communication_dtype = precision;
  config.micro_batch_size = micro_batch;
  config.gradient_accumulation_steps = accumulation;
  config.train_batch_size = micro_batch * accumulation * world_size;
  config.gradient_clipping = 1.0;
  config.optimizer.learning_rate = 1e-2;
  config.optimizer.weight_decay = 0.01;
  config.scheduler.type = SchedulerType::kWarmupLR;
  config.scheduler.warmup_min_lr = 0.0;
  config.scheduler.warmup_max_lr = 1e-2;
  config.scheduler.warmup_num_steps = 5;
  config.zero.stage = 3;
  config.loss_scaler.dynamic = true;
  config.loss_scaler.initial_scale_power = 16;
  config.loss_scaler.loss_scale_window = 4;
  config.loss_scaler.hysteresis = 2;
  return config;
}

// A small GPT-2-style transformer for properties (the tied embedding, causal attention, every
// stage of the plan), drawn inside a RapidCheck property: 1-2 blocks, 1-2 heads of 1-4 dims,
// a vocabulary of 3-24 and a block of 1-6 positions.
inline ModelSpec draw_transformer() {
  GptSpec spec;
  spec.layers = *rc::gen::inRange<int64_t>(1, 3);
  spec.heads = *rc::gen::inRange<int64_t>(1, 3);
  spec.embd = spec.heads * *rc::gen::inRange<int64_t>(1, 5);
  spec.vocab = *rc::gen::inRange<int64_t>(3, 25);
  spec.block = *rc::gen::inRange<int64_t>(1, 7);
  return transformer_model(spec);
}

inline TrainingOptions make_options(const ModelSpec& model, Precision precision, int64_t micro_batch, int64_t accumulation,
                             int world_size, int64_t sub_group_size, uint64_t seed) {
  TrainingOptions options;
  options.config = base_config(precision, micro_batch, accumulation, world_size);
  options.config.zero.sub_group_size = sub_group_size;
  options.model = model;
  options.world_size = world_size;
  options.seed = seed;
  options.data = dataset_for_model(model, 97, seed);  // 97: not a multiple of the batch, epochs wrap mid-batch
  return options;
}

inline TrainingRun train_or_fail(const TrainingOptions& options, int64_t steps) {
  RealEnv real_env;
  Result<TrainingRun> run = run_training(options, steps, real_env.env());
  EXPECT_TRUE(run.ok()) << run.status().to_string();
  return run.ok() ? std::move(run).value() : TrainingRun{};
}

// Names the first component that differs, so a failure says what was lost.
inline std::string first_difference(const ComponentDigests& expected, const ComponentDigests& actual) {
  return first_differing_component(expected, actual);
}

}  // namespace zerosim
