#include "core/engine/compute_backend.h"

#include <vector>

#include "core/model/gpt.h"
#include "core/model/mlp.h"
#include "core/tensor/thread_split.h"

namespace zerosim {

namespace {

// What both CPU backends share: the name and AdamW on the host's SIMD path, on the rank's
// threads. AdamW is elementwise (every SIMD path equals the scalar reference, tails included),
// so the split cannot change a bit.
class CpuBackend : public ComputeBackend {
 public:
  CpuBackend(SimdPath simd_path, int threads) : simd_path_(simd_path), threads_(threads) {}
  std::string name() const override { return "cpu"; }
  Status adam_update(const AdamStepScalars& scalars, float grad_multiplier, float* master, const float* gradient,
                     float* exp_avg, float* exp_avg_sq, size_t count) override {
    // A part of 2^18 elements or more (7 MiB of state traffic, a fraction of a millisecond),
    // its length a multiple of 64 elements so that each part starts on a cache line as the
    // whole does.
    constexpr size_t kMinElementsPerThread = size_t{1} << 18;
    run_in_ranges(count, part_count(count, threads_, kMinElementsPerThread), 64, [&](size_t first, size_t end, size_t) {
      zerosim::adam_update(simd_path_, scalars, grad_multiplier, master + first, gradient + first, exp_avg + first,
                           exp_avg_sq + first, end - first);
    });
    return Status();
  }

 private:
  SimdPath simd_path_;
  int threads_;
};

class CpuMlpBackend final : public CpuBackend {
 public:
  CpuMlpBackend(const ModelSpec& model, SimdPath simd_path, int threads)
      : CpuBackend(simd_path, threads), model_(model) {}

  Status begin_micro_batch(const MicroBatchInput& batch) override {
    const size_t layer_count = static_cast<size_t>(mlp_layer_count(model_));
    ZEROSIM_CHECK(batch.features.size() == static_cast<size_t>(batch.samples * model_.layer_widths.front()) &&
                      batch.labels.size() == static_cast<size_t>(batch.samples),
                  "micro-batch input or labels do not match the sample count");
    activations_.sample_count = batch.samples;
    activations_.inputs.resize(layer_count);
    activations_.pre_activations.resize(layer_count);
    activations_.inputs[0].assign(batch.features.begin(), batch.features.end());
    labels_.assign(batch.labels.begin(), batch.labels.end());
    return Status();
  }

  Status forward(int64_t stage, std::span<const std::vector<float>> parameters) override {
    ZEROSIM_CHECK(parameters.size() == 2, "an MLP layer has a weight and a bias");
    mlp_layer_forward(model_, stage, parameters[0], parameters[1], activations_);
    return Status();
  }

  Result<float> loss(float gradient_scale) override {
    return softmax_cross_entropy(activations_, labels_, gradient_scale, output_gradient_);
  }

  Status backward(int64_t stage, std::span<const std::vector<float>> parameters,
                  std::span<std::vector<float>> gradients) override {
    ZEROSIM_CHECK(parameters.size() == 2 && gradients.size() == 2, "an MLP layer has a weight and a bias");
    const int64_t layer = mlp_layer_count(model_) - 1 - stage;
    mlp_layer_backward(model_, layer, parameters[0], activations_, output_gradient_, gradients[0], gradients[1],
                       previous_gradient_);
    output_gradient_.swap(previous_gradient_);
    return Status();
  }

 private:
  ModelSpec model_;
  MlpActivations activations_;
  std::vector<int32_t> labels_;
  std::vector<float> output_gradient_, previous_gradient_;
};

// The transformer's stages (gpt.h) in model_plan's order.
class CpuGptBackend final : public CpuBackend {
 public:
  CpuGptBackend(const GptSpec& spec, SimdPath simd_path, int threads) : CpuBackend(simd_path, threads), spec_(spec) {
    activations_.threads = threads;
  }

  Status begin_micro_batch(const MicroBatchInput& batch) override {
    return gpt_begin_micro_batch(spec_, batch.tokens, batch.samples, batch.sequence_length, batch.causal_mask,
                                 activations_);
  }

  Status forward(int64_t stage, std::span<const std::vector<float>> parameters) override {
    if (stage == 0) {
      gpt_embeddings_forward(spec_, parameters, activations_);
    } else if (stage <= spec_.layers) {
      gpt_block_forward(spec_, stage - 1, parameters, activations_);
    } else if (stage == spec_.layers + 1) {
      gpt_final_norm_forward(spec_, parameters, activations_);
    } else {
      ZEROSIM_CHECK(stage == spec_.layers + 2, "a forward stage of the plan");
      gpt_head_forward(spec_, parameters, activations_);
    }
    return Status();
  }

  Result<float> loss(float gradient_scale) override { return gpt_loss(spec_, gradient_scale, activations_); }

  Status backward(int64_t stage, std::span<const std::vector<float>> parameters,
                  std::span<std::vector<float>> gradients) override {
    if (stage == 0) {
      gpt_head_backward(spec_, parameters, gradients, activations_);
    } else if (stage == 1) {
      gpt_final_norm_backward(spec_, parameters, gradients, activations_);
    } else if (stage <= spec_.layers + 1) {
      gpt_block_backward(spec_, spec_.layers - (stage - 1), parameters, gradients, activations_);
    } else {
      ZEROSIM_CHECK(stage == spec_.layers + 2, "a backward stage of the plan");
      gpt_embeddings_backward(spec_, gradients, activations_);
    }
    return Status();
  }

 private:
  GptSpec spec_;
  GptActivations<float> activations_;
};

}  // namespace

std::unique_ptr<ComputeBackend> make_cpu_compute_backend(const ModelSpec& model, SimdPath simd_path,
                                                         int threads) {
  if (model.gpt) return std::make_unique<CpuGptBackend>(*model.gpt, simd_path, threads);
  return std::make_unique<CpuMlpBackend>(model, simd_path, threads);
}

}  // namespace zerosim
