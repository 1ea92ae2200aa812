// `zerosim train --export-run DIR`: what an implementation outside zerosim needs to train the
// same run and compare it step by step (scripts/torch_reference/ trains it with PyTorch and
// DeepSpeed's own schedule and loss scaler).
//
// DIR gets four files:
//   run.json            the model, batch and precision settings, the resolved optimizer,
//                       scheduler and fp16 blocks, the numerics mode, the parameter names and
//                       zerosim's per-step records (step, loss, lr, loss_scale, grad_norm, skipped)
//   initial.safetensors every parameter's fp32 master at step 0, by its PyTorch-style name
//   batches.safetensors "features" [K * train_batch_size, input width] and "labels" (class ids
//                       as fp32, exact) in global sample-position order: step s uses rows
//                       [s * tbs, (s + 1) * tbs), global micro-batch m = k * W + r of it rows
//                       s * tbs + m * micro_batch ...
//   final.safetensors   "master/<name>", "exp_avg/<name>", "exp_avg_sq/<name>" (fp32) and
//                       "params/<name>" (model dtype) after the last step
// The directory must be empty or absent. A fresh run only (no --resume), in one process.
#pragma once

#include <cstdint>
#include <string>

#include "core/engine/engine.h"
#include "core/env/disk.h"

namespace zerosim {

// `run` is the finished run of `options` over `step_count` steps, with its state captured at
// the last step (options.capture_state_at_step == step_count). Trains the run's first 0 steps
// again to capture the initial state. Errors name the file.
Status export_run(const TrainingOptions& options, int64_t step_count, const TrainingRun& run, Env env,
                  const std::string& directory);

}  // namespace zerosim
