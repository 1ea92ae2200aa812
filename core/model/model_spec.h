// Which model a run trains, its parameters, and the order in which the engine gathers them.
//
// Two models: the multilayer perceptron (core/model/mlp.h) and the GPT-2-style transformer
// (core/model/gpt.h). A ModelSpec names one; everything above the model layer (the engine,
// checkpoints, scenarios, the CLI) handles both through the functions here, so a model is
// chosen by one string: "13,37,29,5" (MLP widths) or "gpt:layers=L,embd=E,heads=H,vocab=V,block=B".
//
// Parameters are listed in module order, which is the canonical order of every partition,
// sub-group, digest and checkpoint. A parameter's layer_index groups parameters into the
// engine's layers: the unit of the gradient exchange. Layers are contiguous runs of parameters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace zerosim {

struct ParameterInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t element_count = 0;
  int64_t layer_index = 0;
  // false: frozen (PyTorch's requires_grad=False). A frozen parameter gets no gradient and no
  // optimizer update, and a checkpoint holds its value alone (no optimizer state exists for it).
  bool requires_grad = true;
};

// The transformer's shape (core/model/gpt.h).
struct GptSpec {
  int64_t layers = 2;
  int64_t embd = 16;
  int64_t heads = 2;
  int64_t vocab = 64;
  int64_t block = 16;  // the longest sequence (positions of wpe)
  bool operator==(const GptSpec&) const = default;
};

struct ModelSpec {
  ModelSpec() = default;
  // The MLP of these widths (ModelSpec{{13, 37, 5}}).
  ModelSpec(std::vector<int64_t> widths) : layer_widths(std::move(widths)) {}  // NOLINT: implicit on purpose
  // The MLP: [input features, hidden widths..., classes]; at least two entries. Empty for a
  // transformer.
  std::vector<int64_t> layer_widths = {13, 37, 29, 5};
  // Set: the transformer (and layer_widths is empty).
  std::optional<GptSpec> gpt;
  bool is_transformer() const { return gpt.has_value(); }
  bool operator==(const ModelSpec&) const = default;
};

// A transformer spec, as ModelSpec.
ModelSpec transformer_model(const GptSpec& spec);

// Checks the spec (the MLP's widths, or the transformer's shape).
Status validate_model_spec(const ModelSpec& spec);
// "13,37,29,5" or "gpt:layers=2,embd=16,heads=2,vocab=64,block=16".
std::string model_spec_to_string(const ModelSpec& spec);
// Either form; an error names what is wrong.
Result<ModelSpec> parse_model_spec(const std::string& text);

// The parameters in module order.
std::vector<ParameterInfo> model_parameters(const ModelSpec& spec);
// Deterministic initial value of element `element` of parameter `parameter`: a pure function of
// the seed, so every rank and every W agree.
float model_initial_value(const ModelSpec& spec, uint64_t seed, int64_t parameter, int64_t element);

// A model buffer: state that is not a parameter (PyTorch's register_buffer). ZeRO-3 does not
// partition buffers: every rank holds the whole of each, and they are the same on every rank.
//   * derived (persistent = false): a pure function of the model's shape, built when the model
//     is built (from scratch or for a load) and never saved; a load must build it again, as a
//     model materialized for a load (meta device, to_empty) has no values for it.
//   * persistent: trained state outside the parameters, updated by the training loop from the
//     global batch (so the same at every W); a checkpoint holds it, and a resume restores it.
// The transformer has one of each: "transformer.causal_mask" [block, block] (1 where a query
// position may attend to a key position; Hugging Face's attn.bias), and
// "lm_head.target_frequency" [vocab], the running frequency of the target tokens (momentum 0.1,
// as BatchNorm keeps its running statistics), updated after every step's micro-batches. The MLP
// has none.
struct BufferInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t element_count = 0;
  bool persistent = false;
};
std::vector<BufferInfo> model_buffers(const ModelSpec& spec);
// The transformer's buffers' positions in model_buffers.
inline constexpr size_t kCausalMaskBuffer = 0;
inline constexpr size_t kTargetFrequencyBuffer = 1;
// The values a freshly built model gives buffer `buffer` (model_buffers' order).
std::vector<float> model_buffer_initial_values(const ModelSpec& spec, size_t buffer);
// The momentum of a running-frequency buffer's update: new = old * (1 - m) + frequency * m.
inline constexpr float kBufferMomentum = 0.1f;

// The contiguous parameters [first, end) in module order; empty when first == end.
struct ParameterRange {
  int64_t first = 0;
  int64_t end = 0;
  int64_t size() const { return end - first; }
  bool empty() const { return first == end; }
};

// The engine's walk over a micro-batch, the same for every backend: which parameters each
// forward and backward stage needs gathered (ZeRO-3 gathers them right before the stage and
// releases them after it), which gradients a backward stage adds to, and after which backward
// stage a layer's gradients are final (then reduce-scattered and released).
//
// The MLP: stage l is layer l (forward 0..L-1, backward L-1..0). The transformer: forward
// embeddings (wte, wpe), blocks 0..L-1, ln_f, the tied head (wte gathered again: its second
// use); backward the head (wte's gradient starts), ln_f, blocks L-1..0, the embeddings (no
// weight gathered; wte's gradient receives its second use, and layer 0 is final). A tied
// parameter therefore has one partition, is gathered once per use, and its gradient is
// reduce-scattered once, after its last use, with the head's part folded first.
struct ForwardStage {
  ParameterRange gathered;
  bool tied_reuse = false;  // gathers a tied parameter for its second use (the head's wte)
};
struct BackwardStage {
  ParameterRange gathered;
  ParameterRange gradients;    // the backend adds to these (zeroed at their first use in a micro-batch)
  int64_t completes_layer = -1;  // >= 0: that layer's gradients are final after this stage
  bool tied_reuse = false;
};
struct ModelPlan {
  std::vector<ForwardStage> forward;
  std::vector<BackwardStage> backward;
};
ModelPlan model_plan(const ModelSpec& spec);

}  // namespace zerosim
