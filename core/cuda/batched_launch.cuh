// One launch for several independent element-wise jobs (a layer's tensors): job j owns the
// blocks [block_start[j], block_start[j + 1]) of a one-dimensional grid and grid-strides over its
// elements with them. A dozen small launches cost more in launch latency than in memory traffic;
// the jobs' element loops are unchanged, so their results are each single launch's bits.
#pragma once

#include <cstdint>

namespace zerosim {

// Blocks a job gets: one per `threads` elements, at most kMaxBlocksPerBatchedJob (the
// grid-stride loop does the rest).
inline constexpr int64_t kMaxBlocksPerBatchedJob = 2048;

inline int batched_job_blocks(int64_t element_count, int threads) {
  const int64_t blocks = (element_count + threads - 1) / threads;
  return static_cast<int>(blocks < kMaxBlocksPerBatchedJob ? blocks : kMaxBlocksPerBatchedJob);
}

// This block's job, its first element and the stride of its grid-stride loop.
struct BatchedSlice {
  int job;
  int64_t first;
  int64_t stride;
};

__device__ inline BatchedSlice batched_slice(const int* block_start, int jobs) {
  int job = 0;
  while (job + 1 < jobs && static_cast<int>(blockIdx.x) >= block_start[job + 1]) ++job;
  const int64_t first_block = blockIdx.x - block_start[job];
  return BatchedSlice{job, first_block * blockDim.x + threadIdx.x,
                      static_cast<int64_t>(block_start[job + 1] - block_start[job]) * blockDim.x};
}

}  // namespace zerosim
