#include "core/model/model_spec.h"

#include <sstream>

#include "core/model/gpt.h"
#include "core/model/mlp.h"

namespace zerosim {

ModelSpec transformer_model(const GptSpec& spec) {
  ModelSpec model;
  model.layer_widths.clear();
  model.gpt = spec;
  return model;
}

Status validate_model_spec(const ModelSpec& spec) {
  if (spec.gpt) {
    if (!spec.layer_widths.empty()) return invalid_argument("model: a transformer has no MLP widths");
    return validate_gpt_spec(*spec.gpt);
  }
  return validate_mlp_widths(spec.layer_widths);
}

std::string model_spec_to_string(const ModelSpec& spec) {
  if (spec.gpt) return gpt_spec_to_string(*spec.gpt);
  std::string text;
  for (size_t i = 0; i < spec.layer_widths.size(); ++i) {
    if (i) text += ",";
    text += std::to_string(spec.layer_widths[i]);
  }
  return text;
}

Result<ModelSpec> parse_model_spec(const std::string& text) {
  if (text.rfind("gpt:", 0) == 0) {
    ZEROSIM_ASSIGN_OR_RETURN(const GptSpec gpt, parse_gpt_spec(text));
    return transformer_model(gpt);
  }
  ModelSpec spec;
  spec.layer_widths.clear();
  if (text.empty() || text.back() == ',') {
    return invalid_argument("model: '" + text +
                            "' has an empty width; give MLP widths like 13,37,5 or a transformer like "
                            "gpt:layers=2,embd=16,heads=2,vocab=64,block=16");
  }
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    try {
      size_t consumed = 0;
      long long width = std::stoll(item, &consumed);
      if (consumed != item.size()) throw std::invalid_argument(item);
      spec.layer_widths.push_back(width);
    } catch (const std::exception&) {
      return invalid_argument("model: '" + item + "' in '" + text +
                              "' is not an integer width (an MLP is widths like 13,37,5; a transformer "
                              "gpt:layers=L,embd=E,heads=H,vocab=V,block=B)");
    }
  }
  ZEROSIM_RETURN_IF_ERROR(validate_model_spec(spec));
  return spec;
}

std::vector<ParameterInfo> model_parameters(const ModelSpec& spec) {
  return spec.gpt ? gpt_parameters(*spec.gpt) : mlp_parameters(spec);
}

float model_initial_value(const ModelSpec& spec, uint64_t seed, int64_t parameter, int64_t element) {
  return spec.gpt ? gpt_initial_value(*spec.gpt, seed, parameter, element)
                  : mlp_initial_value(spec, seed, parameter, element);
}

std::vector<BufferInfo> model_buffers(const ModelSpec& spec) {
  if (!spec.gpt) return {};
  const GptSpec& gpt = *spec.gpt;
  return {{"transformer.causal_mask", {gpt.block, gpt.block}, gpt.block * gpt.block, false},
          {"lm_head.target_frequency", {gpt.vocab}, gpt.vocab, true}};
}

std::vector<float> model_buffer_initial_values(const ModelSpec& spec, size_t buffer) {
  ZEROSIM_CHECK(spec.gpt && (buffer == kCausalMaskBuffer || buffer == kTargetFrequencyBuffer), "a buffer of the model");
  if (buffer == kCausalMaskBuffer) return gpt_causal_mask(*spec.gpt);
  // Uniform: every token equally frequent before any batch is seen.
  return std::vector<float>(static_cast<size_t>(spec.gpt->vocab), 1.0f / static_cast<float>(spec.gpt->vocab));
}

ModelPlan model_plan(const ModelSpec& spec) {
  ModelPlan plan;
  if (!spec.gpt) {
    const int64_t layers = mlp_layer_count(spec);
    for (int64_t l = 0; l < layers; ++l) plan.forward.push_back({{2 * l, 2 * l + 2}});
    for (int64_t l = layers - 1; l >= 0; --l) plan.backward.push_back({{2 * l, 2 * l + 2}, {2 * l, 2 * l + 2}, l});
    return plan;
  }
  const int64_t blocks = spec.gpt->layers;
  const int64_t ln_f = gpt_final_norm_parameter(*spec.gpt);
  plan.forward.push_back({{0, 2}});  // wte, wpe
  for (int64_t l = 0; l < blocks; ++l) {
    plan.forward.push_back({{gpt_block_first_parameter(l), gpt_block_first_parameter(l + 1)}});
  }
  plan.forward.push_back({{ln_f, ln_f + 2}});
  plan.forward.push_back({{0, 1}, true});  // the tied head: wte's second use
  plan.backward.push_back({{0, 1}, {0, 1}, -1, true});  // wte's gradient starts; not final yet
  plan.backward.push_back({{ln_f, ln_f + 2}, {ln_f, ln_f + 2}, blocks + 1});
  for (int64_t l = blocks - 1; l >= 0; --l) {
    const ParameterRange block{gpt_block_first_parameter(l), gpt_block_first_parameter(l + 1)};
    plan.backward.push_back({block, block, l + 1});
  }
  plan.backward.push_back({{0, 0}, {0, 2}, 0});  // the embeddings: no weight needed
  return plan;
}

}  // namespace zerosim
