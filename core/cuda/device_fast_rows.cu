#include "core/cuda/device_fast_rows.h"

#include <cmath>

#include "core/cuda/device_warp_reduce.cuh"

namespace zerosim {

namespace {

constexpr int kRowsPerBlock = 8;  // a warp a row, 256 threads

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

__global__ void layer_norm_statistics_kernel(int64_t rows, int64_t width, const float* in, float epsilon, float* mean,
                                             float* inverse_std) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpLanes;
  const int lane = static_cast<int>(threadIdx.x) % kWarpLanes;
  if (row >= rows) return;  // the whole warp leaves together
  const float* x = in + row * width;
  float sum = 0.0f;
  for (int64_t i = lane; i < width; i += kWarpLanes) sum += x[i];
  const float m = warp_sum(sum) / static_cast<float>(width);
  float squares = 0.0f;
  for (int64_t i = lane; i < width; i += kWarpLanes) squares += (x[i] - m) * (x[i] - m);
  const float variance = warp_sum(squares) / static_cast<float>(width);
  if (lane == 0) {
    mean[row] = m;
    inverse_std[row] = 1.0f / sqrtf(variance + epsilon);
  }
}

__global__ void layer_norm_gradient_statistics_kernel(int64_t rows, int64_t width, const float* d_out,
                                                      const float* normalized, const float* gamma, float* mean_d,
                                                      float* mean_dx) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarpLanes;
  const int lane = static_cast<int>(threadIdx.x) % kWarpLanes;
  if (row >= rows) return;
  float sum_d = 0.0f, sum_dx = 0.0f;
  for (int64_t i = lane; i < width; i += kWarpLanes) {
    const float d_hat = d_out[row * width + i] * gamma[i];
    sum_d += d_hat;
    sum_dx += d_hat * normalized[row * width + i];
  }
  sum_d = warp_sum(sum_d);
  sum_dx = warp_sum(sum_dx);
  if (lane == 0) {
    mean_d[row] = sum_d / static_cast<float>(width);
    mean_dx[row] = sum_dx / static_cast<float>(width);
  }
}

constexpr int kLossThreads = 256;
constexpr int kLossWarps = kLossThreads / kWarpLanes;

// The block's maximum or sum of one value a thread, over a block of kWarps warps: each warp's
// tree, then one warp's over the warps' results, the lanes past kWarps holding the identity.
// Every thread gets the result; the block is synchronized on return.
template <bool kMaximum, int kWarps = kLossWarps>
__device__ float block_reduce(float value, float* warp_results) {
  static_assert(kWarps <= kWarpLanes, "one warp reduces the warps' results");
  const int lane = static_cast<int>(threadIdx.x) % kWarpLanes, warp = static_cast<int>(threadIdx.x) / kWarpLanes;
  value = kMaximum ? warp_max(value) : warp_sum(value);
  if (lane == 0) warp_results[warp] = value;
  __syncthreads();
  float result = lane < kWarps ? warp_results[lane] : (kMaximum ? -INFINITY : 0.0f);
  result = kMaximum ? warp_max(result) : warp_sum(result);
  __syncthreads();  // warp_results is free again
  return result;
}

// One block per row, each pass over the row in device memory: the exponentials are written
// to the gradients' row and read back from it.
__global__ void __launch_bounds__(kLossThreads)
    softmax_cross_entropy_kernel(int64_t length, int64_t vocab, const int32_t* tokens, float gradient_scale,
                                 const float* logits, int64_t logits_stride, float* gradients, float* row_losses) {
  __shared__ float warp_results[kLossWarps];
  const int64_t row = blockIdx.x, s = row / length, t = row % length;
  const int32_t target = tokens[s * (length + 1) + t + 1];
  const float* z = logits + row * logits_stride;
  float* g = gradients + row * vocab;
  const float target_logit = z[target];  // read by every thread before an exponential may replace it
  float maximum = -INFINITY;
  for (int64_t c = threadIdx.x; c < vocab; c += kLossThreads) maximum = fmaxf(maximum, z[c]);
  maximum = block_reduce<true>(maximum, warp_results);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < vocab; c += kLossThreads) {
    const float e = expf(z[c] - maximum);
    g[c] = e;
    sum += e;
  }
  sum = block_reduce<false>(sum, warp_results);
  if (threadIdx.x == 0) row_losses[row] = logf(sum) - (target_logit - maximum);
  for (int64_t c = threadIdx.x; c < vocab; c += kLossThreads) {
    g[c] = (g[c] / sum - (c == target ? 1.0f : 0.0f)) * gradient_scale;
  }
}

// The same row through the block's shared memory, where it fits: the row is read from device
// memory once and its exponentials stay on chip. Four times the threads move the row in and
// out; the sum keeps the kernel above's: kLossThreads threads, each over the same columns in
// the same order, then the same trees (the other warps add +0.0 where the kernel above's tree
// reads +0.0 past its warps), so both kernels give the same bits.
constexpr int kStagedLossThreads = 4 * kLossThreads;
constexpr int kStagedLossWarps = kStagedLossThreads / kWarpLanes;

__global__ void __launch_bounds__(kStagedLossThreads)
    staged_softmax_cross_entropy_kernel(int64_t length, int64_t vocab, const int32_t* tokens, float gradient_scale,
                                        const float* logits, int64_t logits_stride, float* gradients,
                                        float* row_losses) {
  extern __shared__ float z[];
  __shared__ float warp_results[kStagedLossWarps];
  const int64_t row = blockIdx.x, s = row / length, t = row % length;
  const int32_t target = tokens[s * (length + 1) + t + 1];
  const float* in = logits + row * logits_stride;
  const float target_logit = in[target];  // device memory is written only after the last reduction
  float maximum = -INFINITY;  // a maximum is the same whatever the order
  for (int64_t c = threadIdx.x; c < vocab; c += kStagedLossThreads) {
    z[c] = in[c];
    maximum = fmaxf(maximum, z[c]);
  }
  maximum = block_reduce<true, kStagedLossWarps>(maximum, warp_results);
  float sum = 0.0f;
  if (threadIdx.x < kLossThreads) {
    for (int64_t c = threadIdx.x; c < vocab; c += kLossThreads) {
      const float e = expf(z[c] - maximum);
      z[c] = e;
      sum += e;
    }
  }
  sum = block_reduce<false, kStagedLossWarps>(sum, warp_results);
  if (threadIdx.x == 0) row_losses[row] = logf(sum) - (target_logit - maximum);
  float* g = gradients + row * vocab;
  for (int64_t c = threadIdx.x; c < vocab; c += kStagedLossThreads) {
    g[c] = (z[c] / sum - (c == target ? 1.0f : 0.0f)) * gradient_scale;
  }
}

constexpr int kColumnGroup = kWarpLanes;  // a block's columns, a lane each
constexpr int kColumnWarps = 8;
constexpr int64_t kFastColumnSliceRows = 64;

int64_t slices_of(int64_t rows) { return (rows + kFastColumnSliceRows - 1) / kFastColumnSliceRows; }

// Block (column group, slice): warp w sums the slice's rows w, w + 8, ...; then one warp sums
// the 8 warps' results in order into the slice's row of `partials` (and of `product_partials`).
template <bool kWithFactor>
__global__ void column_slice_sums_kernel(int64_t rows, int64_t width, const float* in, const float* factor,
                                         float* partials, float* product_partials) {
  __shared__ float sums[kColumnWarps][kColumnGroup];
  __shared__ float products[kWithFactor ? kColumnWarps : 1][kColumnGroup];
  const int lane = static_cast<int>(threadIdx.x) % kWarpLanes, warp = static_cast<int>(threadIdx.x) / kWarpLanes;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColumnGroup + lane;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * kFastColumnSliceRows;
  const int64_t end = first + kFastColumnSliceRows < rows ? first + kFastColumnSliceRows : rows;
  float sum = 0.0f, product = 0.0f;
  if (j < width) {
    for (int64_t r = first + warp; r < end; r += kColumnWarps) {
      const float value = in[r * width + j];
      sum += value;
      if (kWithFactor) product += value * factor[r * width + j];
    }
  }
  sums[warp][lane] = sum;
  if (kWithFactor) products[warp][lane] = product;
  __syncthreads();
  if (warp == 0 && j < width) {
    float total = sums[0][lane], product_total = kWithFactor ? products[0][lane] : 0.0f;
    for (int w = 1; w < kColumnWarps; ++w) {
      total += sums[w][lane];
      if (kWithFactor) product_total += products[w][lane];
    }
    partials[blockIdx.y * width + j] = total;
    if (kWithFactor) product_partials[blockIdx.y * width + j] = product_total;
  }
}

// One thread per column: the slices' totals in order, added to the sums.
template <bool kWithFactor>
__global__ void column_slices_fold_kernel(int64_t slices, int64_t width, const float* partials,
                                          const float* product_partials, float* sums, float* product_sums) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= width) return;
  float total = partials[j], product_total = kWithFactor ? product_partials[j] : 0.0f;
  for (int64_t slice = 1; slice < slices; ++slice) {
    total += partials[slice * width + j];
    if (kWithFactor) product_total += product_partials[slice * width + j];
  }
  sums[j] += total;
  if (kWithFactor) product_sums[j] += product_total;
}

}  // namespace

cudaError_t launch_fast_layer_norm_statistics(int64_t rows, int64_t width, const float* in, float epsilon, float* mean,
                                              float* inverse_std, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  layer_norm_statistics_kernel<<<row_blocks(rows), kRowsPerBlock * kWarpLanes, 0, stream>>>(rows, width, in, epsilon,
                                                                                            mean, inverse_std);
  return cudaGetLastError();
}

cudaError_t launch_fast_layer_norm_gradient_statistics(int64_t rows, int64_t width, const float* d_out,
                                                       const float* normalized, const float* gamma, float* mean_d,
                                                       float* mean_dx, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  layer_norm_gradient_statistics_kernel<<<row_blocks(rows), kRowsPerBlock * kWarpLanes, 0, stream>>>(
      rows, width, d_out, normalized, gamma, mean_d, mean_dx);
  return cudaGetLastError();
}

cudaError_t launch_fast_softmax_cross_entropy(int64_t sequences, int64_t length, int64_t vocab, const int32_t* tokens,
                                              float gradient_scale, const float* logits, int64_t logits_stride,
                                              float* gradients, float* row_losses, cudaStream_t stream) {
  if (sequences * length == 0) return cudaSuccess;
  if (logits_stride < vocab) return cudaErrorInvalidValue;
  const unsigned rows = static_cast<unsigned>(sequences * length);
  // A row staged in shared memory where it fits what a block may opt in to (GPT-2's 50,257
  // logits, 196 KiB, on an H100's 227 KiB): one read of the logits from device memory instead of
  // three, and one block a row per multiprocessor at a time, whose exponentials stay on chip.
  int device = 0, shared_bytes_limit = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error == cudaSuccess) {
    error = cudaDeviceGetAttribute(&shared_bytes_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  }
  if (error != cudaSuccess) return error;
  const int64_t static_bytes = kStagedLossWarps * static_cast<int64_t>(sizeof(float));
  const int64_t row_bytes = vocab * static_cast<int64_t>(sizeof(float));
  if (row_bytes + static_bytes <= shared_bytes_limit) {
    error = cudaFuncSetAttribute(staged_softmax_cross_entropy_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(row_bytes));
    if (error != cudaSuccess) return error;
    staged_softmax_cross_entropy_kernel<<<rows, kStagedLossThreads, static_cast<size_t>(row_bytes), stream>>>(
        length, vocab, tokens, gradient_scale, logits, logits_stride, gradients, row_losses);
  } else {
    softmax_cross_entropy_kernel<<<rows, kLossThreads, 0, stream>>>(length, vocab, tokens, gradient_scale, logits,
                                                                    logits_stride, gradients, row_losses);
  }
  return cudaGetLastError();
}

int64_t fast_column_sums_scratch_floats(int64_t rows, int64_t width) { return 2 * slices_of(rows) * width; }

cudaError_t launch_fast_column_sums(int64_t rows, int64_t width, const float* in, const float* factor, float* sums,
                                    float* product_sums, float* scratch, cudaStream_t stream) {
  if (rows == 0 || width == 0) return cudaSuccess;
  const int64_t slices = slices_of(rows);
  if (slices > 65535) return cudaErrorInvalidConfiguration;  // a grid's second dimension
  float* partials = scratch;
  float* product_partials = scratch + slices * width;
  const dim3 grid(static_cast<unsigned>((width + kColumnGroup - 1) / kColumnGroup), static_cast<unsigned>(slices));
  const unsigned fold_blocks = static_cast<unsigned>((width + 255) / 256);
  if (factor != nullptr) {
    column_slice_sums_kernel<true><<<grid, kColumnWarps * kWarpLanes, 0, stream>>>(rows, width, in, factor, partials,
                                                                                 product_partials);
    column_slices_fold_kernel<true><<<fold_blocks, 256, 0, stream>>>(slices, width, partials, product_partials, sums,
                                                                      product_sums);
  } else {
    column_slice_sums_kernel<false><<<grid, kColumnWarps * kWarpLanes, 0, stream>>>(rows, width, in, nullptr, partials,
                                                                                  nullptr);
    column_slices_fold_kernel<false><<<fold_blocks, 256, 0, stream>>>(slices, width, partials, nullptr, sums, nullptr);
  }
  return cudaGetLastError();
}

}  // namespace zerosim
