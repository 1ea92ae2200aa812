#include "core/cuda/device_square_sum.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

namespace zerosim {

namespace {

constexpr int kBins = static_cast<int>(ExactSquareSum::kBinCount);
constexpr int kThreads = 256;
constexpr int64_t kElementsPerBlock = int64_t{1} << 16;  // 2^16 squares below 2^48 fit 64 bits

constexpr int kWarps = kThreads / 32;
constexpr uint32_t kNoKey = 0xffffffffu;  // a lane past the end
constexpr int kPieces = 3;                // a square (below 2^48) as three 16-bit pieces

// A value's bin (its exponent field; kBins: an infinity, kBins + 1: a NaN, each counted once)
// and the square of its significand.
__device__ __forceinline__ void bin_and_square(float value, uint32_t& key, unsigned long long& square) {
  const uint32_t bits = __float_as_uint(value);
  const uint32_t exponent_field = (bits >> 23) & 0xffu;
  const unsigned long long mantissa = bits & 0x7fffffu;
  if (exponent_field == 0xffu) {
    key = mantissa == 0 ? kBins : kBins + 1;
    square = 1;
  } else {
    key = exponent_field;
    const unsigned long long significand = exponent_field == 0 ? mantissa : (mantissa | 0x800000ull);
    square = significand * significand;
  }
}

// Block b squares elements [b * 2^16, (b+1) * 2^16) into its bins, then writes each bin's
// 64-bit total (and the infinity and NaN counts) to its row of `partials` (kBins + 2 words).
// Each square is added as three 16-bit pieces to 32-bit shared counters of its warp: a warp
// sees 2^13 elements of the block, so a counter stays below 2^29, and 32-bit shared atomics are
// native where 64-bit ones are not. Gradients crowd into a few exponents, so the lanes that
// share lane 0's bin sum their pieces by a warp reduction first and one lane adds them (a warp
// of one exponent: one add); the others add their own. Integer sums, so the same bins whatever
// the order. (Grouping every bin's lanes with a match instruction first took 2.3 times as long
// over GPT-2 small's gradients on an H100, and 8 times as long over values of 16 exponents.)
__global__ void __launch_bounds__(kThreads) partial_bins_kernel(const float* values, int64_t count,
                                                                unsigned long long* partials) {
  __shared__ uint32_t bins[kWarps][kPieces][kBins + 2];
  for (int i = threadIdx.x; i < kWarps * kPieces * (kBins + 2); i += blockDim.x) (&bins[0][0][0])[i] = 0;
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t begin = blockIdx.x * kElementsPerBlock;
  const int64_t end = min(begin + kElementsPerBlock, count);
  const bool aligned = (reinterpret_cast<uintptr_t>(values) & 15) == 0;
  // Four elements a lane a round; the trip count is the block's, so every lane of a warp takes
  // part in each shuffle, vote and reduction.
  for (int64_t round = begin; round < end; round += 4 * kThreads) {
    const int64_t first = round + 4 * static_cast<int64_t>(threadIdx.x);
    float four[4];
    if (aligned && first + 4 <= end) {
      const float4 loaded = *reinterpret_cast<const float4*>(values + first);
      four[0] = loaded.x;
      four[1] = loaded.y;
      four[2] = loaded.z;
      four[3] = loaded.w;
    } else {
      for (int j = 0; j < 4; ++j) four[j] = first + j < end ? values[first + j] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t key = kNoKey;
      unsigned long long square = 0;
      if (first + j < end) bin_and_square(four[j], key, square);
      const uint32_t pieces[kPieces] = {static_cast<uint32_t>(square & 0xffffu),
                                        static_cast<uint32_t>((square >> 16) & 0xffffu),
                                        static_cast<uint32_t>(square >> 32)};
      const uint32_t lane_0_key = __shfl_sync(0xffffffffu, key, 0);
      const unsigned sharing = __ballot_sync(0xffffffffu, key == lane_0_key);
      if (key == lane_0_key) {
        uint32_t sums[kPieces];
        for (int piece = 0; piece < kPieces; ++piece) sums[piece] = __reduce_add_sync(sharing, pieces[piece]);
        if (lane == 0 && key != kNoKey) {
          for (int piece = 0; piece < kPieces; ++piece) atomicAdd(&bins[warp][piece][key], sums[piece]);
        }
      } else if (key != kNoKey) {
        for (int piece = 0; piece < kPieces; ++piece) atomicAdd(&bins[warp][piece][key], pieces[piece]);
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kBins + 2; i += blockDim.x) {
    unsigned long long total = 0;  // below 2^16 squares of less than 2^48
    for (int w = 0; w < kWarps; ++w) {
      total += static_cast<unsigned long long>(bins[w][0][i]) + (static_cast<unsigned long long>(bins[w][1][i]) << 16) +
               (static_cast<unsigned long long>(bins[w][2][i]) << 32);
    }
    partials[blockIdx.x * (kBins + 2) + i] = total;
  }
}

// Block `bin`: the 128-bit sum (low and high words) of every block's partial of the bin, each
// thread over a stride of the blocks, then a tree in shared memory; integer sums with their
// carries, so exact in any order.
constexpr int kFoldThreads = 256;
__global__ void __launch_bounds__(kFoldThreads) fold_bins_kernel(const unsigned long long* partials, int64_t blocks,
                                                                 unsigned long long* low, unsigned long long* high) {
  __shared__ unsigned long long lows[kFoldThreads], highs[kFoldThreads];
  const int bin = blockIdx.x;
  unsigned long long sum_low = 0, sum_high = 0;
  for (int64_t b = threadIdx.x; b < blocks; b += kFoldThreads) {
    const unsigned long long value = partials[b * (kBins + 2) + bin];
    sum_low += value;
    if (sum_low < value) ++sum_high;  // carry
  }
  lows[threadIdx.x] = sum_low;
  highs[threadIdx.x] = sum_high;
  __syncthreads();
  for (int half = kFoldThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      const unsigned long long other = lows[threadIdx.x + half];
      lows[threadIdx.x] += other;
      highs[threadIdx.x] += highs[threadIdx.x + half] + (lows[threadIdx.x] < other ? 1 : 0);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    low[bin] = lows[0];
    high[bin] = highs[0];
  }
}

}  // namespace

DeviceSquareSummer::~DeviceSquareSummer() {
  if (scratch_ != nullptr) cudaFree(scratch_);
}

Status DeviceSquareSummer::add_squares(const float* values, int64_t count, ExactSquareSum& sum, void* stream) {
  if (count < 0) return invalid_argument("device square sum: negative count " + std::to_string(count));
  if (count == 0) return Status();
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  const int64_t blocks = (count + kElementsPerBlock - 1) / kElementsPerBlock;
  const size_t partial_words = static_cast<size_t>(blocks) * (kBins + 2);
  const size_t needed_bytes = (partial_words + 2 * (kBins + 2)) * sizeof(unsigned long long);
  if (needed_bytes > scratch_bytes_) {
    if (scratch_ != nullptr) cudaFree(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    if (cudaMalloc(&scratch_, needed_bytes) != cudaSuccess) {
      scratch_ = nullptr;
      return resource_exhausted("device square sum: cudaMalloc of " + std::to_string(partial_words) + " partial bins");
    }
    scratch_bytes_ = needed_bytes;
  }
  auto* partials = static_cast<unsigned long long*>(scratch_);
  unsigned long long* low = partials + partial_words;
  unsigned long long* high = low + (kBins + 2);
  partial_bins_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, cuda_stream>>>(values, count, partials);
  fold_bins_kernel<<<kBins + 2, kFoldThreads, 0, cuda_stream>>>(partials, blocks, low, high);
  std::vector<unsigned long long> host(2 * (kBins + 2));
  cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) {
    error = cudaMemcpyAsync(host.data(), low, host.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                            cuda_stream);
  }
  if (error == cudaSuccess) error = cudaStreamSynchronize(cuda_stream);
  if (error != cudaSuccess) return internal_error(std::string("device square sum: ") + cudaGetErrorString(error));
  // Into ExactSquareSum's serialized form (little-endian low, high per bin; then the counts).
  std::array<std::byte, ExactSquareSum::kSerializedBytes> bytes{};
  size_t offset = 0;
  auto put_u64 = [&](unsigned long long value) {
    for (int byte = 0; byte < 8; ++byte) bytes[offset++] = static_cast<std::byte>(value >> (8 * byte));
  };
  for (int bin = 0; bin < kBins; ++bin) {
    put_u64(host[static_cast<size_t>(bin)]);
    put_u64(host[static_cast<size_t>(kBins + 2 + bin)]);
  }
  put_u64(host[kBins]);      // infinities (their high word is 0)
  put_u64(host[kBins + 1]);  // NaNs
  sum.merge(ExactSquareSum::deserialize(bytes));
  return Status();
}

Status device_add_squares(const float* values, int64_t count, ExactSquareSum& sum, void* stream) {
  DeviceSquareSummer summer;
  return summer.add_squares(values, count, sum, stream);
}

}  // namespace zerosim
