// The training state as the oracles see it: a step's record, the counters, the digests of each
// component, the canonical full state at the end of a run, and a captured state (every tensor
// whole) for a divergence diagnosis. None of it depends on the world size or on where the state
// lives.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/data/dataset.h"
#include "core/model/model_spec.h"
#include "core/optim/loss_scaler.h"
#include "core/tensor/dtype.h"

namespace zerosim {

struct StepRecord {
  int64_t step = 0;         // 1-based global step
  float loss = 0.0f;        // mean over the global batch's micro-batches
  double learning_rate = 0.0;
  double loss_scale = 1.0;  // the scale this step's backward used
  double grad_norm = 0.0;   // unscaled global L2 norm; -1 when it was not finite (DeepSpeed's sentinel)
  bool skipped = false;     // fp16 overflow: no update
  // Wall time of the optimizer phase (overflow check, norm, sub-group updates and swaps), from
  // the Clock seam: for benchmarks only, never part of a digest or of the --json contract.
  uint64_t optimizer_ns = 0;
  // Wall time of the whole step (micro-steps, exchange and optimizer), from the Clock seam:
  // for benchmarks only, like optimizer_ns.
  uint64_t step_ns = 0;
  // The micro-steps' share of step_ns, for benchmarks only like the two above: the micro-
  // batches' data (generated and handed to the backend), the forward stages with their gathers
  // and the loss, the backward stages with their gathers and each layer's gradient exchange.
  // A device backend waits for its work at the loss and at each exchange, so these are device
  // time too; what step_ns has beyond them and optimizer_ns is the host's own work.
  uint64_t data_ns = 0;
  uint64_t forward_ns = 0;
  uint64_t backward_ns = 0;
};

struct TrainingCounters {
  int64_t global_steps = 0;
  int64_t skipped_steps = 0;
  int64_t global_samples = 0;
  int64_t optimizer_steps = 0;  // Adam's step count t (every sub-group steps together)
  // Steps taken (not skipped) before this optimizer state began: a load with
  // load_optimizer_states=false keeps the run's counters and starts Adam afresh, so that
  // optimizer_steps == global_steps - skipped_steps - steps_before_optimizer always holds.
  int64_t steps_before_optimizer = 0;
};

struct ComponentDigests {
  std::string params, master, exp_avg, exp_avg_sq, counters, scheduler, loss_scaler, rng, data;
  // Every model buffer, derived and persistent (model_buffers); empty for a model without one.
  std::string buffers;
  std::string state;  // over all of the above, in that order (buffers only when the model has some)
};

// The training state at the end of a run, in canonical form: the scalar components, and
// 128-bit XXH3 digests (32 hex digits) of every component over full tensors in parameter
// order, unpadded, little-endian, so they depend neither on W nor on where the state lives.
struct FullTrainingState {
  std::vector<ParameterInfo> parameters;
  DType model_dtype = DType::kFp32;
  TrainingCounters counters;
  int64_t scheduler_last_batch_iteration = -1;
  double scheduler_learning_rate = 0.0;
  LossScalerState loss_scaler;
  RngState shuffle_stream;
  uint64_t seed = 0;
  int64_t data_position = 0;  // samples consumed
  // The model's buffers (model_buffers' order), the same on every rank.
  std::vector<std::vector<float>> buffers;
  ComponentDigests digests;
};

// One full tensor of a captured state (TrainingOptions::capture_state_at_step).
struct CapturedTensor {
  std::string component;   // "params", "master", "exp_avg", "exp_avg_sq" or "buffers"
  std::string parameter;   // the parameter's (or the buffer's) name
  DType dtype = DType::kFp32;  // params: the model dtype; the optimizer state: fp32
  // ceil(N / W) of the run that captured it: element e is owned by rank e / partition_size (0
  // for a buffer: every rank holds it whole).
  int64_t partition_size = 0;
  std::vector<std::byte> bytes;  // unpadded, in element order, little-endian
};
struct CapturedState {
  FullTrainingState scalars;  // counters, scheduler, scaler, RNG, data position, digests
  std::vector<CapturedTensor> tensors;  // per parameter: params, master, exp_avg, exp_avg_sq
};

}  // namespace zerosim
