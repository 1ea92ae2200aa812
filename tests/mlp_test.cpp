// The MLP: PyTorch-style names and shapes, and a backward that matches finite differences
// of the forward (a check of the math; the determinism checks live in engine_test).
#include <gtest/gtest.h>

#include <cmath>

#include "core/model/mlp.h"

namespace zerosim {
namespace {

TEST(Mlp, NamesAndShapesFollowPyTorch) {
  ModelSpec spec;
  spec.layer_widths = {13, 37, 5};
  const std::vector<ParameterInfo> parameters = mlp_parameters(spec);
  ASSERT_EQ(parameters.size(), 4u);
  EXPECT_EQ(parameters[0].name, "layers.0.weight");
  EXPECT_EQ(parameters[0].shape, (std::vector<int64_t>{37, 13}));
  EXPECT_EQ(parameters[1].name, "layers.0.bias");
  EXPECT_EQ(parameters[1].element_count, 37);
  EXPECT_EQ(parameters[3].name, "layers.1.bias");
  EXPECT_EQ(parameters[3].layer_index, 1);
}

TEST(Mlp, SpecParsingNamesTheBadValue) {
  EXPECT_TRUE(parse_model_spec("4,8,3").ok());
  Result<ModelSpec> bad = parse_model_spec("4,x,3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'x'"), std::string::npos);
  EXPECT_FALSE(parse_model_spec("4").ok());
  EXPECT_FALSE(parse_model_spec("4,0,3").ok());
  EXPECT_FALSE(parse_model_spec("4,1").ok());  // one class
  EXPECT_FALSE(parse_model_spec("13,5,").ok());
  EXPECT_FALSE(parse_model_spec("13,,5").ok());
  EXPECT_FALSE(parse_model_spec("").ok());
}

// Loss of the model for given flat parameters, for finite differences.
float loss_of(const ModelSpec& spec, std::vector<std::vector<float>>& parameters, const std::vector<float>& inputs,
              const std::vector<int32_t>& labels, MlpActivations& activations, std::vector<float>& logits_gradient,
              float gradient_scale) {
  const int64_t layers = mlp_layer_count(spec);
  activations.sample_count = static_cast<int64_t>(labels.size());
  activations.inputs.assign(static_cast<size_t>(layers), {});
  activations.pre_activations.assign(static_cast<size_t>(layers), {});
  activations.inputs[0] = inputs;
  for (int64_t l = 0; l < layers; ++l) {
    mlp_layer_forward(spec, l, parameters[static_cast<size_t>(2 * l)], parameters[static_cast<size_t>(2 * l + 1)],
                      activations);
  }
  return softmax_cross_entropy(activations, labels, gradient_scale, logits_gradient);
}

TEST(Mlp, BackwardMatchesFiniteDifferences) {
  ModelSpec spec;
  spec.layer_widths = {4, 6, 5, 3};
  const std::vector<ParameterInfo> infos = mlp_parameters(spec);
  std::vector<std::vector<float>> parameters;
  for (size_t p = 0; p < infos.size(); ++p) {
    parameters.emplace_back(static_cast<size_t>(infos[p].element_count));
    for (int64_t k = 0; k < infos[p].element_count; ++k) {
      // Non-zero biases too, so that the bias gradients are exercised away from zero.
      parameters[p][static_cast<size_t>(k)] =
          mlp_initial_value(spec, 99, static_cast<int64_t>(p & ~size_t{1}), k + static_cast<int64_t>(p) * 7);
    }
  }
  const std::vector<float> inputs = {0.5f, -0.25f, 0.75f, 0.1f, -0.6f, 0.3f, 0.2f, -0.9f};
  const std::vector<int32_t> labels = {2, 0};
  MlpActivations activations;
  std::vector<float> output_gradient, previous_gradient;
  // gradient_scale 1/samples: the gradient of the mean loss.
  loss_of(spec, parameters, inputs, labels, activations, output_gradient, 0.5f);
  std::vector<std::vector<float>> gradients(infos.size());
  for (int64_t l = mlp_layer_count(spec) - 1; l >= 0; --l) {
    gradients[static_cast<size_t>(2 * l)].resize(parameters[static_cast<size_t>(2 * l)].size());
    gradients[static_cast<size_t>(2 * l + 1)].resize(parameters[static_cast<size_t>(2 * l + 1)].size());
    mlp_layer_backward(spec, l, parameters[static_cast<size_t>(2 * l)], activations, output_gradient,
                       gradients[static_cast<size_t>(2 * l)], gradients[static_cast<size_t>(2 * l + 1)],
                       previous_gradient);
    output_gradient.swap(previous_gradient);
  }
  MlpActivations scratch;
  std::vector<float> unused;
  int checked = 0;
  for (size_t p = 0; p < parameters.size(); ++p) {
    for (size_t k = 0; k < parameters[p].size(); k += 3) {
      const float original = parameters[p][k];
      const float step = 1e-2f;
      parameters[p][k] = original + step;
      const double plus = loss_of(spec, parameters, inputs, labels, scratch, unused, 1.0f);
      parameters[p][k] = original - step;
      const double minus = loss_of(spec, parameters, inputs, labels, scratch, unused, 1.0f);
      parameters[p][k] = original;
      const double numeric = (plus - minus) / (2.0 * step);
      // Central differences in fp32 carry ~1e-3 absolute error at this step size.
      EXPECT_NEAR(gradients[p][k], numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << infos[p].name << "[" << k << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(Mlp, InitialValuesArePureAndInTheLinearRange) {
  ModelSpec spec;
  spec.layer_widths = {16, 4, 2};
  for (int64_t k = 0; k < 64; ++k) {
    const float value = mlp_initial_value(spec, 5, 0, k);
    EXPECT_EQ(value, mlp_initial_value(spec, 5, 0, k));
    EXPECT_LE(std::fabs(value), 0.25f);  // 1/sqrt(16)
  }
  EXPECT_NE(mlp_initial_value(spec, 5, 0, 0), mlp_initial_value(spec, 6, 0, 0));
  EXPECT_EQ(mlp_initial_value(spec, 5, 1, 0), 0.0f);  // biases start at zero
}

}  // namespace
}  // namespace zerosim
