#include "core/model/mlp.h"

#include <cmath>

#include "core/env/rng.h"
#include "core/tensor/portable_math.h"

namespace zerosim {

Status validate_mlp_widths(const std::vector<int64_t>& layer_widths) {
  if (layer_widths.size() < 2) {
    return invalid_argument("model: layer widths need at least an input width and a class count, got " +
                            std::to_string(layer_widths.size()) + " value(s)");
  }
  for (size_t i = 0; i < layer_widths.size(); ++i) {
    if (layer_widths[i] <= 0 || layer_widths[i] > (1 << 20)) {
      return invalid_argument("model: width " + std::to_string(i + 1) + " of " + std::to_string(layer_widths.size()) +
                              " must be in 1..1048576, got " + std::to_string(layer_widths[i]));
    }
  }
  if (layer_widths.back() < 2) {
    return invalid_argument("model: the last width is the class count and must be at least 2, got " +
                            std::to_string(layer_widths.back()));
  }
  return Status();
}

int64_t mlp_layer_count(const ModelSpec& spec) { return static_cast<int64_t>(spec.layer_widths.size()) - 1; }

std::vector<ParameterInfo> mlp_parameters(const ModelSpec& spec) {
  std::vector<ParameterInfo> parameters;
  for (int64_t layer = 0; layer < mlp_layer_count(spec); ++layer) {
    const int64_t in = spec.layer_widths[layer];
    const int64_t out = spec.layer_widths[layer + 1];
    const std::string prefix = "layers." + std::to_string(layer);
    parameters.push_back({prefix + ".weight", {out, in}, out * in, layer});
    parameters.push_back({prefix + ".bias", {out}, out, layer});
  }
  return parameters;
}

float mlp_initial_value(const ModelSpec& spec, uint64_t seed, int64_t parameter_index, int64_t element_index) {
  if (parameter_index % 2 == 1) return 0.0f;  // biases
  const int64_t fan_in = spec.layer_widths[parameter_index / 2];
  const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  constexpr uint64_t kInitStream = 0x1000;
  return bound * random_symmetric_unit_float(
                     mix_random_bits(seed, kInitStream + static_cast<uint64_t>(parameter_index),
                                     static_cast<uint64_t>(element_index)));
}

void mlp_layer_forward(const ModelSpec& spec, int64_t layer_index, std::span<const float> weight,
                       std::span<const float> bias, MlpActivations& activations) {
  const int64_t in = spec.layer_widths[layer_index];
  const int64_t out = spec.layer_widths[layer_index + 1];
  const int64_t samples = activations.sample_count;
  const bool last_layer = layer_index + 1 == mlp_layer_count(spec);
  const std::vector<float>& input = activations.inputs[layer_index];
  std::vector<float>& output = activations.pre_activations[layer_index];
  output.assign(static_cast<size_t>(samples * out), 0.0f);
  for (int64_t s = 0; s < samples; ++s) {
    const float* x = &input[static_cast<size_t>(s * in)];
    for (int64_t o = 0; o < out; ++o) {
      const float* w = &weight[static_cast<size_t>(o * in)];
      float sum = bias[static_cast<size_t>(o)];
      for (int64_t i = 0; i < in; ++i) sum = sum + x[i] * w[i];
      output[static_cast<size_t>(s * out + o)] = sum;
    }
  }
  if (!last_layer) {
    std::vector<float>& next_input = activations.inputs[layer_index + 1];
    next_input.resize(output.size());
    for (size_t k = 0; k < output.size(); ++k) next_input[k] = output[k] > 0.0f ? output[k] : 0.0f;
  }
}

float softmax_cross_entropy(const MlpActivations& activations, std::span<const int32_t> labels,
                            float gradient_scale, std::vector<float>& logits_gradient) {
  const std::vector<float>& logits = activations.pre_activations.back();
  const int64_t samples = activations.sample_count;
  const int64_t classes = static_cast<int64_t>(logits.size()) / samples;
  logits_gradient.assign(logits.size(), 0.0f);
  float loss_sum = 0.0f;
  std::vector<float> exponentials(static_cast<size_t>(classes));
  for (int64_t s = 0; s < samples; ++s) {
    const float* z = &logits[static_cast<size_t>(s * classes)];
    float maximum = z[0];
    for (int64_t c = 1; c < classes; ++c) maximum = z[c] > maximum ? z[c] : maximum;
    float exp_sum = 0.0f;
    for (int64_t c = 0; c < classes; ++c) {
      exponentials[static_cast<size_t>(c)] = portable_expf(z[c] - maximum);
      exp_sum = exp_sum + exponentials[static_cast<size_t>(c)];
    }
    const int32_t label = labels[static_cast<size_t>(s)];
    loss_sum = loss_sum + (portable_logf(exp_sum) - (z[label] - maximum));
    float* dz = &logits_gradient[static_cast<size_t>(s * classes)];
    for (int64_t c = 0; c < classes; ++c) {
      const float probability = exponentials[static_cast<size_t>(c)] / exp_sum;
      dz[c] = (probability - (c == label ? 1.0f : 0.0f)) * gradient_scale;
    }
  }
  return loss_sum / static_cast<float>(samples);
}

void mlp_layer_backward(const ModelSpec& spec, int64_t layer_index, std::span<const float> weight,
                        const MlpActivations& activations, const std::vector<float>& output_gradient,
                        std::span<float> weight_gradient, std::span<float> bias_gradient,
                        std::vector<float>& previous_output_gradient) {
  const int64_t in = spec.layer_widths[layer_index];
  const int64_t out = spec.layer_widths[layer_index + 1];
  const int64_t samples = activations.sample_count;
  const std::vector<float>& input = activations.inputs[layer_index];
  std::fill(weight_gradient.begin(), weight_gradient.end(), 0.0f);
  std::fill(bias_gradient.begin(), bias_gradient.end(), 0.0f);
  // Sample-outer loops keep each element's sum a left fold over the samples in order.
  for (int64_t s = 0; s < samples; ++s) {
    const float* dz = &output_gradient[static_cast<size_t>(s * out)];
    const float* x = &input[static_cast<size_t>(s * in)];
    for (int64_t o = 0; o < out; ++o) {
      const float g = dz[o];
      bias_gradient[static_cast<size_t>(o)] = bias_gradient[static_cast<size_t>(o)] + g;
      float* dw = &weight_gradient[static_cast<size_t>(o * in)];
      for (int64_t i = 0; i < in; ++i) dw[i] = dw[i] + g * x[i];
    }
  }
  if (layer_index == 0) return;
  // d input[s][i] = sum_o dz[s][o] * w[o][i], then through the ReLU of the previous layer.
  previous_output_gradient.assign(static_cast<size_t>(samples * in), 0.0f);
  const std::vector<float>& previous_pre_activation = activations.pre_activations[layer_index - 1];
  for (int64_t s = 0; s < samples; ++s) {
    const float* dz = &output_gradient[static_cast<size_t>(s * out)];
    float* dx = &previous_output_gradient[static_cast<size_t>(s * in)];
    for (int64_t o = 0; o < out; ++o) {
      const float g = dz[o];
      const float* w = &weight[static_cast<size_t>(o * in)];
      for (int64_t i = 0; i < in; ++i) dx[i] = dx[i] + g * w[i];
    }
    const float* z = &previous_pre_activation[static_cast<size_t>(s * in)];
    for (int64_t i = 0; i < in; ++i) dx[i] = z[i] > 0.0f ? dx[i] : 0.0f;
  }
}

}  // namespace zerosim
