// Growable CUDA allocations, for the CUDA backend's scratch: reserve() grows one (the contents
// are not kept across growth) and it is freed with its owner. DeviceArray is device memory
// (cudaMalloc); PinnedHostArray is page-locked host memory (cudaHostAlloc), so that copies to
// and from the device run asynchronously at the link's speed. Freeing waits for nothing: the
// owner makes sure no queued kernel or copy still uses the memory. Host code: included by .cu
// and .cpp files of the CUDA backend alike.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

namespace zerosim {

namespace cuda_allocation {
inline cudaError_t device_allocate(void** pointer, size_t bytes) { return cudaMalloc(pointer, bytes); }
inline cudaError_t pinned_allocate(void** pointer, size_t bytes) {
  return cudaHostAlloc(pointer, bytes, cudaHostAllocDefault);
}
}  // namespace cuda_allocation

template <cudaError_t (*Allocate)(void**, size_t), cudaError_t (*Free)(void*)>
class CudaAllocation {
 public:
  CudaAllocation() = default;
  ~CudaAllocation() {
    if (pointer_ != nullptr) Free(pointer_);
  }
  CudaAllocation(const CudaAllocation&) = delete;
  CudaAllocation& operator=(const CudaAllocation&) = delete;
  CudaAllocation(CudaAllocation&& other) noexcept
      : pointer_(std::exchange(other.pointer_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

  // At least `bytes` (at least 1); device memory is on the current device.
  cudaError_t reserve(size_t bytes) {
    if (bytes <= bytes_ && pointer_ != nullptr) return cudaSuccess;
    if (pointer_ != nullptr) Free(pointer_);
    pointer_ = nullptr;
    bytes_ = 0;
    const size_t wanted = bytes > 0 ? bytes : 1;
    const cudaError_t error = Allocate(&pointer_, wanted);
    if (error == cudaSuccess) bytes_ = wanted;
    return error;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(pointer_);
  }

 private:
  void* pointer_ = nullptr;
  size_t bytes_ = 0;
};

using DeviceArray = CudaAllocation<cuda_allocation::device_allocate, cudaFree>;
using PinnedHostArray = CudaAllocation<cuda_allocation::pinned_allocate, cudaFreeHost>;

}  // namespace zerosim
