// One growable device allocation, for the CUDA backend's scratch: reserve() grows it (the
// contents are not kept across growth) and it is freed with its owner. Host code: included by
// .cu and .cpp files of the CUDA backend alike.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

namespace zerosim {

class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray() {
    if (pointer_ != nullptr) cudaFree(pointer_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& other) noexcept
      : pointer_(std::exchange(other.pointer_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

  // At least `bytes` (at least 1), on the current device.
  cudaError_t reserve(size_t bytes) {
    if (bytes <= bytes_ && pointer_ != nullptr) return cudaSuccess;
    if (pointer_ != nullptr) cudaFree(pointer_);
    pointer_ = nullptr;
    bytes_ = 0;
    const size_t wanted = bytes > 0 ? bytes : 1;
    const cudaError_t error = cudaMalloc(&pointer_, wanted);
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

// One growable page-locked host allocation (cudaHostAlloc), so that copies to and from the
// device run asynchronously at the link's speed. Same contract as DeviceArray; freeing waits
// for nothing, so its owner makes sure no queued copy still uses it.
class PinnedHostArray {
 public:
  PinnedHostArray() = default;
  ~PinnedHostArray() {
    if (pointer_ != nullptr) cudaFreeHost(pointer_);
  }
  PinnedHostArray(const PinnedHostArray&) = delete;
  PinnedHostArray& operator=(const PinnedHostArray&) = delete;

  cudaError_t reserve(size_t bytes) {
    if (bytes <= bytes_ && pointer_ != nullptr) return cudaSuccess;
    if (pointer_ != nullptr) cudaFreeHost(pointer_);
    pointer_ = nullptr;
    bytes_ = 0;
    const size_t wanted = bytes > 0 ? bytes : 1;
    const cudaError_t error = cudaHostAlloc(&pointer_, wanted, cudaHostAllocDefault);
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

}  // namespace zerosim
