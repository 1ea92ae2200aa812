// The compute seam of a rank engine: where a micro-batch's forward, loss and backward, and the
// AdamW update of a sub-group, run. The engine keeps the ZeRO-3 bookkeeping (partitions,
// gathers, the gradient exchange, swaps, checkpoints) and hands each stage's gathered fp32
// weights to the backend and takes its fp32 gradients back, so the same engine drives the CPU
// kernels (core/model/mlp.h, core/model/gpt.h, core/optim/adamw.h) or a CUDA device
// (core/cuda/device_compute_backend.h), which holds the micro-batch's activations
// in device memory.
//
// The promise every backend keeps: the CPU kernels' bits. Every sum is the same left fold in
// the same order with separately rounded multiplies and adds, exp and log are portable_exp and
// portable_log, and AdamW is the op sequence of adamw.h; so the choice of backend changes no
// bit of the state, and a run may save on one and resume on the other.
//
// A backend belongs to one rank and is used from that rank's thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/model/model_spec.h"
#include "core/optim/adamw.h"
#include "core/status.h"

namespace zerosim {

// One micro-batch's inputs, each the model's kind: the MLP's features and labels, or the
// transformer's token windows and its causal mask (a derived buffer the engine owns).
struct MicroBatchInput {
  int64_t samples = 0;
  std::span<const float> features;  // MLP: [samples, input width]
  std::span<const int32_t> labels;   // MLP: [samples]
  std::span<const int32_t> tokens;   // transformer: [samples, sequence_length + 1]
  int64_t sequence_length = 0;       // transformer
  std::span<const float> causal_mask;  // transformer: [block, block]; alive for the micro-batch
};

class ComputeBackend {
 public:
  virtual ~ComputeBackend() = default;
  // "cpu", or "cuda:<device>": for notes and reports.
  virtual std::string name() const = 0;

  // Starts a micro-batch.
  virtual Status begin_micro_batch(const MicroBatchInput& batch) = 0;
  // Forward stage `stage` of the model's plan (model_plan in model_spec.h), in order, with the
  // full fp32 tensors of the parameters that stage gathers.
  virtual Status forward(int64_t stage, std::span<const std::vector<float>> parameters) = 0;
  // After the last forward stage: the micro-batch's mean loss, and the gradient of
  // gradient_scale x the summed loss with respect to the logits, kept for the backward.
  virtual Result<float> loss(float gradient_scale) = 0;
  // Backward stage `stage` of the plan, in order after loss(): adds the stage's gradients into
  // `gradients` (the full tensors of its gradient range, which the engine zeroes at their first
  // use in the micro-batch, so a tied parameter receives both uses in the plan's order). The MLP's
  // backends may write instead of adding: each MLP parameter has one use, so the two agree.
  virtual Status backward(int64_t stage, std::span<const std::vector<float>> parameters,
                          std::span<std::vector<float>> gradients) = 0;

  // AdamW on `count` elements of a sub-group's flat fp32 arrays in host memory, in place
  // (adam_update).
  virtual Status adam_update(const AdamStepScalars& scalars, float grad_multiplier, float* master,
                             const float* gradient, float* exp_avg, float* exp_avg_sq, size_t count) = 0;
};

// The CPU backend: the kernels of core/model/mlp.h or core/model/gpt.h, and core/optim/adamw.h
// on `simd_path`.
std::unique_ptr<ComputeBackend> make_cpu_compute_backend(const ModelSpec& model, SimdPath simd_path);

// Makes rank `rank`'s backend for a world of `world_size` ranks. Set in TrainingOptions to run
// a rank's compute elsewhere than on the CPU (the tools layer builds it from --device).
using ComputeBackendFactory =
    std::function<Result<std::unique_ptr<ComputeBackend>>(int rank, int world_size, const ModelSpec& model)>;

// Where a run computes: a name for reports and caches, and the factory (empty: the CPU).
// Backends promise the same bits, but a verdict says where it was reached, and a cached
// reference is only reused on the device that made it.
struct ComputeDevice {
  std::string name = "cpu";  // "cpu" or "cuda"
  ComputeBackendFactory factory;
};

}  // namespace zerosim
