#include "core/cuda/cuda_resident_state.h"

#include <cuda_runtime.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "core/cuda/batched_launch.cuh"
#include "core/cuda/device_adamw.h"
#include "core/cuda/device_cast.h"
#include "core/cuda/device_square_sum.h"
#include "core/tensor/dtype_bits.h"

namespace zerosim {

namespace {

constexpr int kThreads = 256;

constexpr int kMaxSources = 64;

// The value a communication dtype carries for `value` (the host's cast_from_fp32 then
// cast_to_fp32: the same integer functions).
__device__ float through_dtype(int dtype, float value) {
  if (dtype == static_cast<int>(DType::kFp32)) return value;
  const uint32_t bits = __float_as_uint(value);
  const uint32_t widened = dtype == static_cast<int>(DType::kFp16) ? fp16_bits_to_fp32_bits(fp32_bits_to_fp16_bits(bits))
                                                                   : bf16_bits_to_fp32_bits(fp32_bits_to_bf16_bits(bits));
  return __uint_as_float(widened);
}

// Several parameters' folds in one launch (a layer's dozen parameters, one launch apiece, cost
// more in launch latency than in memory traffic). Fold f's accumulator[k] becomes
// accumulator[k] + chunk_0[k] + chunk_1[k] + ..., left to right, each chunk's value through the
// communication dtype (ThreadComm's reduce_scatter_accumulate), its world_size chunks at
// chunks[f * world_size ...] (batched_launch.cuh). The chunk table bounds the folds a launch holds:
// kFoldChunks / world_size, 6 at the largest world (the whole struct stays within the 4 KiB a
// kernel's arguments may take).
constexpr int kFoldsPerLaunch = 8;
constexpr int kFoldChunks = 6 * kMaxSources;
struct FoldBatch {
  float* accumulator[kFoldsPerLaunch];
  int64_t count[kFoldsPerLaunch];
  int block_start[kFoldsPerLaunch + 1];
  int folds;
  int world_size;
  const float* chunks[kFoldChunks];
};
static_assert(sizeof(FoldBatch) <= 4096, "a kernel's arguments take at most 4 KiB");

__global__ void fold_chunks_batch_kernel(int dtype, FoldBatch batch) {
  const auto [fold, first, stride] = batched_slice(batch.block_start, batch.folds);
  const int64_t count = batch.count[fold];
  float* accumulator = batch.accumulator[fold];
  const float* const* chunks = batch.chunks + fold * batch.world_size;
  for (int64_t k = first; k < count; k += stride) {
    float sum = accumulator[k];
    for (int s = 0; s < batch.world_size; ++s) sum = __fadd_rn(sum, through_dtype(dtype, chunks[s][k]));
    accumulator[k] = sum;
  }
}

}  // namespace

CudaResidentState::CudaResidentState(CudaBackendBase& backend)
    : backend_(backend), mine_(std::make_shared<PeerVisible>()) {}

CudaResidentState::~CudaResidentState() {
  // Nothing this rank queued may still read a peer's buffers when it lets go of them.
  cudaSetDevice(backend_.device_);
  if (backend_.stream_ != nullptr) cudaStreamSynchronize(backend_.stream_);
  peers_.clear();
  for (GradientStaging& staging : staging_) {
    if (staging.copied != nullptr) cudaEventDestroy(staging.copied);
  }
}

Result<bool> CudaResidentState::adopt(Comm& comm, const PartitionLayout& layout, DType model_dtype,
                                      DType communication_dtype, std::span<const std::byte> params,
                                      std::span<const float> master, std::span<const float> exp_avg,
                                      std::span<const float> exp_avg_sq) {
  ZEROSIM_CHECK(layout.world_size == comm.world_size(), "the layout is the world's");
  const size_t count = static_cast<size_t>(layout.flat_element_count);
  const bool holds_optimizer = !master.empty();
  ZEROSIM_CHECK(params.size() == count * dtype_size_bytes(model_dtype) &&
                    (holds_optimizer ? master.size() == count && exp_avg.size() == count && exp_avg_sq.size() == count
                                     : master.empty() && exp_avg.empty() && exp_avg_sq.empty()),
                "the partitions match the layout");
  // Who may read whose memory: the same process and the same device, for every rank. Asked
  // before anything is allocated, so that a refusal costs no device memory.
  struct Identity {
    int64_t process;
    int64_t device;
  };
  const Identity me{static_cast<int64_t>(::getpid()), backend_.device_};
  std::vector<Identity> everyone(static_cast<size_t>(comm.world_size()));
  ZEROSIM_RETURN_IF_ERROR(comm.all_gather(std::as_bytes(std::span<const Identity>(&me, 1)),
                                          std::as_writable_bytes(std::span<Identity>(everyone))));
  bool shared = comm.world_size() <= kMaxSources;
  for (const Identity& rank : everyone) shared = shared && rank.process == me.process && rank.device == me.device;
  if (!shared) {
    adopted_ = false;
    return false;
  }

  layout_ = layout;
  model_dtype_ = model_dtype;
  communication_dtype_ = communication_dtype;
  holds_optimizer_ = holds_optimizer;
  ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaSetDevice", cudaSetDevice(backend_.device_)));
  struct Copy {
    DeviceArray* array;
    const void* source;
    size_t bytes;
  };
  for (const Copy& copy : {Copy{&mine_->params, params.data(), params.size()},
                           Copy{&master_, master.data(), master.size_bytes()},
                           Copy{&exp_avg_, exp_avg.data(), exp_avg.size_bytes()},
                           Copy{&exp_avg_sq_, exp_avg_sq.data(), exp_avg_sq.size_bytes()}}) {
    if (copy.bytes == 0) continue;
    ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaMalloc (resident partitions)", copy.array->reserve(copy.bytes)));
    ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaMemcpyAsync (resident partitions in)",
                                          cudaMemcpyAsync(copy.array->as<void>(), copy.source, copy.bytes,
                                                          cudaMemcpyHostToDevice, backend_.stream_)));
  }
  ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaMalloc (gradient accumulator)", accumulator_.reserve(count * sizeof(float))));
  mine_->full_gradients.resize(layout.parameters.size());
  comm_ = &comm;
  adopted_ = true;
  ZEROSIM_RETURN_IF_ERROR(zero_gradients());
  ZEROSIM_RETURN_IF_ERROR(synchronize("cudaStreamSynchronize (resident partitions in)"));
  // Every rank hands every rank a share of its readable buffers: one heap handle per reader,
  // made before the exchange and deleted by its reader, so that taking a share never reads
  // memory its owner may already have freed (a world aborted right after the exchange lets a
  // fast rank unwind while a slow one is still taking). A handle a failed world never delivers
  // stays allocated, with the buffers it holds, until the process ends: leaked, never freed
  // under a reader.
  const size_t world_size = static_cast<size_t>(comm.world_size());
  std::vector<std::shared_ptr<PeerVisible>*> handles(world_size);
  for (auto& handle : handles) handle = new std::shared_ptr<PeerVisible>(mine_);
  std::vector<std::shared_ptr<PeerVisible>*> received(world_size * world_size);
  ZEROSIM_RETURN_IF_ERROR(comm.all_gather(std::as_bytes(std::span<std::shared_ptr<PeerVisible>* const>(handles)),
                                          std::as_writable_bytes(std::span<std::shared_ptr<PeerVisible>*>(received))));
  peers_.clear();
  peer_params_.clear();
  for (size_t owner = 0; owner < world_size; ++owner) {
    const std::unique_ptr<std::shared_ptr<PeerVisible>> handle(received[owner * world_size + static_cast<size_t>(comm.rank())]);
    peers_.push_back(std::move(*handle));
    peer_params_.push_back(peers_.back()->params.as<std::byte>());
  }
  return true;
}

Status CudaResidentState::copy_to_host(std::span<std::byte> params, std::span<float> master, std::span<float> exp_avg,
                                       std::span<float> exp_avg_sq) {
  ZEROSIM_CHECK(adopted_, "partitions adopted before they are copied back");
  ZEROSIM_CHECK(holds_optimizer_ || (master.empty() && exp_avg.empty() && exp_avg_sq.empty()),
                "the optimizer's state is copied back only from where it is kept");
  ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaSetDevice", cudaSetDevice(backend_.device_)));
  struct Copy {
    void* destination;
    const DeviceArray* array;
    size_t bytes;
  };
  for (const Copy& copy : {Copy{params.data(), &mine_->params, params.size()},
                           Copy{master.data(), &master_, master.size_bytes()},
                           Copy{exp_avg.data(), &exp_avg_, exp_avg.size_bytes()},
                           Copy{exp_avg_sq.data(), &exp_avg_sq_, exp_avg_sq.size_bytes()}}) {
    if (copy.bytes == 0) continue;
    ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaMemcpyAsync (resident partitions out)",
                                          cudaMemcpyAsync(copy.destination, copy.array->as<void>(), copy.bytes,
                                                          cudaMemcpyDeviceToHost, backend_.stream_)));
  }
  return synchronize("cudaStreamSynchronize (resident partitions out)");
}

Status CudaResidentState::gather(ParameterRange range) {
  const size_t slots = static_cast<size_t>(range.size());
  if (gathered_.size() < slots) gathered_.resize(slots);
  gathered_pointers_.resize(slots);
  const size_t element_bytes = dtype_size_bytes(model_dtype_);
  widenings_.clear();
  for (int64_t p = range.first; p < range.end; ++p) {
    const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
    DeviceArray& slot = gathered_[static_cast<size_t>(p - range.first)];
    ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaMalloc (gathered weights)",
                                          slot.reserve(static_cast<size_t>(partition.element_count) * sizeof(float))));
    // Every rank's owned elements, cast from its 16-bit partition where they sit in the tensor.
    for (int source = 0; source < layout_.world_size; ++source) {
      const int64_t owned = partition.owned_count(source);
      if (owned == 0) continue;
      widenings_.push_back(DeviceWidening{
          peer_params_[static_cast<size_t>(source)] + static_cast<size_t>(partition.flat_offset) * element_bytes,
          slot.as<float>() + partition.owned_begin(source), owned});
    }
    gathered_pointers_[static_cast<size_t>(p - range.first)] = slot.as<float>();
  }
  return device_cast_to_fp32_batch(model_dtype_, widenings_, backend_.stream_);
}

Status CudaResidentState::forward(int64_t stage, ParameterRange gathered) {
  ZEROSIM_CHECK(adopted_, "partitions adopted before a step");
  ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaSetDevice", cudaSetDevice(backend_.device_)));
  ZEROSIM_RETURN_IF_ERROR(gather(gathered));
  return backend_.forward_on_device(stage, gathered_pointers_);
}

Status CudaResidentState::backward(int64_t stage, ParameterRange gathered, ParameterRange gradients,
                                   std::span<const uint8_t> fresh) {
  ZEROSIM_CHECK(adopted_, "partitions adopted before a step");
  ZEROSIM_CHECK(fresh.size() == static_cast<size_t>(gradients.size()), "one fresh flag per gradient");
  ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaSetDevice", cudaSetDevice(backend_.device_)));
  ZEROSIM_RETURN_IF_ERROR(gather(gathered));
  std::vector<float*> pointers;
  for (int64_t p = gradients.first; p < gradients.end; ++p) {
    const size_t bytes = static_cast<size_t>(layout_.parameters[static_cast<size_t>(p)].element_count) * sizeof(float);
    DeviceArray& gradient = mine_->full_gradients[static_cast<size_t>(p)];
    ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaMalloc (full gradient)", gradient.reserve(bytes)));
    if (fresh[static_cast<size_t>(p - gradients.first)]) {
      ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaMemsetAsync (full gradient)",
                                            cudaMemsetAsync(gradient.as<void>(), 0, bytes, backend_.stream_)));
    }
    pointers.push_back(gradient.as<float>());
  }
  return backend_.backward_on_device(stage, gathered_pointers_, pointers);
}

Status CudaResidentState::reduce_layer(const LayerRange& layer) {
  forget_staged_gradients();
  ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaSetDevice", cudaSetDevice(backend_.device_)));
  const int world_size = layout_.world_size;
  const int rank = comm_->rank();
  // Publish this rank's full gradients of the layer, complete, by address.
  std::vector<const float*> mine;
  for (int64_t p = layer.first_parameter; p < layer.end_parameter; ++p) {
    const float* gradient = mine_->full_gradients[static_cast<size_t>(p)].as<float>();
    ZEROSIM_CHECK(gradient != nullptr || layout_.parameters[static_cast<size_t>(p)].element_count == 0,
                  "a layer's gradients exist before its exchange");
    mine.push_back(gradient);
  }
  // Other ranks read what is published only once it is complete; a world of one has no reader,
  // and its own fold follows its gradients on the stream, so it keeps the stream going.
  if (world_size > 1) ZEROSIM_RETURN_IF_ERROR(synchronize("cudaStreamSynchronize (layer gradients complete)"));
  std::vector<const float*> everyone(mine.size() * static_cast<size_t>(world_size));
  ZEROSIM_RETURN_IF_ERROR(comm_->all_gather(std::as_bytes(std::span<const float* const>(mine)),
                                            std::as_writable_bytes(std::span<const float*>(everyone))));
  const int folds_per_launch = std::min(kFoldsPerLaunch, kFoldChunks / world_size);
  FoldBatch batch{};
  auto launch = [&]() -> Status {
    if (batch.folds == 0) return Status();
    batch.world_size = world_size;
    fold_chunks_batch_kernel<<<batch.block_start[batch.folds], kThreads, 0, backend_.stream_>>>(
        static_cast<int>(communication_dtype_), batch);
    batch = FoldBatch{};
    return backend_.cuda("fold_chunks_batch_kernel", cudaGetLastError());
  };
  for (int64_t p = layer.first_parameter; p < layer.end_parameter; ++p) {
    const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
    const int64_t owned = partition.owned_count(rank);
    if (owned == 0) continue;  // padding: the host path adds zeros there
    const int fold = batch.folds++;
    batch.accumulator[fold] = accumulator_.as<float>() + partition.flat_offset;
    batch.count[fold] = owned;
    batch.block_start[fold + 1] = batch.block_start[fold] + batched_job_blocks(owned, kThreads);
    for (int source = 0; source < world_size; ++source) {
      batch.chunks[fold * world_size + source] =
          everyone[static_cast<size_t>(source) * mine.size() + static_cast<size_t>(p - layer.first_parameter)] +
          partition.owned_begin(rank);
    }
    if (batch.folds == folds_per_launch) ZEROSIM_RETURN_IF_ERROR(launch());
  }
  ZEROSIM_RETURN_IF_ERROR(launch());
  // No rank may write its gradients again (the next micro-step) while another reads them. A
  // world of one waits once, at the micro-step's last exchange (the layer that holds parameter
  // 0 completes last), so that the step's backward phase holds its own device work.
  if (world_size > 1 || layer.first_parameter == 0) {
    ZEROSIM_RETURN_IF_ERROR(synchronize("cudaStreamSynchronize (layer exchange)"));
  }
  return comm_->barrier();
}

Result<ExactSquareSum> CudaResidentState::gradient_squares() {
  ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaSetDevice", cudaSetDevice(backend_.device_)));
  ExactSquareSum sum;
  ZEROSIM_RETURN_IF_ERROR(squares_.add_squares(accumulator_.as<float>(), layout_.flat_element_count, sum, backend_.stream_));
  return sum;
}

Status CudaResidentState::adam_update(const AdamStepScalars& scalars, float grad_multiplier, size_t offset,
                                      size_t count) {
  ZEROSIM_CHECK(holds_optimizer_, "AdamW on the device only where the optimizer's state is kept");
  if (count == 0) return Status();
  ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaSetDevice", cudaSetDevice(backend_.device_)));
  const DeviceAdamTensor tensor{master_.as<float>() + offset, accumulator_.as<float>() + offset,
                                exp_avg_.as<float>() + offset, exp_avg_sq_.as<float>() + offset,
                                static_cast<int64_t>(count)};
  return device_adam_update(scalars, grad_multiplier, std::span<const DeviceAdamTensor>(&tensor, 1), backend_.stream_);
}

Status CudaResidentState::store_parameters(size_t offset, size_t count) {
  ZEROSIM_CHECK(holds_optimizer_, "16-bit parameters from a master kept on the device");
  if (count == 0) return Status();
  ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaSetDevice", cudaSetDevice(backend_.device_)));
  return device_cast_from_fp32(model_dtype_, master_.as<float>() + offset,
                               mine_->params.as<std::byte>() + offset * dtype_size_bytes(model_dtype_),
                               static_cast<int64_t>(count), backend_.stream_);
}

Status CudaResidentState::stage_gradients(int slot, size_t offset, size_t count) {
  GradientStaging& staging = staging_[slot];
  if (staging.copied == nullptr) {
    ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaEventCreateWithFlags (gradient staging)",
                                          cudaEventCreateWithFlags(&staging.copied, cudaEventDisableTiming)));
  }
  staging.offset = offset;
  staging.count = count;
  ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaMemcpyAsync (gradients to the host)",
                                        cudaMemcpyAsync(staging.host.as<float>(), accumulator_.as<float>() + offset,
                                                        count * sizeof(float), cudaMemcpyDeviceToHost, backend_.stream_)));
  return backend_.cuda("cudaEventRecord (gradients to the host)", cudaEventRecord(staging.copied, backend_.stream_));
}

Result<std::span<const float>> CudaResidentState::gradients_on_host(size_t offset, size_t count, size_t next_offset,
                                                                    size_t next_count) {
  const size_t flat = static_cast<size_t>(layout_.flat_element_count);
  ZEROSIM_CHECK(adopted_ && !holds_optimizer_ && offset + count <= flat && next_offset + next_count <= flat,
                "gradients copied out of the adopted accumulator, for an offloaded optimizer");
  ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaSetDevice", cudaSetDevice(backend_.device_)));
  if (std::max(count, next_count) > staging_capacity_) {
    // Grown once, to the largest sub-group (nothing queued may still write the old buffers).
    size_t largest = std::max(count, next_count);
    for (const SubGroup& group : layout_.sub_groups) largest = std::max(largest, static_cast<size_t>(group.element_count));
    ZEROSIM_RETURN_IF_ERROR(synchronize("cudaStreamSynchronize (gradient staging grows)"));
    for (GradientStaging& staging : staging_) {
      ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaHostAlloc (gradient staging)", staging.host.reserve(largest * sizeof(float))));
    }
    staging_capacity_ = largest;
    forget_staged_gradients();
  }
  int slot = prefetched_slot_;
  if (slot < 0 || staging_[slot].offset != offset || staging_[slot].count != count) {
    slot = 1 - returned_slot_;  // the span the caller holds dies with this call; either buffer is free
    if (count > 0) ZEROSIM_RETURN_IF_ERROR(stage_gradients(slot, offset, count));
  }
  if (count > 0) {
    ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaEventSynchronize (gradients to the host)",
                                          cudaEventSynchronize(staging_[slot].copied)));
  }
  prefetched_slot_ = -1;
  if (next_count > 0) {
    ZEROSIM_RETURN_IF_ERROR(stage_gradients(1 - slot, next_offset, next_count));
    prefetched_slot_ = 1 - slot;
  }
  returned_slot_ = slot;
  return std::span<const float>(staging_[slot].host.as<float>(), count);
}

Status CudaResidentState::parameters_from_host(size_t offset, std::span<const std::byte> params) {
  const size_t element_bytes = dtype_size_bytes(model_dtype_);
  ZEROSIM_CHECK(adopted_ && params.size() % element_bytes == 0 &&
                    offset + params.size() / element_bytes <= static_cast<size_t>(layout_.flat_element_count),
                "parameters copied into the adopted partitions");
  if (params.empty()) return Status();
  ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaSetDevice", cudaSetDevice(backend_.device_)));
  // From pageable memory the call returns once the source is staged, so the host may reuse it.
  return backend_.cuda("cudaMemcpyAsync (parameters from the host)",
                       cudaMemcpyAsync(mine_->params.as<std::byte>() + offset * element_bytes, params.data(),
                                       params.size(), cudaMemcpyHostToDevice, backend_.stream_));
}

Status CudaResidentState::zero_gradients() {
  forget_staged_gradients();
  ZEROSIM_RETURN_IF_ERROR(backend_.cuda("cudaSetDevice", cudaSetDevice(backend_.device_)));
  return backend_.cuda("cudaMemsetAsync (gradient accumulator)",
                       cudaMemsetAsync(accumulator_.as<void>(), 0,
                                       static_cast<size_t>(layout_.flat_element_count) * sizeof(float), backend_.stream_));
}

Status CudaResidentState::end_step() {
  forget_staged_gradients();
  ZEROSIM_RETURN_IF_ERROR(synchronize("cudaStreamSynchronize (optimizer step)"));
  return comm_->barrier();
}

Status CudaResidentState::synchronize(const char* what) {
  return backend_.cuda(what, cudaStreamSynchronize(backend_.stream_));
}

}  // namespace zerosim
