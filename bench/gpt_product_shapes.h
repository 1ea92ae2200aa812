// The dense products of one GPT-2 training step (each Conv1D layer's forward, weight gradient
// and input gradient, and the tied head's three), as product_bench (CPU) and
// ordered_product_bench (GPU) time them: C [rows, n] += A [rows, inner] x B [inner, n], an
// operand marked transposed read in place from the row-major array of its transpose.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zerosim {

struct GptProductShape {
  std::string name;  // what the product is in the step
  size_t rows, inner, n;
  bool a_transposed, b_transposed;
  int64_t per_step;  // how many times a step computes it
};

// `tokens` rows of activations, width `embd`, a vocabulary of `vocab`, `layers` blocks.
inline std::vector<GptProductShape> gpt_step_product_shapes(size_t tokens, size_t embd, size_t vocab, int64_t layers) {
  const size_t t = tokens, e = embd, v = vocab;
  return {
      {"qkv forward", t, e, 3 * e, false, false, layers},
      {"attention projection forward", t, e, e, false, false, layers},
      {"MLP up forward", t, e, 4 * e, false, false, layers},
      {"MLP down forward", t, 4 * e, e, false, false, layers},
      {"head forward (wte^T in place)", t, e, v, false, true, 1},
      {"qkv weight gradient (in^T in place)", e, t, 3 * e, true, false, layers},
      {"attention projection weight gradient", e, t, e, true, false, layers},
      {"MLP up weight gradient", e, t, 4 * e, true, false, layers},
      {"MLP down weight gradient", 4 * e, t, e, true, false, layers},
      {"head wte gradient (logits^T in place)", v, t, e, true, false, 1},
      {"qkv input gradient (weight^T in place)", t, 3 * e, e, false, true, layers},
      {"attention projection input gradient", t, e, e, false, true, layers},
      {"MLP up input gradient", t, 4 * e, e, false, true, layers},
      {"MLP down input gradient", t, e, 4 * e, false, true, layers},
      {"head input gradient", t, v, e, false, false, 1},
  };
}

}  // namespace zerosim
