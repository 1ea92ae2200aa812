#include "core/cuda/device_fast_attention.h"

#include <algorithm>

#include "core/cuda/device_warp_reduce.cuh"

namespace zerosim {

namespace {

constexpr int kWarp = kWarpLanes;
constexpr int kRowsPerBlock = 8;  // a warp a row, 256 threads

__global__ void fast_attention_softmax_kernel(FastAttentionRows rows, float* scores) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  if (row >= rows.heads_times_sequences * rows.length) return;  // the whole warp leaves together
  const int64_t i = row % rows.length;
  float* p = scores + row * rows.length;
  const float* allowed = rows.mask + i * rows.block;
  if (rows.uniform_rows[i] != 0) {
    for (int64_t j = lane; j < rows.length; j += kWarp) p[j] = 1.0f / static_cast<float>(rows.length);
    return;
  }
  float maximum = -INFINITY;
  for (int64_t j = lane; j < rows.length; j += kWarp) {
    if (allowed[j] != 0.0f) maximum = fmaxf(maximum, p[j]);
  }
  maximum = warp_max(maximum);
  float sum = 0.0f;
  for (int64_t j = lane; j < rows.length; j += kWarp) {
    const float e = allowed[j] != 0.0f ? expf(p[j] - maximum) : 0.0f;
    p[j] = e;
    sum += e;
  }
  sum = warp_sum(sum);
  for (int64_t j = lane; j < rows.length; j += kWarp) p[j] = p[j] / sum;
}

__global__ void fast_attention_score_gradient_kernel(FastAttentionRows rows, const float* probabilities,
                                                     const float* d_p, float scale, float* d_scores) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  if (row >= rows.heads_times_sequences * rows.length) return;
  const int64_t i = row % rows.length;
  const float* p = probabilities + row * rows.length;
  const float* dp = d_p + row * rows.length;
  float* ds = d_scores + row * rows.length;
  const float* allowed = rows.mask + i * rows.block;
  if (rows.uniform_rows[i] != 0) {
    for (int64_t j = lane; j < rows.length; j += kWarp) ds[j] = 0.0f;
    return;
  }
  float weighted = 0.0f;
  for (int64_t j = lane; j < rows.length; j += kWarp) {
    if (allowed[j] != 0.0f) weighted += dp[j] * p[j];
  }
  weighted = warp_sum(weighted);
  for (int64_t j = lane; j < rows.length; j += kWarp) ds[j] = allowed[j] != 0.0f ? p[j] * (dp[j] - weighted) * scale : 0.0f;
}

unsigned row_blocks(const FastAttentionRows& rows) {
  return static_cast<unsigned>((rows.heads_times_sequences * rows.length + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

cudaError_t launch_fast_attention_softmax(const FastAttentionRows& rows, float* scores, cudaStream_t stream) {
  fast_attention_softmax_kernel<<<row_blocks(rows), kRowsPerBlock * kWarp, 0, stream>>>(rows, scores);
  return cudaGetLastError();
}

cudaError_t launch_fast_attention_score_gradient(const FastAttentionRows& rows, const float* probabilities,
                                                 const float* d_p, float scale, float* d_scores, cudaStream_t stream) {
  fast_attention_score_gradient_kernel<<<row_blocks(rows), kRowsPerBlock * kWarp, 0, stream>>>(rows, probabilities, d_p,
                                                                                              scale, d_scores);
  return cudaGetLastError();
}

}  // namespace zerosim
