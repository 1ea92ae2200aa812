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

// Block b squares elements [b * 2^16, (b+1) * 2^16) into 64-bit bins, then writes them (and
// its infinity and NaN counts) to its row of `partials` (kBins + 2 words). Gradients crowd into
// a few exponents, so a shared atomic per element would queue on those bins: instead the lanes
// of a warp that share a bin (match_any) sum their squares first (as two 24-bit halves, whose
// sums of at most 32 fit 32 bits), and one lane adds the total into its warp's own bins.
__global__ void __launch_bounds__(kThreads) partial_bins_kernel(const float* values, int64_t count,
                                                                unsigned long long* partials) {
  __shared__ unsigned long long bins[kWarps][kBins + 2];
  for (int i = threadIdx.x; i < kWarps * (kBins + 2); i += blockDim.x) bins[i / (kBins + 2)][i % (kBins + 2)] = 0;
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t begin = blockIdx.x * kElementsPerBlock;
  const int64_t end = min(begin + kElementsPerBlock, count);
  // The trip count is the block's, so every lane of a warp takes part in each match and sum.
  for (int64_t base = begin; base < end; base += blockDim.x) {
    const int64_t k = base + threadIdx.x;
    uint32_t key = kNoKey;
    unsigned long long square = 0;
    if (k < end) {
      const uint32_t bits = __float_as_uint(values[k]);
      const uint32_t exponent_field = (bits >> 23) & 0xffu;
      const unsigned long long mantissa = bits & 0x7fffffu;
      if (exponent_field == 0xffu) {
        key = mantissa == 0 ? kBins : kBins + 1;  // an infinity or a NaN: counted
        square = 1;
      } else {
        key = exponent_field;
        const unsigned long long significand = exponent_field == 0 ? mantissa : (mantissa | 0x800000ull);
        square = significand * significand;
      }
    }
    const unsigned peers = __match_any_sync(0xffffffffu, key);
    const unsigned low = __reduce_add_sync(peers, static_cast<unsigned>(square & 0xffffffull));
    const unsigned high = __reduce_add_sync(peers, static_cast<unsigned>(square >> 24));
    if (key != kNoKey && lane == __ffs(peers) - 1) {
      atomicAdd(&bins[warp][key], (static_cast<unsigned long long>(high) << 24) + low);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kBins + 2; i += blockDim.x) {
    unsigned long long total = 0;
    for (int w = 0; w < kWarps; ++w) total += bins[w][i];
    partials[blockIdx.x * (kBins + 2) + i] = total;
  }
}

// One thread per bin: the 128-bit sum of every block's partial (low and high words), and the
// two counts.
__global__ void fold_bins_kernel(const unsigned long long* partials, int64_t blocks, unsigned long long* low,
                                 unsigned long long* high) {
  const int bin = blockIdx.x * blockDim.x + threadIdx.x;
  if (bin >= kBins + 2) return;
  unsigned long long sum_low = 0, sum_high = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const unsigned long long value = partials[b * (kBins + 2) + bin];
    sum_low += value;
    if (sum_low < value) ++sum_high;  // carry
  }
  low[bin] = sum_low;
  high[bin] = sum_high;
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
  fold_bins_kernel<<<1, 288, 0, cuda_stream>>>(partials, blocks, low, high);
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
