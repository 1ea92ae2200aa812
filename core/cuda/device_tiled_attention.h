// The deterministic mode's (cuda's) attention in tiles of 32 queries or keys: the CPU's bits
// (gpt.cpp's attention_forward_head and attention_backward_head), at the speed of the shared
// memory rather than of one thread's walk through global memory.
//
// What it keeps: every sum is the CPU's left fold in the CPU's order, kept by one thread from its
// start value, with separately rounded multiplies and adds: a score over the head's dimensions,
// the softmax's maximum and exponential sum over the allowed keys in key order, an attended
// value over the keys, d_p over the dimensions, the weighted sum over the keys, d_q over the
// keys, and a key's and a value's gradients over the queries in ascending order. What changes is
// only where the operands wait: a block stages a (sequence, head)'s keys or values, its tile's
// queries, probabilities and allowed keys in shared memory, and its threads take the tile's
// outputs, several a thread, each folded on its own.
//
// A key j is allowed for query i when mask[i][j] != 0; a query with no allowed key
// (uniform_rows[i] != 0) attends to every key with weight 1 / length and passes no gradient to
// the scores. The tiles need tiled_attention_shared_bytes of shared memory a block; where that
// exceeds what the device lends a block, the caller keeps its row kernels (a long sequence).
// Host code declares the launches; the kernels live in device_tiled_attention.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace zerosim {

struct TiledAttentionShape {
  int64_t sequences = 0, length = 0, heads = 0, head_size = 0;
  int64_t embd = 0;   // a row of the attended values; qkv's rows are 3 x embd
  int64_t block = 0;  // the mask's row stride
  float scale = 0.0f;
  const float* mask = nullptr;            // [block, block], device
  const int32_t* uniform_rows = nullptr;  // [length], device
};

// The largest dynamic shared memory, in bytes, that any of the three kernels asks for.
int64_t tiled_attention_shared_bytes(int64_t length, int64_t head_size);

// probabilities [sequences, heads, length, length] (0 at disallowed keys) and attended
// [sequences x length, embd] (the head's columns) from qkv [sequences x length, 3 x embd].
cudaError_t launch_tiled_attention_forward(const TiledAttentionShape& shape, const float* qkv, float* probabilities,
                                           float* attended, cudaStream_t stream);

// d_qkv [sequences x length, 3 x embd] (every element written) from the forward's qkv and
// probabilities and d_attended; d_scores [as probabilities] holds the score gradients, written
// at the allowed keys of rows that are not uniform.
cudaError_t launch_tiled_attention_backward(const TiledAttentionShape& shape, const float* qkv, const float* probabilities,
                                            const float* d_attended, float* d_scores, float* d_qkv, cudaStream_t stream);

}  // namespace zerosim
