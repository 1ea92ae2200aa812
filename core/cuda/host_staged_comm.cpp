// make_host_staged_comm (nccl_comm.h): host buffers staged through device scratch around a
// device-memory communicator. Host code, compiled by the C++ compiler.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <utility>

#include "core/cuda/device_array.h"
#include "core/cuda/nccl_comm.h"

namespace zerosim {

namespace {

class HostStagedComm final : public Comm {
 public:
  HostStagedComm(std::unique_ptr<Comm> device_comm, int device) : inner_(std::move(device_comm)), device_(device) {}
  ~HostStagedComm() override { cudaSetDevice(device_); }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }

  Status all_gather(std::span<const std::byte> send, std::span<std::byte> receive) override {
    ZEROSIM_RETURN_IF_ERROR(reserve(send.size() + receive.size()));
    std::byte* device_send = scratch_;
    std::byte* device_receive = scratch_ + send.size();
    ZEROSIM_RETURN_IF_ERROR(copy(device_send, send.data(), send.size(), cudaMemcpyHostToDevice));
    ZEROSIM_RETURN_IF_ERROR(inner_->all_gather({device_send, send.size()}, {device_receive, receive.size()}));
    return copy(receive.data(), device_receive, receive.size(), cudaMemcpyDeviceToHost);
  }

  Status gather(std::span<const std::byte> send, std::span<std::byte> receive, int root_rank) override {
    ZEROSIM_RETURN_IF_ERROR(reserve(send.size() + receive.size()));
    std::byte* device_send = scratch_;
    std::byte* device_receive = scratch_ + send.size();
    ZEROSIM_RETURN_IF_ERROR(copy(device_send, send.data(), send.size(), cudaMemcpyHostToDevice));
    ZEROSIM_RETURN_IF_ERROR(inner_->gather({device_send, send.size()}, {device_receive, receive.size()}, root_rank));
    return copy(receive.data(), device_receive, receive.size(), cudaMemcpyDeviceToHost);
  }

  Status reduce_scatter_accumulate(std::span<const std::byte> send, DType dtype, size_t chunk_element_count,
                                   std::span<float> accumulator) override {
    const size_t accumulator_bytes = accumulator.size_bytes();
    // The accumulator first: the scratch's start is aligned, which the fold's vector path wants.
    ZEROSIM_RETURN_IF_ERROR(reserve(accumulator_bytes + 16 + send.size()));
    float* device_accumulator = reinterpret_cast<float*>(scratch_);
    std::byte* device_send = scratch_ + ((accumulator_bytes + 15) / 16) * 16;
    ZEROSIM_RETURN_IF_ERROR(copy(device_send, send.data(), send.size(), cudaMemcpyHostToDevice));
    ZEROSIM_RETURN_IF_ERROR(copy(device_accumulator, accumulator.data(), accumulator_bytes, cudaMemcpyHostToDevice));
    ZEROSIM_RETURN_IF_ERROR(inner_->reduce_scatter_accumulate({device_send, send.size()}, dtype, chunk_element_count,
                                                              {device_accumulator, accumulator.size()}));
    return copy(accumulator.data(), device_accumulator, accumulator_bytes, cudaMemcpyDeviceToHost);
  }

  // The scalar collectives already take host values.
  Status all_reduce_max(std::span<double> values) override { return inner_->all_reduce_max(values); }
  Status barrier() override { return inner_->barrier(); }

  Status broadcast(std::span<std::byte> buffer, int root_rank) override {
    ZEROSIM_RETURN_IF_ERROR(reserve(buffer.size()));
    ZEROSIM_RETURN_IF_ERROR(copy(scratch_, buffer.data(), buffer.size(), cudaMemcpyHostToDevice));
    ZEROSIM_RETURN_IF_ERROR(inner_->broadcast({scratch_, buffer.size()}, root_rank));
    return copy(buffer.data(), scratch_, buffer.size(), cudaMemcpyDeviceToHost);
  }

 private:
  // Selects the device and makes room; scratch_ points at the staging memory afterwards.
  Status reserve(size_t bytes) {
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaSetDevice", cudaSetDevice(device_)));
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaMalloc (staging)", staging_.reserve(bytes)));
    scratch_ = staging_.as<std::byte>();
    return Status();
  }
  Status copy(void* destination, const void* source, size_t bytes, cudaMemcpyKind kind) const {
    if (bytes == 0) return Status();
    return cuda(kind == cudaMemcpyHostToDevice ? "cudaMemcpy (stage in)" : "cudaMemcpy (stage out)",
                cudaMemcpy(destination, source, bytes, kind));
  }
  Status cuda(const char* call, cudaError_t error) const {
    if (error == cudaSuccess) return Status();
    return internal_error("rank " + std::to_string(inner_->rank()) + " (GPU " + std::to_string(device_) + "): " + call +
                          ": " + cudaGetErrorString(error));
  }

  std::unique_ptr<Comm> inner_;
  int device_;
  DeviceArray staging_;
  std::byte* scratch_ = nullptr;  // staging_'s memory, after reserve()
};

}  // namespace

Result<std::unique_ptr<Comm>> make_host_staged_comm(std::unique_ptr<Comm> device_comm, int device) {
  if (device_comm == nullptr) return invalid_argument("host-staged comm: no device communicator");
  return Result<std::unique_ptr<Comm>>(std::unique_ptr<Comm>(new HostStagedComm(std::move(device_comm), device)));
}

}  // namespace zerosim
