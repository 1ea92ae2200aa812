// A real multilayer perceptron: Linear -> ReLU -> ... -> Linear, softmax cross-entropy.
//
// Parameters are named like a PyTorch module (`layers.0.weight` [out, in], `layers.0.bias`
// [out]) and listed in module order, which is the canonical parameter order of every
// partition, sub-group, digest and checkpoint.
//
// Determinism: every reduction here (over the input features in the forward, over the
// samples in the weight gradient) is a left fold in index order with separate multiply and
// add (the build forbids FMA contraction), so the same inputs give the same bits on any
// rank, at any world size.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/model/model_spec.h"
#include "core/status.h"

namespace zerosim {

// Checks the MLP's widths: at least one layer, every width positive, at least two classes.
Status validate_mlp_widths(const std::vector<int64_t>& layer_widths);

std::vector<ParameterInfo> mlp_parameters(const ModelSpec& spec);
int64_t mlp_layer_count(const ModelSpec& spec);

// Deterministic initial value of element `element_index` of parameter `parameter_index`:
// uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights (PyTorch's Linear default range),
// zero for biases. A pure function of the seed, so every rank and every W agree.
float mlp_initial_value(const ModelSpec& spec, uint64_t seed, int64_t parameter_index, int64_t element_index);

// Activations kept from the forward of one micro-batch for its backward.
struct MlpActivations {
  int64_t sample_count = 0;
  // inputs[l] is the input of layer l ([samples, width_l]); pre_activations[l] is layer l's
  // output before ReLU ([samples, width_{l+1}]). The last one holds the logits.
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<float>> pre_activations;
};

// Forward of one layer: output[s][o] = bias[o] + sum_i input[s][i] * weight[o][i], then ReLU
// unless it is the last layer. Records what the backward needs.
void mlp_layer_forward(const ModelSpec& spec, int64_t layer_index, std::span<const float> weight,
                       std::span<const float> bias, MlpActivations& activations);

// Mean softmax cross-entropy over the micro-batch (a left fold over the samples, divided by
// the sample count) and the gradient of `gradient_scale * sum_s loss_s` with respect to the
// logits, where the caller picks gradient_scale = loss_scale / global_batch_size so that
// the folded gradients are those of the mean loss over the global batch, times the scale.
float softmax_cross_entropy(const MlpActivations& activations, std::span<const int32_t> labels,
                            float gradient_scale, std::vector<float>& logits_gradient);

// Backward of one layer: given the gradient of its (pre-ReLU) output, produces the weight
// and bias gradients (left folds over the samples in order) and, unless it is layer 0, the
// gradient of the previous layer's pre-activation (through the previous ReLU).
void mlp_layer_backward(const ModelSpec& spec, int64_t layer_index, std::span<const float> weight,
                        const MlpActivations& activations, const std::vector<float>& output_gradient,
                        std::span<float> weight_gradient, std::span<float> bias_gradient,
                        std::vector<float>& previous_output_gradient);

}  // namespace zerosim
