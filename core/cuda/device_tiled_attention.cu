#include "core/cuda/device_tiled_attention.h"

#include <algorithm>
#include <limits>

#include "core/cuda/device_portable_math.cuh"

namespace zerosim {

namespace {

constexpr int kTile = 32;  // queries (forward, query gradients) or keys (key gradients) a block holds
constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int kWarps = kThreads / kWarp;
constexpr int kRowsPerWarp = kTile / kWarps;  // a warp's rows of the tile in the folds over keys or queries
constexpr int kColumnsPerLane = 2;            // a lane's head dimensions per pass: lane and lane + 32
constexpr int kDimensionsPerPass = kWarp * kColumnsPerLane;
static_assert(kRowsPerWarp * kWarps == kTile, "the warps share the tile's rows evenly");

__device__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ float div(float a, float b) { return __fdiv_rn(a, b); }

// A staged matrix's row stride: its width made odd, so that a warp reading one column of 32
// rows touches 32 different banks.
__host__ __device__ constexpr int padded(int width) { return width % 2 == 0 ? width + 1 : width; }
// The same for a tile row of allowed-key bytes: an odd number of 4-byte words.
__host__ __device__ constexpr int allowed_stride(int length) { return 4 * padded((length + 3) / 4); }

// Shared floats: a head's keys or values (length rows), the tile's rows of one head operand, two
// tiles of scores; then a byte per (tile row, key) saying whether it is allowed.
int64_t query_tile_floats(int length, int head_size) {
  return static_cast<int64_t>(length) * padded(head_size) + kTile * padded(head_size) + 2 * kTile * padded(length);
}
// Shared floats of the key tile: every query's row of one head operand, and two tiles of
// (query, key) values: the probabilities and the score gradients.
int64_t key_tile_floats(int length, int head_size) {
  return static_cast<int64_t>(length) * padded(head_size) + 2 * static_cast<int64_t>(length) * padded(kTile);
}
// The allowed-key bytes: [tile row][key] for a query tile, [query][key of the tile] for a key tile.
int64_t allowed_bytes(int length) { return std::max<int64_t>(kTile * allowed_stride(length), static_cast<int64_t>(length) * kTile); }

// dst[r][k] = src[r * stride + k] for r < rows, k < width: a block's coalesced copy into a padded
// tile. Shared-memory indices are 32-bit (a tile is far below 2^31 floats): 64-bit division and
// multiplication cost the staging loops several times their loads.
__device__ void stage_rows(const float* src, int64_t stride, int rows, int width, float* dst) {
  for (int x = threadIdx.x; x < rows * width; x += kThreads) {
    const int r = x / width, k = x - r * width;
    dst[r * padded(width) + k] = src[r * stride + k];
  }
}

// out[r][j] for the tile's rows r < rows and every key j: the fold over the head's dimensions
// of a[r][k] * b[j][k] from 0 (the CPU's score and d_p), each thread four rows of one key, when
// the key is used by the row (`used`); a row that does not use it gets 0. With `scaled` a used
// sum is multiplied by `factor` (the scores' scale) once folded.
template <typename Used>
__device__ void fold_over_dimensions(const float* a, const float* b, int rows, int length, int head_size, float factor,
                                     bool scaled, Used&& used, float* out) {
  constexpr int kRows = 4;
  const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
  const int row_groups = kTile / kRows, key_groups = (length + kWarp - 1) / kWarp;
  const int operand_stride = padded(head_size), out_stride = padded(length);
  for (int item = warp; item < row_groups * key_groups; item += kWarps) {
    const int r0 = (item % row_groups) * kRows, j = (item / row_groups) * kWarp + lane;
    if (j >= length || r0 >= rows) continue;
    float sums[kRows] = {0.0f, 0.0f, 0.0f, 0.0f};
    const float* a_row = a + r0 * operand_stride;
    const float* b_row = b + j * operand_stride;
    for (int k = 0; k < head_size; ++k) {
      const float bk = b_row[k];
#pragma unroll
      for (int r = 0; r < kRows; ++r) sums[r] = add(sums[r], mul(a_row[r * operand_stride + k], bk));
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (r0 + r >= rows) continue;
      out[(r0 + r) * out_stride + j] = used(r0 + r, j) ? (scaled ? mul(sums[r], factor) : sums[r]) : 0.0f;
    }
  }
}

// For the tile's rows r < rows (a warp's four) and the head's dimensions k (a lane's two a
// pass): the fold in ascending order over m < count of weight(r, m) * b[m][k] from 0, over the m
// that `used(r, m)`; then store(r, k, sum). b is a staged [count][head_size] operand: the
// values or keys (over the keys), or d_attended or the queries (over the queries).
template <typename Weight, typename Used, typename Store>
__device__ void fold_rows(Weight&& weight, const float* b, int rows, int count, int head_size, Used&& used,
                          Store&& store) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
  const int r0 = warp * kRowsPerWarp, b_stride = padded(head_size);
  for (int k0 = 0; k0 < head_size; k0 += kDimensionsPerPass) {
    float sums[kRowsPerWarp][kColumnsPerLane] = {};
    for (int m = 0; m < count; ++m) {
      float bk[kColumnsPerLane];
#pragma unroll
      for (int c = 0; c < kColumnsPerLane; ++c) {
        const int k = k0 + lane + c * kWarp;
        bk[c] = k < head_size ? b[m * b_stride + k] : 0.0f;
      }
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        if (r0 + r >= rows || !used(r0 + r, m)) continue;
        const float w = weight(r0 + r, m);
#pragma unroll
        for (int c = 0; c < kColumnsPerLane; ++c) sums[r][c] = add(sums[r][c], mul(w, bk[c]));
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
      for (int c = 0; c < kColumnsPerLane; ++c) {
        const int k = k0 + lane + c * kWarp;
        if (r0 + r < rows && k < head_size) store(r0 + r, k, sums[r][c]);
      }
    }
  }
}

struct TileSpot {
  int64_t s, h;     // sequence, head
  int first, rows;  // the tile's first query (or key) and its rows
};

__device__ TileSpot tile_spot(const TiledAttentionShape& shape) {
  const int length = static_cast<int>(shape.length);
  const int tiles = (length + kTile - 1) / kTile;
  const int tile = static_cast<int>(blockIdx.x % tiles);
  const int64_t pair = blockIdx.x / tiles;
  const int first = tile * kTile;
  return TileSpot{pair / shape.heads, pair % shape.heads, first, length - first < kTile ? length - first : kTile};
}

// allowed[r][j] for the tile's queries (forward, query gradients), from the mask.
__device__ void stage_allowed_keys(const TiledAttentionShape& shape, const TileSpot& spot, unsigned char* allowed) {
  const int length = static_cast<int>(shape.length);
  for (int x = threadIdx.x; x < spot.rows * length; x += kThreads) {
    const int r = x / length, j = x - r * length;
    allowed[r * allowed_stride(length) + j] = shape.mask[(spot.first + r) * shape.block + j] != 0.0f ? 1 : 0;
  }
}

// A query tile's shared memory, as query_tile_floats counts it: a head's keys or values (all
// the sequence's rows), the tile's rows of one head operand, two tiles of (query, key) values
// and the allowed-key bytes.
struct QueryTile {
  int length, d, p_stride, a_stride;
  float* head_rows;   // [length][padded(d)]
  float* tile_rows;   // [kTile][padded(d)]
  float* first;       // [kTile][p_stride]
  float* second;      // [kTile][p_stride]
  unsigned char* allowed;  // [kTile][a_stride]

  __device__ QueryTile(const TiledAttentionShape& shape, float* shared)
      : length(static_cast<int>(shape.length)),
        d(static_cast<int>(shape.head_size)),
        p_stride(padded(length)),
        a_stride(allowed_stride(length)),
        head_rows(shared),
        tile_rows(head_rows + length * padded(d)),
        first(tile_rows + kTile * padded(d)),
        second(first + kTile * p_stride),
        allowed(reinterpret_cast<unsigned char*>(second + kTile * p_stride)) {}
  __device__ bool is_allowed(int r, int j) const { return allowed[r * a_stride + j] != 0; }
};

// One block per (sequence, head, tile of 32 queries): scores, softmax, attended values.
__global__ void __launch_bounds__(kThreads)
    tiled_attention_forward_kernel(TiledAttentionShape shape, const float* qkv, float* probabilities, float* attended) {
  extern __shared__ float shared[];
  __shared__ float row_maximum[kTile], row_sum[kTile];
  __shared__ bool row_uniform[kTile];
  const TileSpot spot = tile_spot(shape);
  const QueryTile tile(shape, shared);
  const int length = tile.length, d = tile.d, p_stride = tile.p_stride;
  const int64_t e = shape.embd, stride = 3 * e;
  float* keys = tile.head_rows;  // the keys, then the values
  float* queries = tile.tile_rows;
  float* p = tile.first;
  unsigned char* allowed = tile.allowed;
  const float* sequence = qkv + spot.s * shape.length * stride;
  stage_rows(sequence + e + spot.h * d, stride, length, d, keys);
  stage_rows(sequence + spot.first * stride + spot.h * d, stride, spot.rows, d, queries);
  stage_allowed_keys(shape, spot, allowed);
  __syncthreads();
  auto is_allowed = [&](int r, int j) { return tile.is_allowed(r, j); };
  fold_over_dimensions(queries, keys, spot.rows, length, d, shape.scale, true, is_allowed, p);
  __syncthreads();
  stage_rows(sequence + 2 * e + spot.h * d, stride, length, d, keys);  // the values, over the keys
  const int r = static_cast<int>(threadIdx.x);
  if (r < spot.rows) {  // the maximum as gpt.cpp takes it: the first allowed key, then any strictly greater
    bool found = false;
    float maximum = 0.0f;
    for (int j = 0; j < length; ++j) {
      if (!is_allowed(r, j)) continue;
      const float score = p[r * p_stride + j];
      if (!found || score > maximum) maximum = score;
      found = true;
    }
    row_maximum[r] = maximum;
    row_uniform[r] = !found;
  }
  __syncthreads();
  for (int x = threadIdx.x; x < spot.rows * length; x += kThreads) {
    const int row = x / length, j = x - row * length;
    float& value = p[row * p_stride + j];
    if (row_uniform[row]) {
      value = div(1.0f, static_cast<float>(length));
    } else if (is_allowed(row, j)) {
      value = device_portable_expf(sub(value, row_maximum[row]));
    }
  }
  __syncthreads();
  if (r < spot.rows && !row_uniform[r]) {
    float total = 0.0f;
    for (int j = 0; j < length; ++j) {
      if (is_allowed(r, j)) total = add(total, p[r * p_stride + j]);
    }
    row_sum[r] = total;
  }
  __syncthreads();
  float* stored = probabilities + ((spot.s * shape.heads + spot.h) * shape.length + spot.first) * shape.length;
  for (int x = threadIdx.x; x < spot.rows * length; x += kThreads) {
    const int row = x / length, j = x - row * length;
    float& value = p[row * p_stride + j];
    if (!row_uniform[row] && is_allowed(row, j)) value = div(value, row_sum[row]);
    stored[x] = value;
  }
  __syncthreads();
  float* out = attended + (spot.s * shape.length + spot.first) * e + spot.h * d;
  fold_rows([&](int row, int j) { return p[row * p_stride + j]; }, keys, spot.rows, length, d,
            [&](int row, int j) { return row_uniform[row] || is_allowed(row, j); },
            [&](int row, int k, float value) { out[row * e + k] = value; });
}

// One block per (sequence, head, tile of 32 queries): d_p, the weighted sum, the score gradients
// (to d_scores) and d_q.
__global__ void __launch_bounds__(kThreads)
    tiled_attention_query_gradient_kernel(TiledAttentionShape shape, const float* qkv, const float* probabilities,
                                          const float* d_attended, float* d_scores, float* d_qkv) {
  extern __shared__ float shared[];
  __shared__ float row_weighted[kTile];
  __shared__ bool row_uniform[kTile];
  const TileSpot spot = tile_spot(shape);
  const QueryTile tile(shape, shared);
  const int length = tile.length, d = tile.d, p_stride = tile.p_stride;
  const int64_t e = shape.embd, stride = 3 * e;
  float* heads = tile.head_rows;  // the values, then the keys
  float* d_att = tile.tile_rows;
  float* p = tile.first;
  float* d_p = tile.second;  // d_p, then the score gradients in place
  unsigned char* allowed = tile.allowed;
  const float* sequence = qkv + spot.s * shape.length * stride;
  const int64_t pair_rows = (spot.s * shape.heads + spot.h) * shape.length + spot.first;
  stage_rows(sequence + 2 * e + spot.h * d, stride, length, d, heads);
  stage_rows(d_attended + (spot.s * shape.length + spot.first) * e + spot.h * d, e, spot.rows, d, d_att);
  stage_rows(probabilities + pair_rows * shape.length, shape.length, spot.rows, length, p);
  stage_allowed_keys(shape, spot, allowed);
  if (static_cast<int>(threadIdx.x) < spot.rows) {
    row_uniform[threadIdx.x] = shape.uniform_rows[spot.first + static_cast<int>(threadIdx.x)] != 0;
  }
  __syncthreads();
  auto is_allowed = [&](int r, int j) { return tile.is_allowed(r, j); };
  auto used = [&](int r, int j) { return row_uniform[r] || is_allowed(r, j); };
  fold_over_dimensions(d_att, heads, spot.rows, length, d, 1.0f, false, used, d_p);
  __syncthreads();
  stage_rows(sequence + e + spot.h * d, stride, length, d, heads);  // the keys, over the values
  const int r = static_cast<int>(threadIdx.x);
  if (r < spot.rows) {
    float weighted = 0.0f;
    for (int j = 0; j < length; ++j) {
      if (used(r, j)) weighted = add(weighted, mul(d_p[r * p_stride + j], p[r * p_stride + j]));
    }
    row_weighted[r] = weighted;
  }
  __syncthreads();
  auto scores_used = [&](int row, int j) { return !row_uniform[row] && is_allowed(row, j); };
  float* stored = d_scores + pair_rows * shape.length;
  for (int x = threadIdx.x; x < spot.rows * length; x += kThreads) {
    const int row = x / length, j = x - row * length;
    if (!scores_used(row, j)) continue;
    const int at = row * p_stride + j;
    const float d_score = mul(mul(p[at], sub(d_p[at], row_weighted[row])), shape.scale);
    d_p[at] = d_score;
    stored[x] = d_score;
  }
  __syncthreads();
  float* d_q = d_qkv + (spot.s * shape.length + spot.first) * stride + spot.h * d;
  fold_rows([&](int row, int j) { return d_p[row * p_stride + j]; }, heads, spot.rows, length, d, scores_used,
            [&](int row, int k, float value) { d_q[row * stride + k] = value; });
}

// One block per (sequence, head, tile of 32 keys): d_v and d_k, each a fold over the queries in
// ascending order.
__global__ void __launch_bounds__(kThreads)
    tiled_attention_key_gradient_kernel(TiledAttentionShape shape, const float* qkv, const float* probabilities,
                                        const float* d_attended, const float* d_scores, float* d_qkv) {
  extern __shared__ float shared[];
  const TileSpot spot = tile_spot(shape);  // `first` and `rows`: the tile's keys
  const int length = static_cast<int>(shape.length), d = static_cast<int>(shape.head_size);
  const int64_t e = shape.embd, stride = 3 * e;
  constexpr int kKeyStride = padded(kTile);
  float* rows_of_queries = shared;                  // d_attended, then the queries
  float* p = rows_of_queries + length * padded(d);  // [query][key of the tile]
  float* d_score = p + length * kKeyStride;
  // [query][key of the tile]: whether the query sees the key, and (bit 1) whether the query is uniform.
  unsigned char* flags = reinterpret_cast<unsigned char*>(d_score + length * kKeyStride);
  const float* sequence = qkv + spot.s * shape.length * stride;
  const int64_t pair_rows = (spot.s * shape.heads + spot.h) * shape.length;
  stage_rows(d_attended + spot.s * shape.length * e + spot.h * d, e, length, d, rows_of_queries);
  for (int x = threadIdx.x; x < length * spot.rows; x += kThreads) {
    const int i = x / spot.rows, jj = x - i * spot.rows;
    const int64_t from = (pair_rows + i) * shape.length + spot.first + jj;
    p[i * kKeyStride + jj] = probabilities[from];
    d_score[i * kKeyStride + jj] = d_scores[from];  // read only where it was written (see d_k below)
    flags[i * kTile + jj] = (shape.mask[i * shape.block + spot.first + jj] != 0.0f ? 1 : 0) |
                            (shape.uniform_rows[i] != 0 ? 2 : 0);
  }
  __syncthreads();
  float* d_keys = d_qkv + (spot.s * shape.length + spot.first) * stride + e + spot.h * d;
  // The rows of the folds are this tile's keys, and they fold over the queries i.
  // d_v[j] folds p[i][j] d_attended[i] over the queries that see key j (all, in a uniform row).
  fold_rows([&](int jj, int i) { return p[i * kKeyStride + jj]; }, rows_of_queries, spot.rows, length, d,
            [&](int jj, int i) { return flags[i * kTile + jj] != 0; },
            [&](int jj, int k, float value) { d_keys[jj * stride + e + k] = value; });
  __syncthreads();
  stage_rows(sequence + spot.h * d, stride, length, d, rows_of_queries);  // the queries
  __syncthreads();
  // d_k[j] folds d_score[i][j] q[i] over the queries that are not uniform and see key j.
  fold_rows([&](int jj, int i) { return d_score[i * kKeyStride + jj]; }, rows_of_queries, spot.rows, length, d,
            [&](int jj, int i) { return flags[i * kTile + jj] == 1; },
            [&](int jj, int k, float value) { d_keys[jj * stride + k] = value; });
}

// The kernels index shared memory in 32 bits; any extent past this is far beyond what a block's
// shared memory holds anyway.
constexpr int64_t kMaxExtent = int64_t{1} << 16;
bool extents_fit(int64_t length, int64_t head_size) {
  return length > 0 && head_size > 0 && length <= kMaxExtent && head_size <= kMaxExtent;
}

unsigned tile_blocks(const TiledAttentionShape& shape) {
  return static_cast<unsigned>(shape.sequences * shape.heads * ((shape.length + kTile - 1) / kTile));
}

template <typename Kernel>
cudaError_t allow_shared(Kernel kernel, int64_t bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

// A kernel's dynamic shared memory: its tile's floats and the allowed-key bytes.
int64_t query_tile_bytes(int64_t length, int64_t head_size) {
  return query_tile_floats(length, head_size) * static_cast<int64_t>(sizeof(float)) + allowed_bytes(length);
}
int64_t key_tile_bytes(int64_t length, int64_t head_size) {
  return key_tile_floats(length, head_size) * static_cast<int64_t>(sizeof(float)) + allowed_bytes(length);
}

}  // namespace

int64_t tiled_attention_shared_bytes(int64_t length, int64_t head_size) {
  if (!extents_fit(length, head_size)) return std::numeric_limits<int64_t>::max();
  return std::max(query_tile_bytes(length, head_size), key_tile_bytes(length, head_size));
}

cudaError_t launch_tiled_attention_forward(const TiledAttentionShape& shape, const float* qkv, float* probabilities,
                                           float* attended, cudaStream_t stream) {
  if (shape.sequences * shape.heads * shape.length == 0) return cudaSuccess;
  if (!extents_fit(shape.length, shape.head_size)) return cudaErrorInvalidValue;
  const int64_t bytes = query_tile_bytes(shape.length, shape.head_size);
  if (const cudaError_t status = allow_shared(tiled_attention_forward_kernel, bytes); status != cudaSuccess) return status;
  tiled_attention_forward_kernel<<<tile_blocks(shape), kThreads, bytes, stream>>>(shape, qkv, probabilities, attended);
  return cudaGetLastError();
}

cudaError_t launch_tiled_attention_backward(const TiledAttentionShape& shape, const float* qkv, const float* probabilities,
                                            const float* d_attended, float* d_scores, float* d_qkv, cudaStream_t stream) {
  if (shape.sequences * shape.heads * shape.length == 0) return cudaSuccess;
  if (!extents_fit(shape.length, shape.head_size)) return cudaErrorInvalidValue;
  const int64_t query_bytes = query_tile_bytes(shape.length, shape.head_size);
  const int64_t key_bytes = key_tile_bytes(shape.length, shape.head_size);
  if (const cudaError_t status = allow_shared(tiled_attention_query_gradient_kernel, query_bytes); status != cudaSuccess) {
    return status;
  }
  tiled_attention_query_gradient_kernel<<<tile_blocks(shape), kThreads, query_bytes, stream>>>(
      shape, qkv, probabilities, d_attended, d_scores, d_qkv);
  if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
  if (const cudaError_t status = allow_shared(tiled_attention_key_gradient_kernel, key_bytes); status != cudaSuccess) {
    return status;
  }
  tiled_attention_key_gradient_kernel<<<tile_blocks(shape), kThreads, key_bytes, stream>>>(shape, qkv, probabilities,
                                                                                            d_attended, d_scores, d_qkv);
  return cudaGetLastError();
}

}  // namespace zerosim
