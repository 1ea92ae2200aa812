// The fast mode's (cuda-fast's) attention row kernels. In that mode the attention's products run
// as batched cuBLAS products (one batch entry per sequence and head, through
// CudaBackendBase::batched_product) and the two row-wise steps between them run here, one warp
// per row with the warp's tree sums: the softmax over the allowed keys, and the score gradient.
// Not the CPU's bits (the deterministic mode keeps those): the same function to rounding, and the
// same bits run to run, since every sum's tree is fixed by the row's length alone.
//
// A row's keys follow gpt.cpp's rules: key j is allowed for query i when mask[i][j] != 0; a query
// with no allowed key (uniform_rows[i] != 0) attends to every key of the sequence with weight
// 1 / length, and passes no gradient to the scores (the CPU's d_q and d_k skip it).
// Host code declares the launches; the kernels live in device_fast_attention.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace zerosim {

struct FastAttentionRows {
  int64_t heads_times_sequences = 0;  // batch entries, each `length` rows of `length` scores
  int64_t length = 0;                 // the sequence length (queries and keys)
  int64_t block = 0;                  // the mask's row stride
  const float* mask = nullptr;        // [block, block], device
  const int32_t* uniform_rows = nullptr;  // [length], device
};

// In place: each row of scores (already scaled) becomes its attention probabilities.
cudaError_t launch_fast_attention_softmax(const FastAttentionRows& rows, float* scores, cudaStream_t stream);

// d_scores[i][j] = p[i][j] * (d_p[i][j] - sum over allowed k of d_p[i][k] p[i][k]) * scale for
// allowed j, else 0 (and 0 across a uniform row). `d_scores` may be `d_p`.
cudaError_t launch_fast_attention_score_gradient(const FastAttentionRows& rows, const float* probabilities,
                                                 const float* d_p, float scale, float* d_scores, cudaStream_t stream);

}  // namespace zerosim
