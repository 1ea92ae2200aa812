// The compute seam of a rank engine: where a micro-batch's forward, loss and backward, and the
// AdamW update of a sub-group, run. The engine keeps the ZeRO-3 bookkeeping (partitions,
// gathers, the gradient exchange, swaps, checkpoints) and hands each layer's gathered fp32
// weights to the backend and takes its fp32 gradients back, so the same engine drives the CPU
// kernels (core/model/mlp.h, core/optim/adamw.h) or a CUDA device (core/cuda/
// device_compute_backend.h), which holds the micro-batch's activations in device memory.
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

#include "core/model/mlp.h"
#include "core/optim/adamw.h"
#include "core/status.h"

namespace zerosim {

class ComputeBackend {
 public:
  virtual ~ComputeBackend() = default;
  // "cpu", or "cuda:<device>": for notes and reports.
  virtual std::string name() const = 0;

  // Starts a micro-batch: `input` is [samples, features] and `labels` [samples].
  virtual Status begin_micro_batch(int64_t samples, std::span<const float> input, std::span<const int32_t> labels) = 0;
  // Layer `layer_index`'s forward with its full gathered weight [out, in] and bias [out], in
  // layer order 0..L-1 (mlp_layer_forward).
  virtual Status layer_forward(int64_t layer_index, std::span<const float> weight, std::span<const float> bias) = 0;
  // After the last layer's forward: the micro-batch's mean loss, and the gradient of
  // gradient_scale x the summed loss with respect to the logits, kept for the backward
  // (softmax_cross_entropy).
  virtual Result<float> loss(float gradient_scale) = 0;
  // Layer `layer_index`'s backward, in layer order L-1..0 after loss(): writes the layer's
  // weight and bias gradients (from zero) and keeps the gradient of the previous layer's
  // output for the next call (mlp_layer_backward).
  virtual Status layer_backward(int64_t layer_index, std::span<const float> weight, std::span<float> weight_gradient,
                                std::span<float> bias_gradient) = 0;

  // AdamW on `count` elements of a sub-group's flat fp32 arrays in host memory, in place
  // (adam_update).
  virtual Status adam_update(const AdamStepScalars& scalars, float grad_multiplier, float* master,
                             const float* gradient, float* exp_avg, float* exp_avg_sq, size_t count) = 0;
};

// The CPU backend: the kernels of core/model/mlp.h and core/optim/adamw.h on `simd_path`.
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
