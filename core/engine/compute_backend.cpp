#include "core/engine/compute_backend.h"

#include <vector>

namespace zerosim {

namespace {

class CpuComputeBackend final : public ComputeBackend {
 public:
  CpuComputeBackend(const ModelSpec& model, SimdPath simd_path) : model_(model), simd_path_(simd_path) {}

  std::string name() const override { return "cpu"; }

  Status begin_micro_batch(int64_t samples, std::span<const float> input, std::span<const int32_t> labels) override {
    const size_t layer_count = static_cast<size_t>(mlp_layer_count(model_));
    ZEROSIM_CHECK(input.size() == static_cast<size_t>(samples * model_.layer_widths.front()) &&
                      labels.size() == static_cast<size_t>(samples),
                  "micro-batch input or labels do not match the sample count");
    activations_.sample_count = samples;
    activations_.inputs.resize(layer_count);
    activations_.pre_activations.resize(layer_count);
    activations_.inputs[0].assign(input.begin(), input.end());
    labels_.assign(labels.begin(), labels.end());
    return Status();
  }

  Status layer_forward(int64_t layer_index, std::span<const float> weight, std::span<const float> bias) override {
    mlp_layer_forward(model_, layer_index, weight, bias, activations_);
    return Status();
  }

  Result<float> loss(float gradient_scale) override {
    return softmax_cross_entropy(activations_, labels_, gradient_scale, output_gradient_);
  }

  Status layer_backward(int64_t layer_index, std::span<const float> weight, std::span<float> weight_gradient,
                        std::span<float> bias_gradient) override {
    mlp_layer_backward(model_, layer_index, weight, activations_, output_gradient_, weight_gradient, bias_gradient,
                       previous_gradient_);
    output_gradient_.swap(previous_gradient_);
    return Status();
  }

  Status adam_update(const AdamStepScalars& scalars, float grad_multiplier, float* master, const float* gradient,
                     float* exp_avg, float* exp_avg_sq, size_t count) override {
    zerosim::adam_update(simd_path_, scalars, grad_multiplier, master, gradient, exp_avg, exp_avg_sq, count);
    return Status();
  }

 private:
  ModelSpec model_;
  SimdPath simd_path_;
  MlpActivations activations_;
  std::vector<int32_t> labels_;
  std::vector<float> output_gradient_, previous_gradient_;
};

}  // namespace

std::unique_ptr<ComputeBackend> make_cpu_compute_backend(const ModelSpec& model, SimdPath simd_path) {
  return std::make_unique<CpuComputeBackend>(model, simd_path);
}

}  // namespace zerosim
