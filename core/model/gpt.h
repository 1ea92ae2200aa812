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
// Determinism: every reduction is a left fold in index order with separate multiply and add
// (the build forbids FMA contraction), exp and log are portable_math's, tanh is built from
// portable exp, so the same inputs give the same bits on any machine. The forward and backward
// are templated on the arithmetic type: float is the engine's, double is the finite-difference
// oracle's (tests/gpt_test.cpp).
//
// This is the model alone (issue [transformer], first step): the engine still trains the MLP.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/model/mlp.h"
#include "core/status.h"

namespace zerosim {

struct GptSpec {
  int64_t layers = 2;
  int64_t embd = 16;
  int64_t heads = 2;
  int64_t vocab = 64;
  int64_t block = 16;  // the longest sequence (positions of wpe)
  bool operator==(const GptSpec&) const = default;
};

// Every field positive, embd divisible by heads, bounded so that no tensor passes 2^31 elements.
Status validate_gpt_spec(const GptSpec& spec);
// "gpt:layers=2,embd=16,heads=2,vocab=64,block=16" (the --model syntax; every key once, in any
// order; an unknown, missing, repeated or non-numeric key is refused naming it).
Result<GptSpec> parse_gpt_spec(const std::string& text);
std::string gpt_spec_to_string(const GptSpec& spec);

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

// One micro-batch: `sequence_count` sequences of `sequence_length` + 1 tokens each (row-major;
// position t predicts token t + 1), sequence_length <= block. Returns the mean cross-entropy
// over the sequence_count * sequence_length predictions, and adds to `gradients` (one full
// tensor per parameter, in gpt_parameters order, which the caller zeroes) the gradient of
// gradient_scale * (the sum of those losses). `parameters` are the full tensors, same order.
template <typename Real>
Result<Real> gpt_forward_backward(const GptSpec& spec, const std::vector<std::vector<Real>>& parameters,
                                  std::span<const int32_t> tokens, int64_t sequence_count, int64_t sequence_length,
                                  Real gradient_scale, std::vector<std::vector<Real>>& gradients);

}  // namespace zerosim
