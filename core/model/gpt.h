// A decoder-only transformer, GPT-2's architecture: token and learned position embeddings,
// pre-LayerNorm blocks of causal multi-head self-attention and a GELU (tanh) MLP, a final
// LayerNorm, and an LM head tied to the token embedding.
//
// Parameters are named and shaped as Hugging Face's GPT2LMHeadModel names them (its Conv1D
// weights are [in, out]), in module order: transformer.wte.weight [V, E], transformer.wpe.weight
// [B, E], then per block h.<i>: ln_1, attn.c_attn [E, 3E], attn.c_proj [E, E], ln_2, mlp.c_fc
// [E, 4E], mlp.c_proj [4E, E] (each weight then bias), then transformer.ln_f. The LM head is
// wte itself: one parameter, used twice, whose gradient folds the head's use first and the
// embedding's second, in that fixed order.
//
// Determinism: every reduction is a left fold in index order. The dense products (the Conv1D
// layers and the head) step it with fused multiply-adds; everything else (attention, the
// norms, the sums) with separate multiply and add (the build forbids the compiler's FMA
// contraction, so every fused step is an explicit one). exp and log are portable_math's, tanh
// is built from portable exp, so the same inputs give the same bits on any machine. The
// forward and backward are templated on the arithmetic type: float is the engine's, double is
// the finite-difference oracle's (tests/gpt_test.cpp).
//
// The forward and backward are split into stages, one per group of parameters that ZeRO-3
// gathers together (model_plan in model_spec.h): the embeddings, each block, the final
// LayerNorm and the tied head, so that only one stage's weights need be whole at a time. A
// stage works on the whole micro-batch (sequence-major rows), and every weight gradient is a
// left fold over those rows in order (the same bits as one sequence after another) except the
// tied wte's, which folds the head's part over every row, then the embeddings' part over every
// row: the order of the plan's two uses, fixed, so the same at every W.
//
// The causal mask is the model's derived buffer (model_buffers): [block, block], 1 where query
// position i may attend to key position j. A masked score is the lowest float, as Hugging Face
// fills it, so a row with no allowed position attends uniformly to all of them (and its
// scores then get no gradient); a row with one allowed position at least gives a masked one
// exactly zero weight.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/model/model_spec.h"
#include "core/status.h"

namespace zerosim {

// Every field positive, embd divisible by heads, bounded so that no tensor passes 2^31 elements.
Status validate_gpt_spec(const GptSpec& spec);
// "gpt:layers=2,embd=16,heads=2,vocab=64,block=16" (the --model syntax; every key once, in any
// order; an unknown, missing, repeated or non-numeric key is refused naming it).
Result<GptSpec> parse_gpt_spec(const std::string& text);
std::string gpt_spec_to_string(const GptSpec& spec);

// The layout of gpt_parameters: wte, wpe, then 12 per block, then ln_f's weight and bias.
inline constexpr int64_t kGptBlockParameters = 12;
inline int64_t gpt_block_first_parameter(int64_t block) { return 2 + block * kGptBlockParameters; }
inline int64_t gpt_final_norm_parameter(const GptSpec& spec) { return gpt_block_first_parameter(spec.layers); }

// Module order, Hugging Face names; the element count of each parameter.
std::vector<ParameterInfo> gpt_parameters(const GptSpec& spec);

// Deterministic initial value of element `element` of parameter `parameter`, as GPT-2 initializes:
// weights normal-like with standard deviation 0.02 (c_proj weights 0.02 / sqrt(2 layers)), drawn
// uniform with that deviation from the seed; LayerNorm weights 1, biases 0.
float gpt_initial_value(const GptSpec& spec, uint64_t seed, int64_t parameter, int64_t element);

// Every parameter's initial values (gpt_initial_value), full tensors in gpt_parameters order.
std::vector<std::vector<float>> gpt_initial_parameters(const GptSpec& spec, uint64_t seed);
// The batch `zerosim gpt-check-export` writes: sequence_count * (sequence_length + 1) tokens drawn
// uniformly from the vocabulary, a pure function of the seed.
std::vector<int32_t> gpt_check_tokens(const GptSpec& spec, uint64_t seed, int64_t sequence_count, int64_t sequence_length);

// What the stages of one micro-batch keep from the forward for the backward; the stage
// functions' working state (fields are theirs alone).
template <typename Real>
struct GptLayerNormCache {
  std::vector<Real> normalized;   // x-hat, rows x width
  std::vector<Real> inverse_std;  // per row
};
template <typename Real>
struct GptBlockCache {
  std::vector<Real> ln_1, qkv, probabilities, attended, middle, ln_2, fc, fc_gelu, fc_derivative;
  GptLayerNormCache<Real> ln_1_cache, ln_2_cache;
};
template <typename Real>
struct GptActivations {
  int64_t sequence_count = 0;
  int64_t sequence_length = 0;
  std::vector<int32_t> tokens;      // sequence_count x (sequence_length + 1)
  std::span<const float> causal_mask;  // [block, block], the caller's, alive for the micro-batch
  std::vector<int64_t> parameter_element_counts;  // gpt_parameters' counts, for the stages' checks
  std::vector<Real> x;              // the residual stream, rows x embd
  std::vector<GptBlockCache<Real>> blocks;
  std::vector<Real> final_normalized;
  GptLayerNormCache<Real> final_cache;
  std::vector<Real> logits;         // rows x vocab; the loss turns them into their gradient
  std::vector<Real> d_x;            // the residual stream's gradient in the backward
  std::vector<Real> d_scratch, d_wide, d_qkv, d_attended, d_p;
  // Threads a micro-batch's stages may use (the caller's among them): the dense products split
  // their result's columns, then its rows (vector_ops' add_product_threads), attention the
  // (sequence, head) pairs, the loss its rows; each
  // thread computes outputs of its own and the loss's sum folds its rows in order afterwards,
  // so the bits do not depend on the count.
  int threads = 1;
};

// The causal mask as the model derives it: mask[i][j] = 1 for j <= i.
std::vector<float> gpt_causal_mask(const GptSpec& spec);

// Starts a micro-batch: `sequence_count` sequences of `sequence_length` + 1 tokens each
// (row-major; position t predicts token t + 1), sequence_length <= block, every token in the
// vocabulary. `causal_mask` is [block, block].
template <typename Real>
Status gpt_begin_micro_batch(const GptSpec& spec, std::span<const int32_t> tokens, int64_t sequence_count,
                             int64_t sequence_length, std::span<const float> causal_mask, GptActivations<Real>& a);
// The stages, in the order of model_plan. `parameters` are the full tensors the stage gathers,
// in module order: embeddings (wte, wpe), a block (its 12), ln_f (its 2), the head (wte).
template <typename Real>
void gpt_embeddings_forward(const GptSpec& spec, std::span<const std::vector<Real>> parameters, GptActivations<Real>& a);
template <typename Real>
void gpt_block_forward(const GptSpec& spec, int64_t block, std::span<const std::vector<Real>> parameters,
                       GptActivations<Real>& a);
template <typename Real>
void gpt_final_norm_forward(const GptSpec& spec, std::span<const std::vector<Real>> parameters, GptActivations<Real>& a);
template <typename Real>
void gpt_head_forward(const GptSpec& spec, std::span<const std::vector<Real>> parameters, GptActivations<Real>& a);
// The mean cross-entropy over the micro-batch's predictions (a left fold over the rows, then one
// division), and the logits' gradient of gradient_scale * (the sum of those losses).
template <typename Real>
Real gpt_loss(const GptSpec& spec, Real gradient_scale, GptActivations<Real>& a);
// The backward stages add to `gradients` (the stage's gradient tensors, full, in module order).
template <typename Real>
void gpt_head_backward(const GptSpec& spec, std::span<const std::vector<Real>> parameters,
                       std::span<std::vector<Real>> gradients, GptActivations<Real>& a);
template <typename Real>
void gpt_final_norm_backward(const GptSpec& spec, std::span<const std::vector<Real>> parameters,
                             std::span<std::vector<Real>> gradients, GptActivations<Real>& a);
template <typename Real>
void gpt_block_backward(const GptSpec& spec, int64_t block, std::span<const std::vector<Real>> parameters,
                        std::span<std::vector<Real>> gradients, GptActivations<Real>& a);
// Needs no weight: adds to wte's gradient (its second use) and wpe's.
template <typename Real>
void gpt_embeddings_backward(const GptSpec& spec, std::span<std::vector<Real>> gradients, GptActivations<Real>& a);

// One micro-batch through every stage, with the derived causal mask (what the finite-difference
// and Hugging Face checks call): tokens as for gpt_begin_micro_batch. Returns the mean cross-entropy
// over the sequence_count * sequence_length predictions, and adds to `gradients` (one full
// tensor per parameter, in gpt_parameters order, which the caller zeroes) the gradient of
// gradient_scale * (the sum of those losses). `parameters` are the full tensors, same order.
// `threads` as GptActivations::threads (the same bits for any count).
template <typename Real>
Result<Real> gpt_forward_backward(const GptSpec& spec, const std::vector<std::vector<Real>>& parameters,
                                  std::span<const int32_t> tokens, int64_t sequence_count, int64_t sequence_length,
                                  Real gradient_scale, std::vector<std::vector<Real>>& gradients, int threads = 1);

}  // namespace zerosim
