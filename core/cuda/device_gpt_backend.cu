// The transformer's stages (core/model/gpt.h) on a CUDA device, the CPU's bits.
//
// Every kernel below spells one of gpt.cpp's loops with the same operations in the same order:
// separately rounded multiplies and adds (__fmul_rn, __fadd_rn: the build also forbids nvcc's
// contraction) where gpt.cpp has them, fused ones in the dense products; exp and log through
// device_portable_math.cuh; each sum a left fold in the CPU's index order, kept by one thread
// from its start value. Parallelism is only across
// outputs that the CPU computes independently: the dense products through the ordered product
// (cuda_backend_base.h), per-row statistics one block per row (the row staged in shared
// memory, one thread folding it), per-column sums one thread per column, attention one block
// per (sequence, head, query) with the sequential parts (maximum, exponential sum, weighted sum)
// on one thread. The two places where the CPU accumulates across
// queries (a key's and a value's gradients fold over the queries that see them, in ascending
// order) run as a second kernel per key that walks the queries in that order.
//
// The fast mode (cuda-fast) runs the dense products on cuBLAS, the attention as batched cuBLAS
// products around two row kernels (device_fast_attention.h), LayerNorm's statistics, the loss
// and the column sums of the bias and LayerNorm gradients as trees (device_fast_rows.h), and
// every other kernel as here.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/cuda_backend_base.h"
#include "core/cuda/device_fast_attention.h"
#include "core/cuda/device_fast_rows.h"
#include "core/cuda/device_portable_math.cuh"
#include "core/cuda/device_softmax_row.cuh"
#include "core/cuda/device_tiled_attention.h"
#include "core/model/gpt.h"

namespace zerosim {

namespace {

constexpr int kThreads = 256;
constexpr int kRowThreads = 128;  // threads of a block that works on one row (attention, loss)

int blocks_for(int64_t work) { return static_cast<int>(std::min<int64_t>((work + kThreads - 1) / kThreads, 65535)); }

#define ZEROSIM_GRID_LOOP(k, count)                                                          \
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < (count); \
       k += static_cast<int64_t>(gridDim.x) * blockDim.x)

__device__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ float div(float a, float b) { return __fdiv_rn(a, b); }

// x[r][i] = wte[token][i] + wpe[t][i].
__global__ void embeddings_forward_kernel(int64_t sequences, int64_t length, int64_t e, const int32_t* tokens,
                                          const float* wte, const float* wpe, float* x) {
  ZEROSIM_GRID_LOOP(k, sequences * length * e) {
    const int64_t row = k / e, i = k % e, s = row / length, t = row % length;
    x[k] = add(wte[static_cast<int64_t>(tokens[s * (length + 1) + t]) * e + i], wpe[t * e + i]);
  }
}

// The CPU adds each row's gradient (rows in order) to wte's row of its token and to wpe's row of
// its position. For one element of wte that is a fold over the rows holding that token, in
// order; for one of wpe, over the sequences. So one thread per (distinct token, column) folds
// the token's rows (listed in ascending order by the host: token_rows from token_starts[g] to
// token_starts[g + 1]), and one per (position, column) the sequences: the CPU's bits, with the
// whole batch's columns in parallel instead of one thread per column walking every row.
__global__ void token_embedding_gradient_kernel(int64_t distinct_tokens, int64_t e, const int32_t* group_tokens,
                                                const int64_t* token_starts, const int64_t* token_rows,
                                                const float* d_x, float* d_wte) {
  ZEROSIM_GRID_LOOP(k, distinct_tokens * e) {
    const int64_t group = k / e, i = k % e;
    float* out = d_wte + static_cast<int64_t>(group_tokens[group]) * e + i;
    float sum = *out;
    for (int64_t q = token_starts[group]; q < token_starts[group + 1]; ++q) sum = add(sum, d_x[token_rows[q] * e + i]);
    *out = sum;
  }
}

__global__ void position_embedding_gradient_kernel(int64_t sequences, int64_t length, int64_t e, const float* d_x,
                                                   float* d_wpe) {
  ZEROSIM_GRID_LOOP(k, length * e) {
    const int64_t t = k / e, i = k % e;
    float sum = d_wpe[k];
    for (int64_t s = 0; s < sequences; ++s) sum = add(sum, d_x[(s * length + t) * e + i]);
    d_wpe[k] = sum;
  }
}

// Each row's mean and inverse standard deviation (the CPU's folds over the width).
__device__ void layer_norm_row_statistics(const float* x, int64_t width, float epsilon, float* mean, float* inverse_std) {
  float sum = 0.0f;
  for (int64_t i = 0; i < width; ++i) sum = add(sum, x[i]);
  const float m = div(sum, static_cast<float>(width));
  float variance = 0.0f;
  for (int64_t i = 0; i < width; ++i) variance = add(variance, mul(sub(x[i], m), sub(x[i], m)));
  variance = div(variance, static_cast<float>(width));
  *mean = m;
  *inverse_std = div(1.0f, __fsqrt_rn(add(variance, epsilon)));
}

// One thread per row, reading the row from global memory (rows wider than shared memory).
__global__ void layer_norm_statistics_kernel(int64_t rows, int64_t width, const float* in, float epsilon, float* mean,
                                             float* inverse_std) {
  ZEROSIM_GRID_LOOP(r, rows) { layer_norm_row_statistics(in + r * width, width, epsilon, mean + r, inverse_std + r); }
}

// One block per row: the block stages the row in shared memory (coalesced loads), one thread folds it.
__global__ void layer_norm_statistics_staged_kernel(int64_t width, const float* in, float epsilon, float* mean,
                                                    float* inverse_std) {
  extern __shared__ float staged[];
  const int64_t r = blockIdx.x;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) staged[i] = in[r * width + i];
  __syncthreads();
  if (threadIdx.x == 0) layer_norm_row_statistics(staged, width, epsilon, mean + r, inverse_std + r);
}

__global__ void layer_norm_apply_kernel(int64_t rows, int64_t width, const float* in, const float* mean,
                                        const float* inverse_std, const float* gamma, const float* beta,
                                        float* normalized, float* out) {
  ZEROSIM_GRID_LOOP(k, rows * width) {
    const int64_t r = k / width, i = k % width;
    const float n = mul(sub(in[k], mean[r]), inverse_std[r]);
    normalized[k] = n;
    out[k] = add(mul(n, gamma[i]), beta[i]);
  }
}

// Per column j, from the sums' values, over the rows in order: sums[j] += in[r][j] and, with a
// second operand, product_sums[j] += in[r][j] * factor[r][j] (a bias's gradient; a LayerNorm's
// beta and gamma gradients). One block per 32 columns: its threads stage 128-row tiles in
// shared memory (coalesced loads, all in flight at once), then one warp folds them, a column a
// thread, in row order. A thread that walked its column in global memory waited for each load.
constexpr int kFoldColumns = 32;
constexpr int kFoldRows = 128;
constexpr int kFoldThreads = 256;

template <bool kWithFactor>
__global__ void column_fold_kernel(int64_t rows, int64_t width, const float* in, const float* factor, float* sums,
                                   float* product_sums) {
  __shared__ float in_tile[kFoldRows][kFoldColumns + 1];
  __shared__ float factor_tile[kWithFactor ? kFoldRows : 1][kFoldColumns + 1];
  const int lane = static_cast<int>(threadIdx.x) % kFoldColumns, warp = static_cast<int>(threadIdx.x) / kFoldColumns;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kFoldColumns + lane;
  const bool folds = threadIdx.x < kFoldColumns && j < width;
  float sum = folds ? sums[j] : 0.0f, product_sum = folds && kWithFactor ? product_sums[j] : 0.0f;
  for (int64_t r0 = 0; r0 < rows; r0 += kFoldRows) {
    const int count = rows - r0 < kFoldRows ? static_cast<int>(rows - r0) : kFoldRows;
    if (j < width) {
      for (int r = warp; r < count; r += kFoldThreads / kFoldColumns) {
        in_tile[r][lane] = in[(r0 + r) * width + j];
        if (kWithFactor) factor_tile[r][lane] = factor[(r0 + r) * width + j];
      }
    }
    __syncthreads();
    if (folds) {
      for (int r = 0; r < count; ++r) {
        if (kWithFactor) product_sum = add(product_sum, mul(in_tile[r][lane], factor_tile[r][lane]));
        sum = add(sum, in_tile[r][lane]);
      }
    }
    __syncthreads();
  }
  if (folds) {
    sums[j] = sum;
    if (kWithFactor) product_sums[j] = product_sum;
  }
}

unsigned column_fold_blocks(int64_t width) { return static_cast<unsigned>((width + kFoldColumns - 1) / kFoldColumns); }

// Per row: mean(d_hat) and mean(d_hat x_hat), d_hat = d_out gamma.
__device__ void layer_norm_row_gradient_statistics(const float* d_out, const float* normalized, const float* gamma,
                                                   int64_t width, float* mean_d, float* mean_dx) {
  float sum_d = 0.0f, sum_dx = 0.0f;
  for (int64_t i = 0; i < width; ++i) {
    const float d_hat = mul(d_out[i], gamma[i]);
    sum_d = add(sum_d, d_hat);
    sum_dx = add(sum_dx, mul(d_hat, normalized[i]));
  }
  *mean_d = div(sum_d, static_cast<float>(width));
  *mean_dx = div(sum_dx, static_cast<float>(width));
}

__global__ void layer_norm_backward_statistics_kernel(int64_t rows, int64_t width, const float* d_out,
                                                      const float* normalized, const float* gamma, float* mean_d,
                                                      float* mean_dx) {
  ZEROSIM_GRID_LOOP(r, rows) {
    layer_norm_row_gradient_statistics(d_out + r * width, normalized + r * width, gamma, width, mean_d + r, mean_dx + r);
  }
}

// One block per row, d_hat's two factors of the row staged in shared memory.
__global__ void layer_norm_backward_statistics_staged_kernel(int64_t width, const float* d_out,
                                                             const float* normalized, const float* gamma,
                                                             float* mean_d, float* mean_dx) {
  extern __shared__ float staged[];
  const int64_t r = blockIdx.x;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    staged[i] = d_out[r * width + i];
    staged[width + i] = normalized[r * width + i];
  }
  __syncthreads();
  if (threadIdx.x == 0) layer_norm_row_gradient_statistics(staged, staged + width, gamma, width, mean_d + r, mean_dx + r);
}

__global__ void layer_norm_input_gradient_kernel(int64_t rows, int64_t width, const float* d_out,
                                                 const float* normalized, const float* gamma, const float* inverse_std,
                                                 const float* mean_d, const float* mean_dx, float* d_in) {
  ZEROSIM_GRID_LOOP(k, rows * width) {
    const int64_t r = k / width, i = k % width;
    const float d_hat = mul(d_out[k], gamma[i]);
    d_in[k] = add(d_in[k], mul(inverse_std[r], sub(sub(d_hat, mean_d[r]), mul(normalized[k], mean_dx[r]))));
  }
}

__global__ void add_kernel(int64_t count, const float* in, float* accumulate) {
  ZEROSIM_GRID_LOOP(k, count) { accumulate[k] = add(accumulate[k], in[k]); }
}

__global__ void multiply_kernel(int64_t count, const float* factor, float* values) {
  ZEROSIM_GRID_LOOP(k, count) { values[k] = mul(values[k], factor[k]); }
}

// GPT-2's gelu_new and its derivative, gpt.cpp's expression order.
__global__ void gelu_kernel(int64_t count, const float* in, float* value, float* derivative) {
  const float c = static_cast<float>(0.7978845608028654);
  const float a = static_cast<float>(0.044715);
  ZEROSIM_GRID_LOOP(k, count) {
    const float x = in[k];
    const float u = mul(c, add(x, mul(mul(mul(a, x), x), x)));
    const float t = sub(1.0f, div(2.0f, add(device_portable_expf(mul(2.0f, u)), 1.0f)));
    value[k] = mul(mul(0.5f, x), add(1.0f, t));
    derivative[k] = add(mul(0.5f, add(1.0f, t)),
                        mul(mul(mul(mul(0.5f, x), sub(1.0f, mul(t, t))), c), add(1.0f, mul(mul(mul(3.0f, a), x), x))));
  }
}

struct AttentionShape {
  int64_t sequences, length, heads, head_size, e, block;
  float scale;
};

__device__ bool attends(const float* mask, int64_t block, int64_t i, int64_t j) { return mask[i * block + j] != 0.0f; }

// One block per (sequence, head, query i): the scores, the softmax over the allowed keys (all
// of them, uniformly, when none is allowed) and the attended values. With `staged` the row of
// scores lives in shared memory (dynamic, `length` floats) while thread 0 folds its maximum and
// sum, and is written to `probabilities` once; without, the folds read global memory.
__global__ void attention_forward_kernel(AttentionShape shape, const float* qkv, const float* mask, float* probabilities,
                                         float* attended, bool staged) {
  extern __shared__ float staged_row[];
  const int64_t row = blockIdx.x, length = shape.length, e = shape.e, d = shape.head_size;
  const int64_t i = row % length, h = (row / length) % shape.heads, s = row / (length * shape.heads);
  const float* base = qkv + s * length * 3 * e;
  const float* q = base + i * 3 * e + h * d;
  float* stored = probabilities + row * length;
  float* p = staged ? staged_row : stored;
  __shared__ float maximum, sum;
  __shared__ bool uniform;
  for (int64_t j = threadIdx.x; j < length; j += blockDim.x) {
    if (attends(mask, shape.block, i, j)) {
      const float* key = base + j * 3 * e + e + h * d;
      float score = 0.0f;
      for (int64_t k = 0; k < d; ++k) score = add(score, mul(q[k], key[k]));
      p[j] = mul(score, shape.scale);
    } else {
      p[j] = 0.0f;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    bool found = false;
    float m = 0.0f;
    for (int64_t j = 0; j < length; ++j) {
      if (!attends(mask, shape.block, i, j)) continue;
      if (!found || p[j] > m) m = p[j];
      found = true;
    }
    maximum = m;
    uniform = !found;
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < length; j += blockDim.x) {
    if (uniform) {
      p[j] = div(1.0f, static_cast<float>(length));
    } else if (attends(mask, shape.block, i, j)) {
      p[j] = device_portable_expf(sub(p[j], maximum));
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && !uniform) {
    float total = 0.0f;
    for (int64_t j = 0; j < length; ++j) {
      if (attends(mask, shape.block, i, j)) total = add(total, p[j]);
    }
    sum = total;
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < length; j += blockDim.x) {
    if (!uniform && attends(mask, shape.block, i, j)) p[j] = div(p[j], sum);
    if (staged) stored[j] = p[j];
  }
  __syncthreads();
  for (int64_t k = threadIdx.x; k < d; k += blockDim.x) {
    float value = 0.0f;
    for (int64_t j = 0; j < length; ++j) {
      if (uniform || attends(mask, shape.block, i, j)) value = add(value, mul(p[j], base[j * 3 * e + 2 * e + h * d + k]));
    }
    attended[(s * length + i) * e + h * d + k] = value;
  }
}

// One block per (sequence, head, query i): d_p[j] = d_attended[i] . v[j], the weighted sum, each
// allowed key's score gradient (kept for the keys' kernel), and d_q[i]. `uniform` is per query.
// With `staged` the row's probabilities, d_p and score gradients live in shared memory (dynamic,
// 3 x `length` floats) while thread 0 folds over them; the score gradients also go to `d_scores`.
__global__ void attention_backward_query_kernel(AttentionShape shape, const float* qkv, const float* mask,
                                                const int32_t* uniform_rows, const float* probabilities,
                                                const float* d_attended, float* d_p, float* d_scores, float* d_qkv,
                                                bool staged) {
  extern __shared__ float staged_rows[];
  const int64_t row = blockIdx.x, length = shape.length, e = shape.e, d = shape.head_size;
  const int64_t i = row % length, h = (row / length) % shape.heads, s = row / (length * shape.heads);
  const float* base = qkv + s * length * 3 * e;
  const float* d_att = d_attended + (s * length + i) * e + h * d;
  const float* stored_p = probabilities + row * length;
  float* stored_d_score = d_scores + row * length;
  const float* p = staged ? staged_rows : stored_p;
  float* dp = staged ? staged_rows + length : d_p + row * length;
  float* d_score = staged ? staged_rows + 2 * length : stored_d_score;
  const bool uniform = uniform_rows[i] != 0;
  __shared__ float weighted;
  for (int64_t j = threadIdx.x; j < length; j += blockDim.x) {
    if (staged) staged_rows[j] = stored_p[j];
    if (uniform || attends(mask, shape.block, i, j)) {
      const float* value = base + j * 3 * e + 2 * e + h * d;
      float dot = 0.0f;
      for (int64_t k = 0; k < d; ++k) dot = add(dot, mul(d_att[k], value[k]));
      dp[j] = dot;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int64_t j = 0; j < length; ++j) {
      if (uniform || attends(mask, shape.block, i, j)) total = add(total, mul(dp[j], p[j]));
    }
    weighted = total;
  }
  __syncthreads();
  if (!uniform) {
    for (int64_t j = threadIdx.x; j < length; j += blockDim.x) {
      if (attends(mask, shape.block, i, j)) {
        d_score[j] = mul(mul(p[j], sub(dp[j], weighted)), shape.scale);
        if (staged) stored_d_score[j] = d_score[j];
      }
    }
  }
  __syncthreads();
  for (int64_t k = threadIdx.x; k < d; k += blockDim.x) {
    float d_q = 0.0f;
    if (!uniform) {
      for (int64_t j = 0; j < length; ++j) {
        if (attends(mask, shape.block, i, j)) d_q = add(d_q, mul(d_score[j], base[j * 3 * e + e + h * d + k]));
      }
    }
    d_qkv[(s * length + i) * 3 * e + h * d + k] = d_q;
  }
}

// One block per (sequence, head, key j): d_v[j] and d_k[j] fold over the queries i that see key
// j, in ascending order (the CPU's outer loop).
__global__ void attention_backward_key_kernel(AttentionShape shape, const float* qkv, const float* mask,
                                              const int32_t* uniform_rows, const float* probabilities,
                                              const float* d_attended, const float* d_scores, float* d_qkv) {
  const int64_t row = blockIdx.x, length = shape.length, e = shape.e, d = shape.head_size;
  const int64_t j = row % length, h = (row / length) % shape.heads, s = row / (length * shape.heads);
  const int64_t head_rows = (s * shape.heads + h) * length;
  const float* base = qkv + s * length * 3 * e;
  for (int64_t k = threadIdx.x; k < d; k += blockDim.x) {
    float d_v = 0.0f, d_k = 0.0f;
    for (int64_t i = 0; i < length; ++i) {
      const bool uniform = uniform_rows[i] != 0;
      const bool allowed = attends(mask, shape.block, i, j);
      if (!uniform && !allowed) continue;
      const int64_t score = (head_rows + i) * length + j;
      d_v = add(d_v, mul(probabilities[score], d_attended[(s * length + i) * e + h * d + k]));
      if (!uniform) d_k = add(d_k, mul(d_scores[score], base[i * 3 * e + h * d + k]));
    }
    d_qkv[(s * length + j) * 3 * e + e + h * d + k] = d_k;
    d_qkv[(s * length + j) * 3 * e + 2 * e + h * d + k] = d_v;
  }
}

// One block per row (prediction): gpt_loss's row, the exponentials in place of the logits, then
// the logits' gradient.
__global__ void loss_kernel(int64_t sequences, int64_t length, int64_t vocab, const int32_t* tokens,
                            float gradient_scale, float* logits, float* row_losses) {
  const int64_t row = blockIdx.x, s = row / length, t = row % length;
  float* z = logits + row * vocab;
  device_softmax_cross_entropy_row(z, z, vocab, tokens[s * (length + 1) + t + 1], gradient_scale, row_losses + row);
}

__global__ void loss_fold_kernel(int64_t rows, const float* row_losses, float* loss) {
  float sum = 0.0f;
  for (int64_t r = 0; r < rows; ++r) sum = add(sum, row_losses[r]);
  *loss = div(sum, static_cast<float>(rows));
}

#undef ZEROSIM_GRID_LOOP

// A LayerNorm's forward output and what its backward needs.
struct DeviceLayerNorm {
  DeviceArray out, normalized, mean, inverse_std;
};
// A dense layer's input and weight as a 16-bit fast run's products read them, rounded by its
// forward product and read again by its backward ones (RoundedMatrix).
struct RoundedConv1d {
  RoundedMatrix input, weight;
  void forget() {
    input.forget();
    weight.forget();
  }
};
struct DeviceBlock {
  DeviceLayerNorm ln_1, ln_2;
  DeviceArray qkv, probabilities, attended, middle, fc, fc_gelu, fc_derivative;
  RoundedConv1d c_attn, attn_proj, c_fc, mlp_proj;
};

class CudaGptBackend final : public CudaBackendBase {
 public:
  CudaGptBackend(const GptSpec& spec, int device, CudaGemm gemm, DType model_dtype)
      : CudaBackendBase(device, gemm, model_dtype),
        spec_(spec),
        plan_(model_plan(transformer_model(spec))),
        blocks_(static_cast<size_t>(spec.layers)) {
    for (const ParameterInfo& parameter : gpt_parameters(spec)) element_counts_.push_back(parameter.element_count);
  }

  Status begin_micro_batch(const MicroBatchInput& batch) override {
    // The CPU's checks, with its messages: the shape, every token in the vocabulary.
    ZEROSIM_RETURN_IF_ERROR(gpt_begin_micro_batch(spec_, batch.tokens, batch.samples, batch.sequence_length,
                                                  batch.causal_mask, host_check_));
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaSetDevice", cudaSetDevice(device_)));
    sequences_ = batch.samples;
    length_ = batch.sequence_length;
    const int64_t rows = sequences_ * length_, e = spec_.embd, scores = sequences_ * spec_.heads * length_ * length_;
    // A query that may attend to no key of the sequence attends to all of them uniformly.
    std::vector<int32_t> uniform_rows(static_cast<size_t>(length_), 1);
    for (int64_t i = 0; i < length_; ++i) {
      for (int64_t j = 0; j < length_; ++j) {
        if (batch.causal_mask[static_cast<size_t>(i * spec_.block + j)] != 0.0f) uniform_rows[static_cast<size_t>(i)] = 0;
      }
    }
    ZEROSIM_RETURN_IF_ERROR(copy_in(tokens_, batch.tokens.data(), batch.tokens.size_bytes(), "tokens"));
    ZEROSIM_RETURN_IF_ERROR(group_rows_by_token(batch.tokens));
    ZEROSIM_RETURN_IF_ERROR(copy_in(mask_, batch.causal_mask.data(), batch.causal_mask.size_bytes(), "causal mask"));
    ZEROSIM_RETURN_IF_ERROR(copy_in(uniform_rows_, uniform_rows.data(), uniform_rows.size() * sizeof(int32_t),
                                    "uniform attention rows"));
    // The tiled attention where its tiles fit the shared memory a block may have; a longer
    // sequence keeps the row kernels.
    int shared_bytes_limit = 0;
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaDeviceGetAttribute (shared memory per block)",
                                 cudaDeviceGetAttribute(&shared_bytes_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_)));
    tiled_attention_ = tiled_attention_shared_bytes(length_, spec_.embd / spec_.heads) <= shared_bytes_limit;
    for (DeviceBlock& block : blocks_) {
      for (DeviceLayerNorm* norm : {&block.ln_1, &block.ln_2}) ZEROSIM_RETURN_IF_ERROR(reserve_norm(*norm, rows, e));
      ZEROSIM_RETURN_IF_ERROR(reserve(block.qkv, rows * 3 * e, "qkv"));
      ZEROSIM_RETURN_IF_ERROR(reserve(block.probabilities, scores, "attention probabilities"));
      ZEROSIM_RETURN_IF_ERROR(reserve(block.attended, rows * e, "attended values"));
      ZEROSIM_RETURN_IF_ERROR(reserve(block.middle, rows * e, "residual"));
      for (DeviceArray* wide : {&block.fc, &block.fc_gelu, &block.fc_derivative}) {
        ZEROSIM_RETURN_IF_ERROR(reserve(*wide, rows * 4 * e, "MLP activations"));
      }
    }
    ZEROSIM_RETURN_IF_ERROR(reserve_norm(final_norm_, rows, e));
    ZEROSIM_RETURN_IF_ERROR(reserve(x_, rows * e, "residual stream"));
    ZEROSIM_RETURN_IF_ERROR(reserve(logits_, rows * spec_.vocab, "logits"));
    // A 16-bit fast run computes the logits into rows padded to 32 bytes, so that the head's
    // product keeps 16-bit operands and aligned kernels (product()); the loss reads them there.
    const bool padded_logits = gemm_ == CudaGemm::kCublas && product_operand_dtype_ != DType::kFp32;
    logits_stride_ = padded_logits ? (spec_.vocab + 7) / 8 * 8 : spec_.vocab;
    if (logits_stride_ != spec_.vocab) {
      ZEROSIM_RETURN_IF_ERROR(reserve(padded_logits_, rows * logits_stride_, "padded logits"));
    }
    ZEROSIM_RETURN_IF_ERROR(reserve(row_losses_, rows + 1, "row losses"));
    ZEROSIM_RETURN_IF_ERROR(reserve(d_x_, rows * e, "residual gradient"));
    ZEROSIM_RETURN_IF_ERROR(reserve(d_scratch_, rows * e, "gradient scratch"));
    ZEROSIM_RETURN_IF_ERROR(reserve(d_attended_, rows * e, "attended gradient"));
    ZEROSIM_RETURN_IF_ERROR(reserve(d_wide_, rows * 4 * e, "MLP gradient"));
    ZEROSIM_RETURN_IF_ERROR(reserve(d_qkv_, rows * 3 * e, "qkv gradient"));
    ZEROSIM_RETURN_IF_ERROR(reserve(d_p_, scores, "attention gradient"));
    ZEROSIM_RETURN_IF_ERROR(reserve(d_scores_, scores, "score gradient"));
    ZEROSIM_RETURN_IF_ERROR(reserve(mean_d_, rows, "LayerNorm gradient statistics"));
    ZEROSIM_RETURN_IF_ERROR(reserve(mean_dx_, rows, "LayerNorm gradient statistics"));
    if (gemm_ != CudaGemm::kCublas) return Status();
    ZEROSIM_RETURN_IF_ERROR(reserve(column_scratch_, fast_column_sums_scratch_floats(rows, 4 * e), "column sums"));
    return build_attention_pointers();
  }

  // The embeddings' backward folds each token's rows in order: the distinct tokens, and from
  // token_starts_[g] on the rows (ascending) that hold token g.
  Status group_rows_by_token(std::span<const int32_t> tokens) {
    std::vector<std::pair<int32_t, int64_t>> by_token;  // (token, row)
    by_token.reserve(static_cast<size_t>(sequences_ * length_));
    for (int64_t s = 0; s < sequences_; ++s) {
      for (int64_t t = 0; t < length_; ++t) by_token.emplace_back(tokens[static_cast<size_t>(s * (length_ + 1) + t)], s * length_ + t);
    }
    std::sort(by_token.begin(), by_token.end());
    std::vector<int32_t> group_tokens;
    std::vector<int64_t> starts, rows;
    for (size_t q = 0; q < by_token.size(); ++q) {
      if (q == 0 || by_token[q].first != by_token[q - 1].first) {
        group_tokens.push_back(by_token[q].first);
        starts.push_back(static_cast<int64_t>(q));
      }
      rows.push_back(by_token[q].second);
    }
    starts.push_back(static_cast<int64_t>(by_token.size()));
    distinct_tokens_ = static_cast<int64_t>(group_tokens.size());
    ZEROSIM_RETURN_IF_ERROR(copy_in(group_tokens_, group_tokens.data(), group_tokens.size() * sizeof(int32_t), "token groups"));
    ZEROSIM_RETURN_IF_ERROR(copy_in(token_starts_, starts.data(), starts.size() * sizeof(int64_t), "token groups"));
    return copy_in(token_rows_, rows.data(), rows.size() * sizeof(int64_t), "token groups");
  }

  Status forward(int64_t stage, std::span<const std::vector<float>> parameters) override {
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaSetDevice", cudaSetDevice(device_)));
    const ParameterRange range = forward_range(stage);
    check_sizes(parameters, range);
    ZEROSIM_RETURN_IF_ERROR(upload(parameters, parameters_, "cudaMemcpyAsync (stage parameters)"));
    std::vector<const float*> pointers;
    for (size_t k = 0; k < parameters.size(); ++k) pointers.push_back(parameters_[k].as<float>());
    return forward_on_device(stage, pointers);
  }

  Result<float> loss(float gradient_scale) override {
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaSetDevice", cudaSetDevice(device_)));
    const int64_t rows = sequences_ * length_;
    float* row_losses = row_losses_.as<float>();
    if (gemm_ == CudaGemm::kCublas) {
      ZEROSIM_RETURN_IF_ERROR(in_stage(cuda("fast softmax cross-entropy",
                                            launch_fast_softmax_cross_entropy(
                                                sequences_, length_, spec_.vocab, tokens_.as<int32_t>(), gradient_scale,
                                                forward_logits(), logits_stride_, logits_.as<float>(), row_losses,
                                                stream_)),
                                       "the loss"));
    } else {
      loss_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream_>>>(
          sequences_, length_, spec_.vocab, tokens_.as<int32_t>(), gradient_scale, logits_.as<float>(), row_losses);
      ZEROSIM_RETURN_IF_ERROR(launched("loss_kernel", "the loss"));
    }
    loss_fold_kernel<<<1, 1, 0, stream_>>>(rows, row_losses, row_losses + rows);
    ZEROSIM_RETURN_IF_ERROR(launched("loss_fold_kernel", "the loss"));
    return loss_to_host(row_losses + rows);
  }

  Status backward(int64_t stage, std::span<const std::vector<float>> parameters,
                  std::span<std::vector<float>> gradients) override {
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaSetDevice", cudaSetDevice(device_)));
    const auto [weights, sums] = backward_ranges(stage);
    check_sizes(parameters, weights);
    const std::span<const std::vector<float>> gradient_values(gradients.data(), gradients.size());
    check_sizes(gradient_values, sums);
    ZEROSIM_RETURN_IF_ERROR(upload(parameters, parameters_, "cudaMemcpyAsync (stage parameters)"));
    // The gradients' values so far: a tied parameter's second use adds to its first's.
    ZEROSIM_RETURN_IF_ERROR(upload(gradient_values, gradients_, "cudaMemcpyAsync (stage gradients)"));
    std::vector<const float*> parameter_pointers;
    std::vector<float*> gradient_pointers;
    for (size_t k = 0; k < parameters.size(); ++k) parameter_pointers.push_back(parameters_[k].as<float>());
    for (size_t k = 0; k < gradients.size(); ++k) gradient_pointers.push_back(gradients_[k].as<float>());
    ZEROSIM_RETURN_IF_ERROR(backward_on_device(stage, parameter_pointers, gradient_pointers));
    const std::string where = stage_name(stage);
    for (size_t k = 0; k < gradients.size(); ++k) {
      ZEROSIM_RETURN_IF_ERROR(in_stage(cuda("cudaMemcpyAsync (gradients out)",
                                            cudaMemcpyAsync(gradients[k].data(), gradients_[k].as<float>(),
                                                            gradients[k].size() * sizeof(float), cudaMemcpyDeviceToHost,
                                                            stream_)),
                                       where));
    }
    return in_stage(cuda("cudaStreamSynchronize (gradients)", cudaStreamSynchronize(stream_)), where);
  }

 protected:
  Status forward_on_device(int64_t stage, std::span<const float* const> parameters) override {
    ZEROSIM_CHECK(static_cast<int64_t>(parameters.size()) == forward_range(stage).size(),
                  "one weight per parameter of the stage");
    stage_parameters_.assign(parameters.begin(), parameters.end());
    const int64_t rows = sequences_ * length_, e = spec_.embd;
    if (stage == 0) {
      embeddings_forward_kernel<<<blocks_for(rows * e), kThreads, 0, stream_>>>(
          sequences_, length_, e, tokens_.as<int32_t>(), param(0), param(1), x_.as<float>());
      return launched("embeddings_forward_kernel", "the embeddings");
    }
    if (stage <= spec_.layers) return in_stage(block_forward(stage - 1), "h." + std::to_string(stage - 1));
    if (stage == spec_.layers + 1) return in_stage(layer_norm(x_.as<float>(), param(0), param(1), final_norm_), "ln_f");
    // logits [rows, vocab] = 0 + ln_f(x) [rows, e] x wte^T (wte is [vocab, e]); wte's rounding
    // serves the backward's d_scratch too.
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaMemsetAsync (logits)", cudaMemsetAsync(forward_logits(), 0,
                                                                             bytes_of(rows * logits_stride_), stream_)));
    rounded_wte_.forget();
    return in_stage(product(rows, spec_.vocab, e, {final_norm_.out.as<float>(), false}, {param(0), true},
                            forward_logits(), nullptr, &rounded_wte_, logits_stride_),
                    "the head");
  }

  Status backward_on_device(int64_t stage, std::span<const float* const> parameters,
                            std::span<float* const> gradients) override {
    const auto [weights, sums] = backward_ranges(stage);
    ZEROSIM_CHECK(static_cast<int64_t>(parameters.size()) == weights.size() &&
                      static_cast<int64_t>(gradients.size()) == sums.size(),
                  "one weight and one gradient per parameter of the stage");
    stage_parameters_.assign(parameters.begin(), parameters.end());
    stage_gradients_.assign(gradients.begin(), gradients.end());
    return in_stage(backward_kernels(stage), stage_name(stage));
  }

 private:
  static size_t bytes_of(int64_t floats) { return static_cast<size_t>(std::max<int64_t>(floats, 1)) * sizeof(float); }

  Status reserve(DeviceArray& array, int64_t floats, const char* what) {
    return cuda((std::string("cudaMalloc (") + what + ")").c_str(), array.reserve(bytes_of(floats)));
  }
  Status reserve_norm(DeviceLayerNorm& norm, int64_t rows, int64_t width) {
    ZEROSIM_RETURN_IF_ERROR(reserve(norm.out, rows * width, "LayerNorm output"));
    ZEROSIM_RETURN_IF_ERROR(reserve(norm.normalized, rows * width, "LayerNorm cache"));
    ZEROSIM_RETURN_IF_ERROR(reserve(norm.mean, rows, "LayerNorm cache"));
    return reserve(norm.inverse_std, rows, "LayerNorm cache");
  }
  Status zero(DeviceArray& array, int64_t floats, const char* what) {
    return cuda((std::string("cudaMemsetAsync (") + what + ")").c_str(),
                cudaMemsetAsync(array.as<float>(), 0, bytes_of(floats), stream_));
  }
  Status copy_in(DeviceArray& array, const void* data, size_t bytes, const char* what) {
    ZEROSIM_RETURN_IF_ERROR(cuda((std::string("cudaMalloc (") + what + ")").c_str(), array.reserve(bytes)));
    if (bytes == 0) return Status();
    return cuda((std::string("cudaMemcpyAsync (") + what + ")").c_str(),
                cudaMemcpyAsync(array.as<void>(), data, bytes, cudaMemcpyHostToDevice, stream_));
  }
  Status launched(const char* kernel, const std::string& where) const {
    return in_stage(cuda(kernel, cudaGetLastError()), where);
  }
  static Status in_stage(Status status, const std::string& where) {
    if (status.ok()) return status;
    return Status(status.code(), "transformer " + where + ": " + status.message());
  }

  // The parameters a forward stage reads, and the weights a backward stage reads and the
  // gradients it adds to: the plan's ranges, which the engine gathers.
  ParameterRange forward_range(int64_t stage) const {
    ZEROSIM_CHECK(stage >= 0 && stage < static_cast<int64_t>(plan_.forward.size()), "a forward stage of the plan");
    return plan_.forward[static_cast<size_t>(stage)].gathered;
  }
  std::pair<ParameterRange, ParameterRange> backward_ranges(int64_t stage) const {
    ZEROSIM_CHECK(stage >= 0 && stage < static_cast<int64_t>(plan_.backward.size()), "a backward stage of the plan");
    const BackwardStage& step = plan_.backward[static_cast<size_t>(stage)];
    return {step.gathered, step.gradients};
  }
  std::string stage_name(int64_t stage) const {
    if (stage == 0) return "the head";
    if (stage == 1) return "ln_f";
    if (stage <= spec_.layers + 1) return "h." + std::to_string(spec_.layers - (stage - 1));
    return "the embeddings";
  }
  void check_sizes(std::span<const std::vector<float>> tensors, ParameterRange range) const {
    ZEROSIM_CHECK(static_cast<int64_t>(tensors.size()) == range.size(), "one tensor per parameter of the stage");
    for (int64_t k = 0; k < range.size(); ++k) {
      ZEROSIM_CHECK(static_cast<int64_t>(tensors[static_cast<size_t>(k)].size()) ==
                        element_counts_[static_cast<size_t>(range.first + k)],
                    "full tensors");
    }
  }
  const float* param(size_t k) const { return stage_parameters_[k]; }
  // Where the head's product writes the logits (logits_stride_ apart); the loss writes their
  // gradients to logits_, packed.
  float* forward_logits() { return logits_stride_ == spec_.vocab ? logits_.as<float>() : padded_logits_.as<float>(); }
  float* grad(size_t k) const { return stage_gradients_[k]; }

  // A block's dynamic shared memory without opting in to more.
  static constexpr int64_t kDefaultSharedBytes = 48 * 1024;
  static bool floats_fit_shared_memory(int64_t count) {
    return count * static_cast<int64_t>(sizeof(float)) <= kDefaultSharedBytes;
  }
  // Whether `copies` rows of the embedding fit a block's shared memory, and the rows fit one
  // launch: then a row's folds read it from shared memory.
  bool staged_rows_fit(int64_t copies) const {
    return floats_fit_shared_memory(copies * spec_.embd) && sequences_ * length_ <= std::numeric_limits<int>::max();
  }
  // Whether `copies` rows of attention scores fit a block's shared memory.
  bool attention_rows_fit(int64_t copies) const { return floats_fit_shared_memory(copies * length_); }

  Status layer_norm(const float* in, const float* gamma, const float* beta, DeviceLayerNorm& norm) {
    const int64_t rows = sequences_ * length_, e = spec_.embd;
    const float epsilon = 1.0f / 100000.0f;  // gpt.cpp's Real(1) / Real(100000)
    if (gemm_ == CudaGemm::kCublas) {
      ZEROSIM_RETURN_IF_ERROR(cuda("fast LayerNorm statistics",
                                   launch_fast_layer_norm_statistics(rows, e, in, epsilon, norm.mean.as<float>(),
                                                                     norm.inverse_std.as<float>(), stream_)));
    } else {
      if (staged_rows_fit(1)) {
        layer_norm_statistics_staged_kernel<<<static_cast<unsigned>(rows), kRowThreads, e * sizeof(float), stream_>>>(
            e, in, epsilon, norm.mean.as<float>(), norm.inverse_std.as<float>());
      } else {
        layer_norm_statistics_kernel<<<blocks_for(rows), kThreads, 0, stream_>>>(rows, e, in, epsilon,
                                                                                  norm.mean.as<float>(),
                                                                                  norm.inverse_std.as<float>());
      }
      ZEROSIM_RETURN_IF_ERROR(cuda("layer_norm_statistics_kernel", cudaGetLastError()));
    }
    layer_norm_apply_kernel<<<blocks_for(rows * e), kThreads, 0, stream_>>>(rows, e, in, norm.mean.as<float>(),
                                                                             norm.inverse_std.as<float>(), gamma, beta,
                                                                             norm.normalized.as<float>(), norm.out.as<float>());
    return cuda("layer_norm_apply_kernel", cudaGetLastError());
  }

  // Adds the LayerNorm's input gradient to d_in, and its parameters' to theirs.
  Status layer_norm_backward(const DeviceLayerNorm& norm, const float* gamma, const float* d_out, float* gamma_gradient,
                             float* beta_gradient, float* d_in) {
    const int64_t rows = sequences_ * length_, e = spec_.embd;
    const float* normalized = norm.normalized.as<float>();
    // beta's gradient sums d_out; gamma's sums d_out x normalized.
    if (gemm_ == CudaGemm::kCublas) {
      ZEROSIM_RETURN_IF_ERROR(cuda("fast column sums (LayerNorm parameters)",
                                   launch_fast_column_sums(rows, e, d_out, normalized, beta_gradient, gamma_gradient,
                                                           column_scratch_.as<float>(), stream_)));
      ZEROSIM_RETURN_IF_ERROR(cuda("fast LayerNorm gradient statistics",
                                   launch_fast_layer_norm_gradient_statistics(rows, e, d_out, normalized, gamma,
                                                                              mean_d_.as<float>(), mean_dx_.as<float>(),
                                                                              stream_)));
    } else {
      column_fold_kernel<true><<<column_fold_blocks(e), kFoldThreads, 0, stream_>>>(rows, e, d_out, normalized,
                                                                                     beta_gradient, gamma_gradient);
      ZEROSIM_RETURN_IF_ERROR(cuda("column_fold_kernel (LayerNorm parameters)", cudaGetLastError()));
      if (staged_rows_fit(2)) {
        layer_norm_backward_statistics_staged_kernel<<<static_cast<unsigned>(rows), kRowThreads, 2 * e * sizeof(float),
                                                       stream_>>>(e, d_out, normalized, gamma, mean_d_.as<float>(),
                                                                  mean_dx_.as<float>());
      } else {
        layer_norm_backward_statistics_kernel<<<blocks_for(rows), kThreads, 0, stream_>>>(
            rows, e, d_out, normalized, gamma, mean_d_.as<float>(), mean_dx_.as<float>());
      }
      ZEROSIM_RETURN_IF_ERROR(cuda("layer_norm_backward_statistics_kernel", cudaGetLastError()));
    }
    layer_norm_input_gradient_kernel<<<blocks_for(rows * e), kThreads, 0, stream_>>>(
        rows, e, d_out, normalized, gamma, norm.inverse_std.as<float>(), mean_d_.as<float>(), mean_dx_.as<float>(), d_in);
    return cuda("layer_norm_input_gradient_kernel", cudaGetLastError());
  }

  // out [rows, out_width] = bias + in [rows, in_width] x weight [in_width, out_width]; `rounded`
  // takes the operands' roundings for the backward (the caller forgot its old ones).
  Status conv1d(const float* in, int64_t in_width, const float* weight, const float* bias, int64_t out_width, float* out,
                RoundedConv1d& rounded) {
    const int64_t rows = sequences_ * length_;
    ZEROSIM_RETURN_IF_ERROR(broadcast_rows(rows, out_width, bias, out));
    return product(rows, out_width, in_width, {in, false}, {weight, false}, out, &rounded.input, &rounded.weight);
  }

  // weight_gradient += in^T d_out, bias_gradient += column sums of d_out, d_in = 0 + d_out weight^T;
  // `rounded` holds the forward's roundings of `in` and `weight` (their values are unchanged
  // since), and d_out is rounded once for both products.
  Status conv1d_backward(const float* in, int64_t in_width, const float* weight, int64_t out_width, const float* d_out,
                         float* weight_gradient, float* bias_gradient, DeviceArray& d_in, RoundedConv1d& rounded) {
    const int64_t rows = sequences_ * length_;
    rounded_d_out_.forget();
    ZEROSIM_RETURN_IF_ERROR(product(in_width, out_width, rows, {in, true}, {d_out, false}, weight_gradient,
                                    &rounded.input, &rounded_d_out_));
    if (gemm_ == CudaGemm::kCublas) {
      ZEROSIM_RETURN_IF_ERROR(cuda("fast column sums (bias)",
                                   launch_fast_column_sums(rows, out_width, d_out, nullptr, bias_gradient, nullptr,
                                                           column_scratch_.as<float>(), stream_)));
    } else {
      column_fold_kernel<false><<<column_fold_blocks(out_width), kFoldThreads, 0, stream_>>>(
          rows, out_width, d_out, nullptr, bias_gradient, nullptr);
      ZEROSIM_RETURN_IF_ERROR(cuda("column_fold_kernel (bias)", cudaGetLastError()));
    }
    ZEROSIM_RETURN_IF_ERROR(zero(d_in, rows * in_width, "input gradient"));
    return product(rows, in_width, out_width, {d_out, false}, {weight, true}, d_in.as<float>(), &rounded_d_out_,
                   &rounded.weight);
  }

  AttentionShape attention_shape() const {
    const int64_t d = spec_.embd / spec_.heads;
    // gpt.cpp's Real(1) / std::sqrt(Real(d)), on the host.
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    return AttentionShape{sequences_, length_, spec_.heads, d, spec_.embd, spec_.block, scale};
  }

  TiledAttentionShape tiled_attention_shape() const {
    const AttentionShape shape = attention_shape();
    TiledAttentionShape tiled;
    tiled.sequences = shape.sequences;
    tiled.length = shape.length;
    tiled.heads = shape.heads;
    tiled.head_size = shape.head_size;
    tiled.embd = shape.e;
    tiled.block = shape.block;
    tiled.scale = shape.scale;
    tiled.mask = mask_.as<float>();
    tiled.uniform_rows = uniform_rows_.as<int32_t>();
    return tiled;
  }

  // attended = softmax(mask(q k^T scale)) v for every sequence and head of block `block`.
  Status attention_forward(int64_t block) {
    DeviceBlock& c = blocks_[static_cast<size_t>(block)];
    const AttentionShape shape = attention_shape();
    if (gemm_ == CudaGemm::kCublas) {
      const int64_t batch = sequences_ * spec_.heads, e = spec_.embd, d = shape.head_size;
      const FastAttentionPointers pointers = fast_attention_pointers(block);
      // scores = scale q k^T, in the probabilities' array; then the softmax in place.
      ZEROSIM_RETURN_IF_ERROR(batched_product(length_, length_, d, {pointers.q, 3 * e, false}, {pointers.k, 3 * e, true},
                                              pointers.p, length_, batch, shape.scale));
      ZEROSIM_RETURN_IF_ERROR(cuda("fast_attention_softmax_kernel",
                                   launch_fast_attention_softmax(fast_attention_rows(), c.probabilities.as<float>(), stream_)));
      return batched_product(length_, d, length_, {pointers.p, length_, false}, {pointers.v, 3 * e, false},
                             pointers.o, e, batch, 1.0f);
    }
    if (tiled_attention_) {
      return cuda("tiled attention forward",
                  launch_tiled_attention_forward(tiled_attention_shape(), c.qkv.as<float>(), c.probabilities.as<float>(),
                                                 c.attended.as<float>(), stream_));
    }
    const bool staged = attention_rows_fit(1);
    attention_forward_kernel<<<static_cast<unsigned>(sequences_ * spec_.heads * length_), kRowThreads,
                               staged ? length_ * sizeof(float) : 0, stream_>>>(
        shape, c.qkv.as<float>(), mask_.as<float>(), c.probabilities.as<float>(), c.attended.as<float>(), staged);
    return cuda("attention_forward_kernel", cudaGetLastError());
  }

  // d_qkv (replaced) from d_attended_ through block `block`'s attention.
  Status attention_backward(int64_t block) {
    DeviceBlock& c = blocks_[static_cast<size_t>(block)];
    const AttentionShape shape = attention_shape();
    if (gemm_ == CudaGemm::kCublas) {
      const int64_t batch = sequences_ * spec_.heads, e = spec_.embd, d = shape.head_size;
      const FastAttentionPointers layer = fast_attention_pointers(block);
      const FastAttentionGradientPointers g = fast_attention_gradient_pointers();
      // d_p = d_attended v^T; d_v = p^T d_attended; d_scores; d_q = d_scores k; d_k = d_scores^T q.
      ZEROSIM_RETURN_IF_ERROR(batched_product(length_, length_, d, {g.d_o, e, false}, {layer.v, 3 * e, true}, g.d_p,
                                              length_, batch, 1.0f));
      ZEROSIM_RETURN_IF_ERROR(batched_product(length_, d, length_, {layer.p, length_, true}, {g.d_o, e, false}, g.d_v,
                                              3 * e, batch, 1.0f));
      ZEROSIM_RETURN_IF_ERROR(cuda("fast_attention_score_gradient_kernel",
                                   launch_fast_attention_score_gradient(fast_attention_rows(), c.probabilities.as<float>(),
                                                                        d_p_.as<float>(), shape.scale,
                                                                        d_scores_.as<float>(), stream_)));
      ZEROSIM_RETURN_IF_ERROR(batched_product(length_, d, length_, {g.d_s, length_, false}, {layer.k, 3 * e, false}, g.d_q,
                                              3 * e, batch, 1.0f));
      return batched_product(length_, d, length_, {g.d_s, length_, true}, {layer.q, 3 * e, false}, g.d_k, 3 * e, batch,
                             1.0f);
    }
    if (tiled_attention_) {
      return cuda("tiled attention backward",
                  launch_tiled_attention_backward(tiled_attention_shape(), c.qkv.as<float>(), c.probabilities.as<float>(),
                                                  d_attended_.as<float>(), d_scores_.as<float>(), d_qkv_.as<float>(),
                                                  stream_));
    }
    const unsigned attention_rows = static_cast<unsigned>(sequences_ * spec_.heads * length_);
    const bool staged = attention_rows_fit(3);
    attention_backward_query_kernel<<<attention_rows, kRowThreads, staged ? 3 * length_ * sizeof(float) : 0, stream_>>>(
        shape, c.qkv.as<float>(), mask_.as<float>(), uniform_rows_.as<int32_t>(), c.probabilities.as<float>(),
        d_attended_.as<float>(), d_p_.as<float>(), d_scores_.as<float>(), d_qkv_.as<float>(), staged);
    ZEROSIM_RETURN_IF_ERROR(cuda("attention_backward_query_kernel", cudaGetLastError()));
    attention_backward_key_kernel<<<attention_rows, kRowThreads, 0, stream_>>>(
        shape, c.qkv.as<float>(), mask_.as<float>(), uniform_rows_.as<int32_t>(), c.probabilities.as<float>(),
        d_attended_.as<float>(), d_scores_.as<float>(), d_qkv_.as<float>());
    return cuda("attention_backward_key_kernel", cudaGetLastError());
  }

  // The fast mode's batched attention products: per batch entry (sequence s, head h; entry
  // s * heads + h) a device pointer to each operand. A layer's own (q, k, v inside its qkv, its
  // probabilities, its attended values) come first, layer by layer; the gradients' arrays,
  // shared by every layer, after them.
  static constexpr int64_t kLayerOperands = 5;
  // A read operand converts to BatchedOperand's const pointers on use.
  using PointerTable = float* const*;
  struct FastAttentionPointers {
    PointerTable q, k, v, p, o;
  };
  struct FastAttentionGradientPointers {
    PointerTable d_o, d_p, d_s, d_q, d_k, d_v;
  };
  PointerTable attention_pointer_table(int64_t slot) const {
    return attention_pointers_.as<float*>() + slot * sequences_ * spec_.heads;
  }
  FastAttentionPointers fast_attention_pointers(int64_t block) const {
    const int64_t first = block * kLayerOperands;
    auto table = [&](int64_t k) { return attention_pointer_table(first + k); };
    return {table(0), table(1), table(2), table(3), table(4)};
  }
  FastAttentionGradientPointers fast_attention_gradient_pointers() const {
    const int64_t first = spec_.layers * kLayerOperands;
    auto table = [&](int64_t k) { return attention_pointer_table(first + k); };
    return {table(0), table(1), table(2), table(3), table(4), table(5)};
  }
  FastAttentionRows fast_attention_rows() const {
    return FastAttentionRows{sequences_ * spec_.heads, length_, spec_.block, mask_.as<float>(), uniform_rows_.as<int32_t>()};
  }
  // Fills the table above for this micro-batch's arrays (after they are reserved).
  Status build_attention_pointers() {
    const int64_t e = spec_.embd, d = e / spec_.heads, l = length_, scores = l * l;
    std::vector<float*> table;
    auto add_operand = [&](float* base, int64_t sequence_stride, int64_t head_stride) {
      for (int64_t s = 0; s < sequences_; ++s) {
        for (int64_t h = 0; h < spec_.heads; ++h) table.push_back(base + s * sequence_stride + h * head_stride);
      }
    };
    for (DeviceBlock& block : blocks_) {
      float* qkv = block.qkv.as<float>();
      for (int64_t part = 0; part < 3; ++part) add_operand(qkv + part * e, l * 3 * e, d);
      add_operand(block.probabilities.as<float>(), spec_.heads * scores, scores);
      add_operand(block.attended.as<float>(), l * e, d);
    }
    add_operand(d_attended_.as<float>(), l * e, d);
    add_operand(d_p_.as<float>(), spec_.heads * scores, scores);
    add_operand(d_scores_.as<float>(), spec_.heads * scores, scores);
    for (int64_t part = 0; part < 3; ++part) add_operand(d_qkv_.as<float>() + part * e, l * 3 * e, d);
    return copy_in(attention_pointers_, table.data(), table.size() * sizeof(float*), "attention pointers");
  }

  Status block_forward(int64_t block) {
    const int64_t rows = sequences_ * length_, e = spec_.embd;
    DeviceBlock& c = blocks_[static_cast<size_t>(block)];
    // New inputs, and weights that may have stepped since the last forward.
    for (RoundedConv1d* rounded : {&c.c_attn, &c.attn_proj, &c.c_fc, &c.mlp_proj}) rounded->forget();
    ZEROSIM_RETURN_IF_ERROR(layer_norm(x_.as<float>(), param(0), param(1), c.ln_1));
    ZEROSIM_RETURN_IF_ERROR(conv1d(c.ln_1.out.as<float>(), e, param(2), param(3), 3 * e, c.qkv.as<float>(), c.c_attn));
    ZEROSIM_RETURN_IF_ERROR(attention_forward(block));
    ZEROSIM_RETURN_IF_ERROR(
        conv1d(c.attended.as<float>(), e, param(4), param(5), e, c.middle.as<float>(), c.attn_proj));
    add_kernel<<<blocks_for(rows * e), kThreads, 0, stream_>>>(rows * e, x_.as<float>(), c.middle.as<float>());
    ZEROSIM_RETURN_IF_ERROR(cuda("add_kernel", cudaGetLastError()));
    ZEROSIM_RETURN_IF_ERROR(layer_norm(c.middle.as<float>(), param(6), param(7), c.ln_2));
    ZEROSIM_RETURN_IF_ERROR(conv1d(c.ln_2.out.as<float>(), e, param(8), param(9), 4 * e, c.fc.as<float>(), c.c_fc));
    gelu_kernel<<<blocks_for(rows * 4 * e), kThreads, 0, stream_>>>(rows * 4 * e, c.fc.as<float>(), c.fc_gelu.as<float>(),
                                                                     c.fc_derivative.as<float>());
    ZEROSIM_RETURN_IF_ERROR(cuda("gelu_kernel", cudaGetLastError()));
    ZEROSIM_RETURN_IF_ERROR(conv1d(c.fc_gelu.as<float>(), 4 * e, param(10), param(11), e, x_.as<float>(), c.mlp_proj));
    add_kernel<<<blocks_for(rows * e), kThreads, 0, stream_>>>(rows * e, c.middle.as<float>(), x_.as<float>());
    return cuda("add_kernel", cudaGetLastError());
  }

  // Enqueues backward stage `stage` over stage_parameters_ and stage_gradients_.
  Status backward_kernels(int64_t stage) {
    const int64_t rows = sequences_ * length_, e = spec_.embd, v = spec_.vocab;
    if (stage == 0) {
      // d_wte += d_logits^T ln_f(x) (the head's use, first); d_scratch = 0 + d_logits wte. The
      // logits' array holds d_logits now (the loss wrote them), rounded once for both.
      rounded_d_logits_.forget();
      ZEROSIM_RETURN_IF_ERROR(product(v, e, rows, {logits_.as<float>(), true}, {final_norm_.out.as<float>(), false},
                                      grad(0), &rounded_d_logits_));
      ZEROSIM_RETURN_IF_ERROR(zero(d_scratch_, rows * e, "d_scratch"));
      return product(rows, e, v, {logits_.as<float>(), false}, {param(0), false}, d_scratch_.as<float>(),
                     &rounded_d_logits_, &rounded_wte_);
    }
    if (stage == 1) {
      ZEROSIM_RETURN_IF_ERROR(zero(d_x_, rows * e, "d_x"));
      return layer_norm_backward(final_norm_, param(0), d_scratch_.as<float>(), grad(0), grad(1), d_x_.as<float>());
    }
    if (stage <= spec_.layers + 1) {
      const int64_t block = spec_.layers - (stage - 1);
      return block_backward(block);
    }
    ZEROSIM_CHECK(stage == spec_.layers + 2, "a backward stage of the plan");
    // No weight: wte's second use and wpe.
    token_embedding_gradient_kernel<<<blocks_for(distinct_tokens_ * e), kThreads, 0, stream_>>>(
        distinct_tokens_, e, group_tokens_.as<int32_t>(), token_starts_.as<int64_t>(), token_rows_.as<int64_t>(),
        d_x_.as<float>(), grad(0));
    ZEROSIM_RETURN_IF_ERROR(cuda("token_embedding_gradient_kernel", cudaGetLastError()));
    position_embedding_gradient_kernel<<<blocks_for(length_ * e), kThreads, 0, stream_>>>(sequences_, length_, e,
                                                                                         d_x_.as<float>(), grad(1));
    return cuda("position_embedding_gradient_kernel", cudaGetLastError());
  }

  Status block_backward(int64_t block) {
    const int64_t rows = sequences_ * length_, e = spec_.embd;
    DeviceBlock& c = blocks_[static_cast<size_t>(block)];
    // x_out = middle + mlp(ln_2(middle)).
    ZEROSIM_RETURN_IF_ERROR(conv1d_backward(c.fc_gelu.as<float>(), 4 * e, param(10), e, d_x_.as<float>(), grad(10),
                                            grad(11), d_wide_, c.mlp_proj));
    multiply_kernel<<<blocks_for(rows * 4 * e), kThreads, 0, stream_>>>(rows * 4 * e, c.fc_derivative.as<float>(),
                                                                         d_wide_.as<float>());
    ZEROSIM_RETURN_IF_ERROR(cuda("multiply_kernel", cudaGetLastError()));
    ZEROSIM_RETURN_IF_ERROR(conv1d_backward(c.ln_2.out.as<float>(), e, param(8), 4 * e, d_wide_.as<float>(), grad(8),
                                            grad(9), d_scratch_, c.c_fc));
    ZEROSIM_RETURN_IF_ERROR(
        layer_norm_backward(c.ln_2, param(6), d_scratch_.as<float>(), grad(6), grad(7), d_x_.as<float>()));  // d_middle
    // middle = input + proj(attention(ln_1(input))).
    ZEROSIM_RETURN_IF_ERROR(conv1d_backward(c.attended.as<float>(), e, param(4), e, d_x_.as<float>(), grad(4), grad(5),
                                            d_attended_, c.attn_proj));
    ZEROSIM_RETURN_IF_ERROR(attention_backward(block));
    ZEROSIM_RETURN_IF_ERROR(conv1d_backward(c.ln_1.out.as<float>(), e, param(2), 3 * e, d_qkv_.as<float>(), grad(2),
                                            grad(3), d_scratch_, c.c_attn));
    return layer_norm_backward(c.ln_1, param(0), d_scratch_.as<float>(), grad(0), grad(1), d_x_.as<float>());  // d_input
  }

  GptSpec spec_;
  ModelPlan plan_;
  std::vector<int64_t> element_counts_;
  GptActivations<float> host_check_;  // begin_micro_batch's checks only
  int64_t sequences_ = 0, length_ = 0;
  bool tiled_attention_ = false;  // the deterministic mode's attention in tiles (device_tiled_attention.h)
  DeviceArray tokens_, mask_, uniform_rows_;
  DeviceArray group_tokens_, token_starts_, token_rows_;  // the rows by token (group_rows_by_token)
  int64_t distinct_tokens_ = 0;
  DeviceArray attention_pointers_;  // the fast mode's batched operands (build_attention_pointers)
  DeviceArray column_scratch_;      // the fast mode's column sums' slices (device_fast_rows.h)
  std::vector<DeviceBlock> blocks_;
  DeviceLayerNorm final_norm_;
  DeviceArray x_, logits_, row_losses_;  // row_losses_ holds each row's loss, then the mean
  DeviceArray padded_logits_;             // the head's output where logits_stride_ != vocab
  int64_t logits_stride_ = 0;
  DeviceArray d_x_, d_scratch_, d_attended_, d_wide_, d_qkv_, d_p_, d_scores_, mean_d_, mean_dx_;
  RoundedMatrix rounded_d_out_, rounded_d_logits_;  // a 16-bit fast run's backward roundings
  RoundedMatrix rounded_wte_;                        // the head's weight, forward and backward
  std::vector<DeviceArray> parameters_, gradients_;  // a host stage's tensors, uploaded
  std::vector<const float*> stage_parameters_;  // the current stage's weights and gradients
  std::vector<float*> stage_gradients_;
};

}  // namespace

Result<std::unique_ptr<ComputeBackend>> make_cuda_gpt_backend(const GptSpec& spec, int device, CudaGemm gemm,
                                                              DType model_dtype) {
  ZEROSIM_RETURN_IF_ERROR(validate_gpt_spec(spec));
  auto backend = std::make_unique<CudaGptBackend>(spec, device, gemm, model_dtype);
  ZEROSIM_RETURN_IF_ERROR(backend->start());
  return Result<std::unique_ptr<ComputeBackend>>(std::unique_ptr<ComputeBackend>(std::move(backend)));
}

}  // namespace zerosim
