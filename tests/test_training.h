// Training options and comparisons shared by the engine and checkpoint tests.
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cstring>
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

// A run on the real machine's seams (disk, clock), with checkpoints as `plan` says.
inline Result<TrainingRun> train_on_real_env(const TrainingOptions& options, int64_t steps,
                                             const CheckpointPlan& plan = {}) {
  RealEnv real_env;
  return run_training(options, steps, real_env.env(), plan);
}

// The first difference between two runs of the same steps, named ("" when none): the initial
// state, then step by step the state's digests (when both runs kept them), the loss's bits and
// the grad norm, then the final state.
inline std::string first_step_difference(const TrainingRun& expected, const TrainingRun& actual) {
  if (expected.steps.size() != actual.steps.size()) return "step count";
  const std::string initial = first_differing_component(expected.initial_digests, actual.initial_digests);
  if (!initial.empty()) return "initial state: " + initial;
  for (size_t k = 0; k < expected.steps.size(); ++k) {
    const std::string step = "step " + std::to_string(k + 1) + ": ";
    if (k < expected.step_digests.size() && k < actual.step_digests.size()) {
      const std::string component = first_differing_component(expected.step_digests[k], actual.step_digests[k]);
      if (!component.empty()) return step + component;
    }
    if (std::memcmp(&expected.steps[k].loss, &actual.steps[k].loss, sizeof(float)) != 0) {
      return step + "loss " + std::to_string(expected.steps[k].loss) + " vs " + std::to_string(actual.steps[k].loss);
    }
    if (expected.steps[k].grad_norm != actual.steps[k].grad_norm) return step + "grad norm";
  }
  const std::string final_component = first_differing_component(expected.digests, actual.digests);
  return final_component.empty() ? "" : "final state: " + final_component;
}

// Whether the run's notes say its partitions stayed in the compute device's memory
// (ResidentState).
inline bool notes_say_partitions_were_resident(const TrainingRun& run) {
  for (const std::string& note : run.notes) {
    if (note.find("partitions stayed in the memory") != std::string::npos) return true;
  }
  return false;
}

// Names the first component that differs, so a failure says what was lost.
inline std::string first_difference(const ComponentDigests& expected, const ComponentDigests& actual) {
  return first_differing_component(expected, actual);
}

}  // namespace zerosim
