#include "core/cuda/nccl_comm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "core/cuda/device_array.h"
#include "core/cuda/nccl_comm_internal.h"

#include <algorithm>
#include <barrier>
#include <set>
#include <vector>
#include <string>

namespace zerosim {

namespace {

// accumulator[i] = (...((accumulator[i] + c_0[i]) + c_1[i]) + ...) + c_{W-1}[i], each c_r
// widened to fp32 exactly, each add rounded to nearest: the seam's fold, as the CPU does it.
template <typename Element>
__device__ __forceinline__ float widen(Element value);
template <>
__device__ __forceinline__ float widen<float>(float value) { return value; }
template <>
__device__ __forceinline__ float widen<__half>(__half value) { return __half2float(value); }
template <>
__device__ __forceinline__ float widen<__nv_bfloat16>(__nv_bfloat16 value) { return __bfloat162float(value); }

constexpr int kMaxRanks = kMaxNcclRanks;

template <typename Element>
struct ChunkPointers {
  const Element* chunk[kMaxRanks];  // rank r's contribution to this rank's slice, at element 0
};

// Folds elements [begin, end) of the slice.
template <typename Element>
__global__ void fold_in_rank_order(const ChunkPointers<Element> chunks, int world_size, int64_t begin, int64_t end,
                                   float* accumulator) {
  for (int64_t i = begin + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < end;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = accumulator[i];
    for (int r = 0; r < world_size; ++r) sum = __fadd_rn(sum, widen(chunks.chunk[r][i]));
    accumulator[i] = sum;
  }
}

// The same fold, 16 bytes of every chunk per load (8 bf16/fp16 or 4 fp32 elements) where every
// chunk and the accumulator are 16-byte aligned: over NVLink the peer's chunks arrive in wide
// transactions. Element order and each element's additions are the scalar kernel's.
template <typename Element>
__global__ void fold_in_rank_order_vectors(const ChunkPointers<Element> chunks, int world_size, int64_t vector_count,
                                           float* accumulator) {
  constexpr int kPerVector = 16 / sizeof(Element);
  for (int64_t v = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; v < vector_count;
       v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum[kPerVector];
    const float4* accumulated = reinterpret_cast<const float4*>(accumulator + v * kPerVector);
    for (int q = 0; q < kPerVector / 4; ++q) {
      const float4 four = accumulated[q];
      sum[4 * q] = four.x;
      sum[4 * q + 1] = four.y;
      sum[4 * q + 2] = four.z;
      sum[4 * q + 3] = four.w;
    }
    for (int r = 0; r < world_size; ++r) {
      const uint4 loaded = reinterpret_cast<const uint4*>(chunks.chunk[r])[v];
      const Element* elements = reinterpret_cast<const Element*>(&loaded);
      for (int e = 0; e < kPerVector; ++e) sum[e] = __fadd_rn(sum[e], widen(elements[e]));
    }
    float4* stored = reinterpret_cast<float4*>(accumulator + v * kPerVector);
    for (int q = 0; q < kPerVector / 4; ++q) stored[q] = make_float4(sum[4 * q], sum[4 * q + 1], sum[4 * q + 2], sum[4 * q + 3]);
  }
}

}  // namespace

// What the ranks of a peer-access world publish to each other for one gradient collective.
struct NcclCommWorld::PeerExchange {
  explicit PeerExchange(int world_size)
      : meeting(world_size),
        send(static_cast<size_t>(world_size), nullptr),
        ready(static_cast<size_t>(world_size), nullptr),
        done(static_cast<size_t>(world_size), nullptr) {}
  std::barrier<> meeting;
  std::vector<const std::byte*> send;  // each rank's send buffer (on its own GPU)
  std::vector<cudaEvent_t> ready;      // recorded when the send buffer may be read
  std::vector<cudaEvent_t> done;       // recorded when this rank's fold has read the peers' buffers
};

namespace {

class NcclComm final : public Comm {
 public:
  NcclComm(int rank, int world_size, int device, ncclComm_t communicator, cudaStream_t stream, cudaStream_t fold_stream,
           const NcclCommOptions& options)
      : options_(options),
        rank_(rank),
        world_size_(world_size),
        device_(device),
        communicator_(communicator),
        stream_(stream),
        fold_stream_(fold_stream) {}
  ~NcclComm() override {
    cudaSetDevice(device_);
    for (cudaEvent_t event : events_) cudaEventDestroy(event);
    ncclCommDestroy(communicator_);
    cudaStreamDestroy(stream_);
    cudaStreamDestroy(fold_stream_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  cudaStream_t stream() const { return stream_; }
  void set_peer_exchange(NcclCommWorld::PeerExchange* exchange) { peer_ = exchange; }
  ncclComm_t communicator() const { return communicator_; }

  Status all_gather(std::span<const std::byte> send, std::span<std::byte> receive) override {
    ZEROSIM_RETURN_IF_ERROR(select_device());
    if (receive.size() != send.size() * static_cast<size_t>(world_size_)) {
      return invalid_argument(where() + "all_gather: receive holds " + std::to_string(receive.size()) +
                              " bytes, expected W x " + std::to_string(send.size()));
    }
    ZEROSIM_RETURN_IF_ERROR(nccl("ncclAllGather", ncclAllGather(send.data(), receive.data(), send.size(), ncclUint8,
                                                                 communicator_, stream_)));
    return synchronize("all_gather");
  }

  Status gather(std::span<const std::byte> send, std::span<std::byte> receive, int root_rank) override {
    ZEROSIM_RETURN_IF_ERROR(select_device());
    if (rank_ == root_rank && receive.size() != send.size() * static_cast<size_t>(world_size_)) {
      return invalid_argument(where() + "gather: the root's receive holds " + std::to_string(receive.size()) +
                              " bytes, expected W x " + std::to_string(send.size()));
    }
    ZEROSIM_RETURN_IF_ERROR(nccl("ncclGroupStart", ncclGroupStart()));
    ncclResult_t result = ncclSend(send.data(), send.size(), ncclUint8, root_rank, communicator_, stream_);
    if (rank_ == root_rank) {
      for (int source = 0; source < world_size_ && result == ncclSuccess; ++source) {
        result = ncclRecv(receive.data() + static_cast<size_t>(source) * send.size(), send.size(), ncclUint8, source,
                          communicator_, stream_);
      }
    }
    const ncclResult_t ended = ncclGroupEnd();
    ZEROSIM_RETURN_IF_ERROR(nccl("ncclSend/ncclRecv (gather)", result));
    ZEROSIM_RETURN_IF_ERROR(nccl("ncclGroupEnd (gather)", ended));
    return synchronize("gather");
  }

  Status reduce_scatter_accumulate(std::span<const std::byte> send, DType dtype, size_t chunk_element_count,
                                   std::span<float> accumulator) override {
    ZEROSIM_RETURN_IF_ERROR(select_device());
    const size_t element_bytes = dtype_size_bytes(dtype);
    const size_t chunk_bytes = chunk_element_count * element_bytes;
    if (send.size() != chunk_bytes * static_cast<size_t>(world_size_) || accumulator.size() != chunk_element_count) {
      return invalid_argument(where() + "reduce_scatter_accumulate: send holds " + std::to_string(send.size()) +
                              " bytes and the accumulator " + std::to_string(accumulator.size()) +
                              " elements, expected W x " + std::to_string(chunk_bytes) + " and " +
                              std::to_string(chunk_element_count));
    }
    if (world_size_ > kMaxRanks) {
      return invalid_argument(where() + "reduce_scatter_accumulate: at most " + std::to_string(kMaxRanks) + " ranks");
    }
    if (peer_ != nullptr) return peer_fold(send, dtype, chunk_element_count, accumulator);
    ZEROSIM_RETURN_IF_ERROR(reserve_scratch(chunk_bytes * static_cast<size_t>(world_size_)));
    // The all-to-all, piece by piece: piece p of this rank's chunk j goes to rank j, and rank
    // r's piece p for this rank lands in the scratch at chunk r. This rank's own chunk is
    // folded straight from `send`. Each piece's fold waits for its transfer, in rank order.
    const int64_t piece_elements = std::max<int64_t>(1, options_.piece_bytes / static_cast<int64_t>(element_bytes));
    const int64_t total = static_cast<int64_t>(chunk_element_count);
    const int64_t pieces = (total + piece_elements - 1) / piece_elements;
    ZEROSIM_RETURN_IF_ERROR(reserve_events(static_cast<size_t>(pieces)));
    auto chunk_of = [&](int source) -> const std::byte* {
      return source == rank_ ? send.data() + static_cast<size_t>(rank_) * chunk_bytes
                             : scratch_.as<const std::byte>() + static_cast<size_t>(source) * chunk_bytes;
    };
    for (int64_t piece = 0; piece < pieces; ++piece) {
      const int64_t begin = piece * piece_elements;
      const int64_t end = std::min(total, begin + piece_elements);
      const size_t offset = static_cast<size_t>(begin) * element_bytes;
      const size_t length = static_cast<size_t>(end - begin) * element_bytes;
      ZEROSIM_RETURN_IF_ERROR(nccl("ncclGroupStart", ncclGroupStart()));
      ncclResult_t result = ncclSuccess;
      for (int peer = 0; peer < world_size_ && result == ncclSuccess; ++peer) {
        if (peer == rank_) continue;
        result = ncclSend(send.data() + static_cast<size_t>(peer) * chunk_bytes + offset, length, ncclUint8, peer,
                          communicator_, stream_);
        if (result == ncclSuccess) {
          result = ncclRecv(scratch_.as<std::byte>() + static_cast<size_t>(peer) * chunk_bytes + offset, length,
                            ncclUint8, peer, communicator_, stream_);
        }
      }
      const ncclResult_t ended = ncclGroupEnd();
      ZEROSIM_RETURN_IF_ERROR(nccl("ncclSend/ncclRecv (reduce_scatter_accumulate)", result));
      ZEROSIM_RETURN_IF_ERROR(nccl("ncclGroupEnd (reduce_scatter_accumulate)", ended));
      cudaEvent_t arrived = events_[static_cast<size_t>(piece)];
      ZEROSIM_RETURN_IF_ERROR(cuda("cudaEventRecord", cudaEventRecord(arrived, stream_)));
      ZEROSIM_RETURN_IF_ERROR(cuda("cudaStreamWaitEvent", cudaStreamWaitEvent(fold_stream_, arrived, 0)));
      const int threads = 256;
      const int64_t wanted = (end - begin + threads - 1) / threads;
      const int blocks = static_cast<int>(std::min<int64_t>(wanted, options_.fold_blocks > 0 ? options_.fold_blocks : 65535));
      switch (dtype) {
        case DType::kFp32: launch_fold<float>(chunk_of, blocks, threads, begin, end, accumulator.data()); break;
        case DType::kFp16: launch_fold<__half>(chunk_of, blocks, threads, begin, end, accumulator.data()); break;
        case DType::kBf16: launch_fold<__nv_bfloat16>(chunk_of, blocks, threads, begin, end, accumulator.data()); break;
      }
      ZEROSIM_RETURN_IF_ERROR(cuda("fold_in_rank_order launch", cudaGetLastError()));
    }
    // The NCCL stream must not reuse the scratch before the folds have read it.
    ZEROSIM_RETURN_IF_ERROR(cuda("cudaStreamSynchronize (fold)", cudaStreamSynchronize(fold_stream_)));
    return synchronize("reduce_scatter_accumulate");
  }

  Status all_reduce_max(std::span<double> values) override {
    ZEROSIM_RETURN_IF_ERROR(select_device());
    if (values.empty()) return Status();
    ZEROSIM_RETURN_IF_ERROR(reserve_scalars(values.size()));
    const size_t bytes = values.size() * sizeof(double);
    ZEROSIM_RETURN_IF_ERROR(
        cuda("cudaMemcpyAsync to the device", cudaMemcpyAsync(scalars_.as<double>(), values.data(), bytes, cudaMemcpyHostToDevice, stream_)));
    ZEROSIM_RETURN_IF_ERROR(nccl("ncclAllReduce (max)", ncclAllReduce(scalars_.as<double>(), scalars_.as<double>(), values.size(), ncclFloat64,
                                                                       ncclMax, communicator_, stream_)));
    ZEROSIM_RETURN_IF_ERROR(
        cuda("cudaMemcpyAsync to the host", cudaMemcpyAsync(values.data(), scalars_.as<double>(), bytes, cudaMemcpyDeviceToHost, stream_)));
    return synchronize("all_reduce_max");
  }

  Status broadcast(std::span<std::byte> buffer, int root_rank) override {
    ZEROSIM_RETURN_IF_ERROR(select_device());
    ZEROSIM_RETURN_IF_ERROR(nccl("ncclBroadcast", ncclBroadcast(buffer.data(), buffer.data(), buffer.size(), ncclUint8,
                                                                 root_rank, communicator_, stream_)));
    return synchronize("broadcast");
  }

  Status barrier() override {
    double value = 0.0;
    return all_reduce_max(std::span<double>(&value, 1));
  }

 private:
  // The peer-access path: publish this rank's send buffer and its ready event, fold every
  // rank's chunk for this slice straight from its owner's memory, then wait until every peer has
  // read this rank's buffer before returning (the caller may reuse it). Every rank passes the
  // three meetings whatever happens, so a failed CUDA call is reported, not a hang.
  Status peer_fold(std::span<const std::byte> send, DType dtype, size_t chunk_element_count, std::span<float> accumulator) {
    NcclCommWorld::PeerExchange& exchange = *peer_;
    const size_t r = static_cast<size_t>(rank_);
    const size_t chunk_bytes = chunk_element_count * dtype_size_bytes(dtype);
    Status status = cuda("cudaEventRecord (send ready)", cudaEventRecord(exchange.ready[r], stream_));
    exchange.send[r] = send.data();
    exchange.meeting.arrive_and_wait();  // 1: every buffer and ready event published
    for (int peer = 0; peer < world_size_ && status.ok(); ++peer) {
      if (peer == rank_) continue;
      const Status waited =
          cuda("cudaStreamWaitEvent (peer ready)", cudaStreamWaitEvent(stream_, exchange.ready[static_cast<size_t>(peer)], 0));
      if (!waited.ok()) status = waited;
    }
    if (status.ok()) {
      auto chunk_of = [&](int source) { return exchange.send[static_cast<size_t>(source)] + r * chunk_bytes; };
      bool aligned = chunk_element_count > 0 && reinterpret_cast<uintptr_t>(accumulator.data()) % 16 == 0;
      for (int source = 0; source < world_size_; ++source) {
        aligned = aligned && reinterpret_cast<uintptr_t>(chunk_of(source)) % 16 == 0;
      }
      const int64_t total = static_cast<int64_t>(chunk_element_count);
      const int64_t per_vector = static_cast<int64_t>(16 / dtype_size_bytes(dtype));
      const int64_t vectors = aligned ? total / per_vector : 0;
      const int threads = 256;
      auto blocks_for = [&](int64_t work) {
        const int64_t wanted = std::max<int64_t>(1, (work + threads - 1) / threads);
        return static_cast<int>(std::min<int64_t>(wanted, options_.fold_blocks > 0 ? options_.fold_blocks : 65535));
      };
      switch (dtype) {
        case DType::kFp32: launch_peer_fold<float>(chunk_of, vectors, per_vector, total, blocks_for, threads, accumulator.data()); break;
        case DType::kFp16: launch_peer_fold<__half>(chunk_of, vectors, per_vector, total, blocks_for, threads, accumulator.data()); break;
        case DType::kBf16: launch_peer_fold<__nv_bfloat16>(chunk_of, vectors, per_vector, total, blocks_for, threads, accumulator.data()); break;
      }
      const Status launched = cuda("fold_in_rank_order (peer) launch", cudaGetLastError());
      if (!launched.ok()) status = launched;
    }
    const Status recorded = cuda("cudaEventRecord (fold done)", cudaEventRecord(exchange.done[r], stream_));
    if (status.ok()) status = recorded;
    exchange.meeting.arrive_and_wait();  // 2: every fold enqueued, every done event recorded
    for (int peer = 0; peer < world_size_; ++peer) {
      if (peer == rank_) continue;
      const Status waited =
          cuda("cudaStreamWaitEvent (peer done)", cudaStreamWaitEvent(stream_, exchange.done[static_cast<size_t>(peer)], 0));
      if (status.ok()) status = waited;
    }
    exchange.meeting.arrive_and_wait();  // 3: no event is recorded again before every wait is enqueued
    const Status synchronized = synchronize("reduce_scatter_accumulate");
    return status.ok() ? synchronized : status;
  }
  template <typename Element, typename ChunkOf, typename BlocksFor>
  void launch_peer_fold(const ChunkOf& chunk_of, int64_t vectors, int64_t per_vector, int64_t total,
                        const BlocksFor& blocks_for, int threads, float* accumulator) {
    ChunkPointers<Element> pointers{};
    for (int source = 0; source < world_size_; ++source) {
      pointers.chunk[source] = reinterpret_cast<const Element*>(chunk_of(source));
    }
    if (vectors > 0) {
      fold_in_rank_order_vectors<<<blocks_for(vectors), threads, 0, stream_>>>(pointers, world_size_, vectors, accumulator);
    }
    const int64_t begin = vectors * per_vector;
    if (begin < total) {
      fold_in_rank_order<<<blocks_for(total - begin), threads, 0, stream_>>>(pointers, world_size_, begin, total, accumulator);
    }
  }

  std::string where() const { return "rank " + std::to_string(rank_) + " (GPU " + std::to_string(device_) + "): "; }
  Status select_device() const { return cuda("cudaSetDevice", cudaSetDevice(device_)); }
  Status cuda(const char* call, cudaError_t error) const {
    if (error == cudaSuccess) return Status();
    return internal_error(where() + call + ": " + cudaGetErrorString(error));
  }
  Status nccl(const char* call, ncclResult_t result) const {
    if (result == ncclSuccess) return Status();
    return internal_error(where() + call + ": " + ncclGetErrorString(result));
  }
  Status synchronize(const char* collective) const {
    const cudaError_t error = cudaStreamSynchronize(stream_);
    if (error == cudaSuccess) return Status();
    return internal_error(where() + collective + ": cudaStreamSynchronize: " + cudaGetErrorString(error));
  }
  Status reserve_scratch(size_t bytes) {
    return cuda("cudaMalloc (reduce-scatter scratch)", scratch_.reserve(bytes));
  }
  template <typename Element, typename ChunkOf>
  void launch_fold(const ChunkOf& chunk_of, int blocks, int threads, int64_t begin, int64_t end, float* accumulator) {
    ChunkPointers<Element> pointers{};
    for (int source = 0; source < world_size_; ++source) {
      pointers.chunk[source] = reinterpret_cast<const Element*>(chunk_of(source));
    }
    fold_in_rank_order<<<blocks, threads, 0, fold_stream_>>>(pointers, world_size_, begin, end, accumulator);
  }
  Status reserve_events(size_t count) {
    while (events_.size() < count) {
      cudaEvent_t event = nullptr;
      ZEROSIM_RETURN_IF_ERROR(cuda("cudaEventCreate", cudaEventCreateWithFlags(&event, cudaEventDisableTiming)));
      events_.push_back(event);
    }
    return Status();
  }
  Status reserve_scalars(size_t count) { return cuda("cudaMalloc (scalars)", scalars_.reserve(count * sizeof(double))); }

  NcclCommOptions options_;
  int rank_;
  int world_size_;
  int device_;
  ncclComm_t communicator_;
  cudaStream_t stream_;
  cudaStream_t fold_stream_;
  std::vector<cudaEvent_t> events_;
  DeviceArray scratch_;
  DeviceArray scalars_;
  NcclCommWorld::PeerExchange* peer_ = nullptr;  // owned by the world; null: the NCCL path
};

}  // namespace

Result<std::unique_ptr<NcclCommWorld>> NcclCommWorld::create(std::span<const int> devices,
                                                             const NcclCommOptions& options) {
  if (devices.empty()) return invalid_argument("NCCL world: no device listed");
  if (options.piece_bytes <= 0 || options.fold_blocks < 0) {
    return invalid_argument("NCCL world: piece_bytes must be positive and fold_blocks non-negative");
  }
  if (std::set<int>(devices.begin(), devices.end()).size() != devices.size()) {
    return invalid_argument("NCCL world: a device is listed twice (one rank per GPU)");
  }
  int device_count = 0;
  const cudaError_t counted = cudaGetDeviceCount(&device_count);
  if (counted != cudaSuccess) return failed_precondition(std::string("cudaGetDeviceCount: ") + cudaGetErrorString(counted));
  for (int device : devices) {
    if (device < 0 || device >= device_count) {
      return invalid_argument("NCCL world: device " + std::to_string(device) + " does not exist (this machine has " +
                              std::to_string(device_count) + ")");
    }
  }
  const int world_size = static_cast<int>(devices.size());
  std::vector<ncclComm_t> communicators(devices.size());
  const ncclResult_t made = ncclCommInitAll(communicators.data(), world_size, devices.data());
  if (made != ncclSuccess) return internal_error(std::string("ncclCommInitAll: ") + ncclGetErrorString(made));
  std::unique_ptr<NcclCommWorld> world(new NcclCommWorld());
  for (int rank = 0; rank < world_size; ++rank) {
    cudaStream_t stream = nullptr, fold_stream = nullptr;
    cudaError_t error = cudaSetDevice(devices[rank]);
    if (error == cudaSuccess) error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (error == cudaSuccess) error = cudaStreamCreateWithFlags(&fold_stream, cudaStreamNonBlocking);
    if (error != cudaSuccess) {
      for (int later = rank; later < world_size; ++later) ncclCommDestroy(communicators[later]);
      return internal_error("rank " + std::to_string(rank) + ": cudaStreamCreate: " + cudaGetErrorString(error));
    }
    world->comms_.push_back(std::make_unique<NcclComm>(rank, world_size, devices[rank], communicators[rank], stream,
                                                        fold_stream, options));
  }
  // Peer folds need every ordered pair of GPUs to reach the other's memory.
  bool peers_reachable = options.peer_fold && world_size > 1;
  for (int a = 0; a < world_size && peers_reachable; ++a) {
    for (int b = 0; b < world_size && peers_reachable; ++b) {
      int can = 0;
      if (a != b && (cudaDeviceCanAccessPeer(&can, devices[a], devices[b]) != cudaSuccess || can == 0)) peers_reachable = false;
    }
  }
  if (peers_reachable) {
    auto exchange = std::make_shared<PeerExchange>(world_size);
    for (int rank = 0; rank < world_size; ++rank) {
      cudaError_t error = cudaSetDevice(devices[rank]);
      for (int peer = 0; peer < world_size && error == cudaSuccess; ++peer) {
        if (peer == rank) continue;
        error = cudaDeviceEnablePeerAccess(devices[peer], 0);
        if (error == cudaErrorPeerAccessAlreadyEnabled) {
          (void)cudaGetLastError();  // not an error here; clear it so no later check sees it
          error = cudaSuccess;
        }
      }
      if (error == cudaSuccess) error = cudaEventCreateWithFlags(&exchange->ready[static_cast<size_t>(rank)], cudaEventDisableTiming);
      if (error == cudaSuccess) error = cudaEventCreateWithFlags(&exchange->done[static_cast<size_t>(rank)], cudaEventDisableTiming);
      if (error != cudaSuccess) {
        return internal_error("rank " + std::to_string(rank) + " (GPU " + std::to_string(devices[rank]) +
                              "): enabling peer access for the gradient fold: " + cudaGetErrorString(error));
      }
    }
    for (int rank = 0; rank < world_size; ++rank) {
      static_cast<NcclComm&>(*world->comms_[static_cast<size_t>(rank)]).set_peer_exchange(exchange.get());
    }
    world->peer_exchange_ = std::move(exchange);
    world->peer_fold_ = true;
  }
  return Result<std::unique_ptr<NcclCommWorld>>(std::move(world));
}

std::unique_ptr<Comm> make_nccl_rank_comm(int rank, int world_size, int device, ncclComm_t communicator,
                                          cudaStream_t stream, cudaStream_t fold_stream, const NcclCommOptions& options) {
  return std::make_unique<NcclComm>(rank, world_size, device, communicator, stream, fold_stream, options);
}

NcclCommWorld::~NcclCommWorld() {
  comms_.clear();  // the communicators first: they point into the exchange
  if (peer_exchange_) {
    for (cudaEvent_t event : peer_exchange_->ready) {
      if (event != nullptr) cudaEventDestroy(event);
    }
    for (cudaEvent_t event : peer_exchange_->done) {
      if (event != nullptr) cudaEventDestroy(event);
    }
  }
}

Comm& NcclCommWorld::comm(int rank) { return *comms_.at(static_cast<size_t>(rank)); }
int NcclCommWorld::world_size() const { return static_cast<int>(comms_.size()); }
void* NcclCommWorld::stream(int rank) const {
  return static_cast<NcclComm&>(*comms_.at(static_cast<size_t>(rank))).stream();
}
void* NcclCommWorld::raw_communicator(int rank) const {
  return static_cast<NcclComm&>(*comms_.at(static_cast<size_t>(rank))).communicator();
}

}  // namespace zerosim
