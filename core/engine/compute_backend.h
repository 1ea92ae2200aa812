// The compute seam of a rank engine: where a micro-batch's forward, loss and backward, and the
// AdamW update of a sub-group, run. The engine keeps the ZeRO-3 bookkeeping (partitions,
// gathers, the gradient exchange, swaps, checkpoints) and hands each stage's gathered fp32
// weights to the backend and takes its fp32 gradients back, so the same engine drives the CPU
// kernels (core/model/mlp.h, core/model/gpt.h, core/optim/adamw.h) or a CUDA device
// (core/cuda/device_compute_backend.h), which holds the micro-batch's activations
// in device memory.
//
// The promise every backend keeps: the CPU kernels' bits. Every sum is the same left fold in
// the same order with the same roundings (separate multiplies and adds, fused ones where the
// CPU kernel fuses them: the dense products and AdamW), exp and log are portable_exp and
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

#include "core/data/dataset.h"
#include "core/env/comm.h"
#include "core/model/model_spec.h"
#include "core/optim/adamw.h"
#include "core/status.h"
#include "core/tensor/dtype.h"
#include "core/zero/exact_square_sum.h"
#include "core/zero/partition.h"

namespace zerosim {

// One micro-batch's inputs, each the model's kind: the MLP's features and labels (or, for a
// backend that makes the synthetic samples itself, their dataset indices), or the transformer's
// token windows and its causal mask (a derived buffer the engine owns).
struct MicroBatchInput {
  int64_t samples = 0;
  std::span<const float> features;  // MLP: [samples, input width]
  std::span<const int32_t> labels;   // MLP: [samples]
  std::span<const int64_t> sample_indices;  // MLP, instead of both, when make_synthetic_batches said yes
  std::span<const int32_t> tokens;   // transformer: [samples, sequence_length + 1]
  int64_t sequence_length = 0;       // transformer
  std::span<const float> causal_mask;  // transformer: [block, block]; alive for the micro-batch
};

// The partitions of a rank kept where its backend computes (a GPU's memory), so that a step
// moves no state across PCIe: the engine hands the flat partitions over once (after
// initialization or a load), runs its micro-steps and optimizer steps against them, and takes
// them back before anything reads the host copy (a save, a digest, a gather of the state).
//
// Used for ranks whose parameters are not offloaded, with the portable numerics, every
// parameter trainable and no defect switched on (RankEngine decides; the other cases keep the
// partitions in host memory), whose backends can read each other's memory (adopt says).
//
// Two placements. Optimizer not offloaded: the backend holds everything (16-bit parameters,
// fp32 master, moments, gradient accumulator) and steps the optimizer itself. Optimizer
// offloaded (cpu or nvme; ZeRO-Offload's and ZeRO-Infinity's placement): the backend holds the
// 16-bit parameters and the gradient accumulator; the host keeps master and moments (in memory
// or swapped), takes each sub-group's gradients with gradients_on_host, steps AdamW on the CPU
// and returns the new 16-bit parameters with parameters_from_host. The collectives then
// work on device buffers with the host path's arithmetic: a gather casts every rank's 16-bit
// partition into the full fp32 tensor; a layer's exchange adds, to each owner's fp32
// accumulator, every rank's gradient chunk rounded through the communication dtype, in rank
// order (Comm::reduce_scatter_accumulate's fold); so the bits are the host path's at any W.
class ResidentState {
 public:
  virtual ~ResidentState() = default;
  // Takes this rank's flat partitions (the layout's order, padding included) into the
  // backend's memory, the gradient accumulator zeroed. `master`, `exp_avg` and `exp_avg_sq`
  // empty: the optimizer's state stays with the host (the offloaded placement above).
  // Collective over `comm` (the run's ranks), which the resident collectives use from then on
  // to meet: false (on every rank, before anything is allocated) when the ranks' backends
  // cannot read each other's memory (other processes or devices); the partitions then stay in
  // host memory.
  virtual Result<bool> adopt(Comm& comm, const PartitionLayout& layout, DType model_dtype, DType communication_dtype,
                             std::span<const std::byte> params, std::span<const float> master,
                             std::span<const float> exp_avg, std::span<const float> exp_avg_sq) = 0;
  // Writes the partitions back to host memory (same sizes as adopted; the optimizer's empty
  // when it stays with the host).
  virtual Status copy_to_host(std::span<std::byte> params, std::span<float> master, std::span<float> exp_avg,
                              std::span<float> exp_avg_sq) = 0;
  // Forward stage `stage` with the plan's `gathered` parameters cast from the resident 16-bit
  // partitions (ComputeBackend::forward's contract otherwise).
  virtual Status forward(int64_t stage, ParameterRange gathered) = 0;
  // Backward stage `stage`: the full gradients of `gradients` live in the backend, zeroed first
  // where `fresh[k]` (their first use in the micro-batch) and added to otherwise.
  virtual Status backward(int64_t stage, ParameterRange gathered, ParameterRange gradients,
                          std::span<const uint8_t> fresh) = 0;
  // Layer `layer`'s exchange: its full gradients on every rank folded into the owners' fp32
  // accumulators. Collective.
  virtual Status reduce_layer(const LayerRange& layer) = 0;
  // The exact sum of squares of the accumulator (its non-finite flag is the overflow check).
  virtual Result<ExactSquareSum> gradient_squares() = 0;
  // AdamW on [offset, offset + count) of the resident master, accumulator and moments.
  virtual Status adam_update(const AdamStepScalars& scalars, float grad_multiplier, size_t offset, size_t count) = 0;
  // The 16-bit parameters of [offset, offset + count) from the master (round to nearest even).
  virtual Status store_parameters(size_t offset, size_t count) = 0;
  // The offloaded placement: the accumulator's [offset, offset + count) in host memory,
  // complete when the call returns, in the backend's staging (pinned memory on a GPU): the span
  // stays valid until the next call. When next_count > 0 the copy of [next_offset, next_offset +
  // next_count) starts behind it, so that the next sub-group's gradients move while the caller
  // steps this one's (the next call should ask for that range; a prefetch is forgotten once the
  // accumulator changes or the step ends).
  virtual Result<std::span<const float>> gradients_on_host(size_t offset, size_t count, size_t next_offset,
                                                           size_t next_count) = 0;
  // The offloaded placement: the 16-bit parameters of [offset, offset + count) from host memory
  // (`params` holds count elements of the model dtype; the host's buffer may change once the
  // call returns).
  virtual Status parameters_from_host(size_t offset, std::span<const std::byte> params) = 0;
  virtual Status zero_gradients() = 0;
  // After an optimizer step's updates: every rank's new 16-bit partitions are complete before
  // any rank's next gather reads them. Collective.
  virtual Status end_step() = 0;
};

class ComputeBackend {
 public:
  virtual ~ComputeBackend() = default;
  // "cpu", or "cuda:<device>": for notes and reports.
  virtual std::string name() const = 0;

  // Whether this backend makes the MLP's micro-batches itself from their sample indices, with
  // SyntheticDataset's bits (a GPU backend: no per-sample host work). Asked once per run, before
  // the first micro-batch; yes means every MicroBatchInput then carries sample_indices only.
  virtual Result<bool> make_synthetic_batches(const SyntheticDataset&) { return false; }
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

  // The partitions kept in the backend's memory (ResidentState), or null when it has none.
  virtual ResidentState* resident_state() { return nullptr; }
};

// The CPU backend: the kernels of core/model/mlp.h or core/model/gpt.h, and core/optim/adamw.h
// on `simd_path`.
// Each rank's compute uses up to `threads` threads (the same bits for any count): AdamW split
// into ranges, the transformer's dense products by columns, then rows, of their result, its
// attention by (sequence, head) and its loss by rows.
std::unique_ptr<ComputeBackend> make_cpu_compute_backend(const ModelSpec& model, SimdPath simd_path,
                                                         int threads = 1);

// Makes rank `rank`'s backend for a world of `world_size` ranks whose parameters are
// `model_dtype` (a backend whose products run in a 16-bit type picks it from that). Set in
// TrainingOptions to run a rank's compute elsewhere than on the CPU (the tools layer builds it
// from --device).
using ComputeBackendFactory = std::function<Result<std::unique_ptr<ComputeBackend>>(
    int rank, int world_size, const ModelSpec& model, DType model_dtype)>;

// Where a run computes: a name for reports and caches, and the factory (empty: the CPU).
// Backends promise the same bits, but a verdict says where it was reached, and a cached
// reference is only reused on the device that made it.
struct ComputeDevice {
  std::string name = "cpu";  // "cpu" or "cuda"
  ComputeBackendFactory factory;
};

}  // namespace zerosim
