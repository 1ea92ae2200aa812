#include "core/cuda/device_dataset.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

namespace zerosim {

namespace {

constexpr int kThreads = 256;
// Classes a thread folds side by side (independent sums: the loads of the next feature overlap
// the adds of this one).
constexpr int kClassesPerThread = 4;

__global__ void features_kernel(uint64_t seed, int64_t feature_count, const int64_t* sample_indices, int64_t samples,
                                float* features) {
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < samples * feature_count;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    features[k] = synthetic_feature(seed, sample_indices[k / feature_count], feature_count, k % feature_count);
  }
}

// Whether (score, label) beats (best_score, best_label): a greater score, or an equal one of a
// lower class. Among the classes of one maximal score the lowest wins, in any order of meeting.
__device__ bool beats(float score, int32_t label, float best_score, int32_t best_label) {
  return score > best_score || (score == best_score && label < best_label);
}

// One block per sample: each thread folds its classes' scores, keeps its best, and the block
// reduces the bests.
__global__ void labels_kernel(int64_t feature_count, int64_t class_count, const float* teacher, int64_t samples,
                              const float* features, int32_t* labels) {
  __shared__ float best_scores[kThreads];
  __shared__ int32_t best_labels[kThreads];
  for (int64_t s = blockIdx.x; s < samples; s += gridDim.x) {
    const float* x = features + s * feature_count;
    float best_score = 0.0f;
    int32_t best_label = -1;
    for (int64_t first = threadIdx.x; first < class_count; first += static_cast<int64_t>(blockDim.x) * kClassesPerThread) {
      float scores[kClassesPerThread] = {};
      for (int64_t j = 0; j < feature_count; ++j) {
        const float feature = x[j];
        const float* row = teacher + j * class_count;
#pragma unroll
        for (int u = 0; u < kClassesPerThread; ++u) {
          const int64_t c = first + static_cast<int64_t>(u) * blockDim.x;
          if (c < class_count) scores[u] = __fmaf_rn(feature, row[c], scores[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < kClassesPerThread; ++u) {
        const int64_t c = first + static_cast<int64_t>(u) * blockDim.x;
        if (c < class_count && (best_label < 0 || beats(scores[u], static_cast<int32_t>(c), best_score, best_label))) {
          best_score = scores[u];
          best_label = static_cast<int32_t>(c);
        }
      }
    }
    best_scores[threadIdx.x] = best_score;
    best_labels[threadIdx.x] = best_label;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) {
        const int32_t other = best_labels[threadIdx.x + half];
        if (other >= 0 && (best_labels[threadIdx.x] < 0 ||
                           beats(best_scores[threadIdx.x + half], other, best_scores[threadIdx.x], best_labels[threadIdx.x]))) {
          best_scores[threadIdx.x] = best_scores[threadIdx.x + half];
          best_labels[threadIdx.x] = other;
        }
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) labels[s] = best_labels[0];
    __syncthreads();  // the next sample reuses the shared bests
  }
}

Status launched(const char* kernel) {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return Status();
  return internal_error(std::string("device dataset: ") + kernel + ": " + cudaGetErrorString(error));
}

}  // namespace

Status device_synthetic_batch(const DatasetSpec& spec, const float* teacher, const int64_t* sample_indices,
                              int64_t samples, float* features, int32_t* labels, void* stream) {
  if (samples < 0 || spec.feature_count <= 0 || spec.class_count < 2 || spec.class_count > INT32_MAX) {
    return invalid_argument("device dataset: " + std::to_string(samples) + " samples of " +
                            std::to_string(spec.feature_count) + " features and " + std::to_string(spec.class_count) +
                            " classes");
  }
  if (samples == 0) return Status();
  const cudaStream_t on = static_cast<cudaStream_t>(stream);
  const int64_t elements = samples * spec.feature_count;
  const int feature_blocks = static_cast<int>(std::min<int64_t>((elements + kThreads - 1) / kThreads, 65535));
  features_kernel<<<feature_blocks, kThreads, 0, on>>>(spec.seed, spec.feature_count, sample_indices, samples, features);
  ZEROSIM_RETURN_IF_ERROR(launched("features"));
  labels_kernel<<<static_cast<int>(std::min<int64_t>(samples, 65535)), kThreads, 0, on>>>(
      spec.feature_count, spec.class_count, teacher, samples, features, labels);
  return launched("labels");
}

}  // namespace zerosim
