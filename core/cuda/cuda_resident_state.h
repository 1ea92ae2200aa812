// ResidentState (core/engine/compute_backend.h) on a CUDA device: the rank's flat partitions
// (16-bit parameters, fp32 master, moments and gradient accumulator) in device memory, the
// norm's exact bins, AdamW and the parameter casts by the kernels that already hold the CPU's
// bits (device_cast.h, device_square_sum.h, device_adamw.h).
//
// The ranks of a world share memory when they are threads of one process on one device (W
// ranks on one GPU): each reads the others' buffers directly. A gather casts every rank's
// 16-bit partition into the full tensor; a layer's exchange publishes each rank's full
// gradient pointers (one all-gather of addresses over the host Comm), and each owner folds the
// W chunks of its partition in rank order, each rounded through the communication dtype, into
// its accumulator. Ordering: a rank of a larger world synchronizes its stream before it publishes
// and before the barrier that ends a collective, so no rank reads a buffer being written or
// overwrites one being read (a world of one has no reader, and stream order suffices: it waits once per micro-step, at
// its last exchange); end_step does the same for the partitions the optimizer step rewrote. Ranks in
// other processes or on other devices are refused at adopt (the host path serves them).
//
// Lifetime: the buffers other ranks read (the 16-bit partitions, the full gradients) are owned
// jointly by every rank of the world from adopt on (each owner hands each reader a share through
// a heap handle the reader deletes), and each rank waits for its stream before it lets go of
// them: a rank that fails and is destroyed mid-step cannot free memory that a peer's queued
// gather or fold still reads.
//
// The offloaded optimizer's placement (adopt given no master or moments): the 16-bit partitions
// and the accumulator only; gradients_on_host and parameters_from_host are the sub-group copies.
// The gradients go down into two pinned staging buffers of the largest sub-group's size, in
// turn: while the host steps one sub-group from one buffer, the next sub-group's copy fills the
// other (asked for by the previous call; forgotten when the accumulator changes or the step ends).
//
// Memory: the partitions, one gathered stage's fp32 weights (slots reused across stages), and a
// full fp32 gradient per parameter, allocated at first use and kept (a world of one holds the
// whole model's gradients anyway, in its accumulator).
// Host code, included by the CUDA backend's .cu files only.
#pragma once

#include <memory>
#include <vector>

#include "core/cuda/cuda_backend_base.h"
#include "core/cuda/device_array.h"
#include "core/cuda/device_cast.h"
#include "core/cuda/device_square_sum.h"

namespace zerosim {

class CudaResidentState final : public ResidentState {
 public:
  explicit CudaResidentState(CudaBackendBase& backend);
  ~CudaResidentState() override;
  CudaResidentState(const CudaResidentState&) = delete;
  CudaResidentState& operator=(const CudaResidentState&) = delete;

  Result<bool> adopt(Comm& comm, const PartitionLayout& layout, DType model_dtype, DType communication_dtype,
                     std::span<const std::byte> params, std::span<const float> master, std::span<const float> exp_avg,
                     std::span<const float> exp_avg_sq) override;
  Status copy_to_host(std::span<std::byte> params, std::span<float> master, std::span<float> exp_avg,
                      std::span<float> exp_avg_sq) override;
  Status forward(int64_t stage, ParameterRange gathered) override;
  Status backward(int64_t stage, ParameterRange gathered, ParameterRange gradients,
                  std::span<const uint8_t> fresh) override;
  Status reduce_layer(const LayerRange& layer) override;
  Result<ExactSquareSum> gradient_squares() override;
  Status adam_update(const AdamStepScalars& scalars, float grad_multiplier, size_t offset, size_t count) override;
  Status store_parameters(size_t offset, size_t count) override;
  Result<std::span<const float>> gradients_on_host(size_t offset, size_t count, size_t next_offset,
                                                   size_t next_count) override;
  Status parameters_from_host(size_t offset, std::span<const std::byte> params) override;
  Status zero_gradients() override;
  Status end_step() override;

 private:
  // What other ranks of the world read, kept alive by every rank that may read it.
  struct PeerVisible {
    DeviceArray params;                       // the 16-bit partitions
    std::vector<DeviceArray> full_gradients;  // by parameter
  };

  // Casts the 16-bit partitions of `range` into the gathered slots; their device pointers.
  Status gather(ParameterRange range);
  Status synchronize(const char* what);

  CudaBackendBase& backend_;
  Comm* comm_ = nullptr;
  std::vector<const std::byte*> peer_params_;  // every rank's 16-bit partitions, by rank
  PartitionLayout layout_;
  DType model_dtype_ = DType::kFp32;
  DType communication_dtype_ = DType::kFp32;
  bool adopted_ = false;
  bool holds_optimizer_ = false;  // master and moments too (the optimizer is not offloaded)
  std::shared_ptr<PeerVisible> mine_;
  std::vector<std::shared_ptr<PeerVisible>> peers_;  // every rank's (this one's included), by rank
  DeviceArray master_, exp_avg_, exp_avg_sq_, accumulator_;
  std::vector<DeviceArray> gathered_;  // one stage's full fp32 weights, by slot
  std::vector<const float*> gathered_pointers_;
  std::vector<DeviceWidening> widenings_;  // a gather's casts, one launch for many
  DeviceSquareSummer squares_;

  // The offloaded placement's gradient staging (see above).
  struct GradientStaging {
    PinnedHostArray host;
    cudaEvent_t copied = nullptr;  // recorded behind the copy into `host`
    size_t offset = 0, count = 0;  // the range the last copy into it holds
  };
  // Queues the copy of [offset, offset + count) into staging_[slot].
  Status stage_gradients(int slot, size_t offset, size_t count);
  // The accumulator changed (or the step ended): a staged range is no longer its contents.
  void forget_staged_gradients() { prefetched_slot_ = -1; }
  GradientStaging staging_[2];
  size_t staging_capacity_ = 0;  // elements per buffer
  int prefetched_slot_ = -1;     // the slot a previous call's prefetch fills, or -1
  int returned_slot_ = 1;        // the slot the last call returned
};

}  // namespace zerosim
