// RankEngine's state as a whole: streamed to rank 0 and digested (gather_state), fingerprinted
// per rank (local_state_fingerprint), visited partition by partition wherever it lives
// (for_each_partition_state), and the digests' comparison. engine.h says what each promises.
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <span>

#include "core/checkpoint/manifest.h"
#include "core/engine/engine.h"

namespace zerosim {
namespace {

class DigestBuilder {
 public:
  DigestBuilder() { state_ = XXH3_createState(); XXH3_128bits_reset(state_); }
  ~DigestBuilder() { XXH3_freeState(state_); }
  DigestBuilder(const DigestBuilder&) = delete;
  DigestBuilder& operator=(const DigestBuilder&) = delete;

  void bytes(const void* data, size_t size) { XXH3_128bits_update(state_, data, size); }
  void u64(uint64_t value) {
    unsigned char little_endian[8];
    for (int i = 0; i < 8; ++i) little_endian[i] = static_cast<unsigned char>(value >> (8 * i));
    bytes(little_endian, 8);
  }
  void i64(int64_t value) { u64(static_cast<uint64_t>(value)); }
  void f64(double value) { uint64_t bits; std::memcpy(&bits, &value, 8); u64(bits); }
  void text(const std::string& value) { u64(value.size()); bytes(value.data(), value.size()); }
  // One tensor: its name, its element count and its little-endian bytes (x86 is little-endian,
  // the canonical byte order of every digest and file).
  void tensor(const std::string& name, uint64_t element_count, const void* data, size_t size_bytes) {
    text(name);
    u64(element_count);
    bytes(data, size_bytes);
  }
  std::string hex() const {
    const XXH128_hash_t hash = XXH3_128bits_digest(state_);
    return format_hash_128(hash.high64, hash.low64);
  }

 private:
  XXH3_state_t* state_;
};

// The scalar components and the overall digest, once the tensor digests are known.
void finish_digests(const FullTrainingState& state, ComponentDigests& digests) {
  {
    DigestBuilder digest;
    digest.i64(state.counters.global_steps);
    digest.i64(state.counters.skipped_steps);
    digest.i64(state.counters.global_samples);
    digest.i64(state.counters.optimizer_steps);
    // Only when set: a run that never started its optimizer afresh keeps the digests it had
    // before this counter existed.
    if (state.counters.steps_before_optimizer != 0) digest.i64(state.counters.steps_before_optimizer);
    digests.counters = digest.hex();
  }
  {
    DigestBuilder digest;
    digest.i64(state.scheduler_last_batch_iteration);
    digest.f64(state.scheduler_learning_rate);
    digests.scheduler = digest.hex();
  }
  {
    DigestBuilder digest;
    digest.f64(state.loss_scaler.current_scale);
    digest.i64(state.loss_scaler.current_iteration);
    digest.i64(state.loss_scaler.last_overflow_iteration);
    digest.i64(state.loss_scaler.current_hysteresis);
    digests.loss_scaler = digest.hex();
  }
  {
    DigestBuilder digest;
    digest.u64(state.seed);
    digest.u64(state.shuffle_stream.seed);
    digest.u64(state.shuffle_stream.stream_id);
    digest.u64(state.shuffle_stream.counter);
    digests.rng = digest.hex();
  }
  {
    DigestBuilder digest;
    digest.i64(state.data_position);
    digests.data = digest.hex();
  }
  digests.buffers.clear();
  if (!state.buffers.empty()) {
    DigestBuilder digest;
    for (const std::vector<float>& buffer : state.buffers) {
      digest.i64(static_cast<int64_t>(buffer.size()));
      digest.bytes(buffer.data(), buffer.size() * sizeof(float));  // little-endian, as the tensors
    }
    digests.buffers = digest.hex();
  }
  DigestBuilder overall;
  for (const std::string* component : {&digests.params, &digests.master, &digests.exp_avg, &digests.exp_avg_sq,
                                       &digests.counters, &digests.scheduler, &digests.loss_scaler, &digests.rng,
                                       &digests.data}) {
    overall.text(*component);
  }
  // Only a model with buffers digests them, so every other state's digest is what it was.
  if (!digests.buffers.empty()) overall.text(digests.buffers);
  digests.state = overall.hex();
}

// Bytes that are always written before they are read: sized without the zero-fill of a vector's
// resize (and a batch grows once to its size, where a vector's inserts reallocated and copied as
// it doubled), kept across batches.
class ScratchBytes {
 public:
  std::byte* data() { return bytes_.get(); }
  size_t size() const { return size_; }
  std::span<std::byte> view() { return {bytes_.get(), size_}; }
  // Now `size` bytes long; the first min(keep, old size) keep their contents, the others are
  // unspecified until written.
  void resize(size_t size, size_t keep = 0) {
    if (size > capacity_) {
      std::unique_ptr<std::byte[]> grown = std::make_unique_for_overwrite<std::byte[]>(size);
      if (const size_t kept = std::min(keep, size_); kept > 0) std::memcpy(grown.get(), bytes_.get(), kept);
      bytes_ = std::move(grown);
      capacity_ = size;
    }
    size_ = size;
  }

 private:
  std::unique_ptr<std::byte[]> bytes_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace

Status RankEngine::for_each_partition_state(
    const std::function<Status(int64_t parameter, const PartitionStateView&)>& visit) {
  ZEROSIM_RETURN_IF_ERROR(make_host_state_current());
  const size_t element_bytes = dtype_size_bytes(model_dtype_);
  std::vector<std::byte> swapped_params;
  for (size_t g = 0; g < layout_.sub_groups.size(); ++g) {
    const SubGroup& group = layout_.sub_groups[g];
    const float* master = master_.data() + group.flat_offset;
    const float* exp_avg = exp_avg_.data() + group.flat_offset;
    const float* exp_avg_sq = exp_avg_sq_.data() + group.flat_offset;
    if (swapper_) {
      ZEROSIM_ASSIGN_OR_RETURN(OptimizerSwapper::SubGroupState swapped,
                               swapper_->acquire(static_cast<int>(g), counters_.optimizer_steps));
      master = swapped.master.data();
      exp_avg = swapped.exp_avg.data();
      exp_avg_sq = swapped.exp_avg_sq.data();
    }
    Status status;
    for (int64_t p = group.first_parameter; p < group.end_parameter && status.ok(); ++p) {
      const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
      const size_t in_group = static_cast<size_t>(partition.flat_offset - group.flat_offset);
      PartitionStateView view;
      view.params = param_partition_.data() + static_cast<size_t>(partition.flat_offset) * element_bytes;
      if (param_swapper_) {
        swapped_params.resize(static_cast<size_t>(partition.partition_size) * element_bytes);
        status = param_swapper_->read(static_cast<int>(p), counters_.optimizer_steps, swapped_params);
        view.params = swapped_params.data();
      }
      view.master = master + in_group;
      view.exp_avg = exp_avg + in_group;
      view.exp_avg_sq = exp_avg_sq + in_group;
      if (status.ok()) status = visit(p, view);
    }
    if (swapper_) {
      Status released = swapper_->release(static_cast<int>(g), std::nullopt);
      if (status.ok()) status = released;
    }
    ZEROSIM_RETURN_IF_ERROR(status);
  }
  return Status();
}

std::string first_differing_component(const ComponentDigests& expected, const ComponentDigests& actual) {
  const std::pair<const char*, std::pair<const std::string*, const std::string*>> components[] = {
      {"params", {&expected.params, &actual.params}},
      {"master", {&expected.master, &actual.master}},
      {"exp_avg", {&expected.exp_avg, &actual.exp_avg}},
      {"exp_avg_sq", {&expected.exp_avg_sq, &actual.exp_avg_sq}},
      {"counters", {&expected.counters, &actual.counters}},
      {"scheduler", {&expected.scheduler, &actual.scheduler}},
      {"loss_scaler", {&expected.loss_scaler, &actual.loss_scaler}},
      {"rng", {&expected.rng, &actual.rng}},
      {"data", {&expected.data, &actual.data}},
      {"buffers", {&expected.buffers, &actual.buffers}},
  };
  for (const auto& [name, pair] : components) {
    if (*pair.first != *pair.second) return name;
  }
  return "";
}

Result<FullTrainingState> RankEngine::gather_state(CapturedState* capture) {
  // Streams the state to rank 0 in batches of whole parameters (all four tensors of each, up
  // to kBatchBytes per rank, so one gather per batch: a digest every step costs one collective
  // for a small model instead of four per parameter), where it is unpadded and fed to the
  // digests in parameter order: memory is one batch's full tensors, whatever the model size,
  // and swapped state is read sub-group by sub-group. Every rank's batch has the same size (a
  // partition is padded to the same size on every rank), so the ranks cut batches alike.
  constexpr size_t kBatchBytes = size_t{4} << 20;
  const bool is_root = comm_.rank() == 0;
  const int world_size = comm_.world_size();
  DigestBuilder params_digest, master_digest, exp_avg_digest, exp_avg_sq_digest;
  params_digest.text(dtype_name(model_dtype_));
  struct TensorKind {
    const char* component;
    DigestBuilder* digest;
    DType dtype;
  };
  const TensorKind kinds[] = {{"params", &params_digest, model_dtype_},
                              {"master", &master_digest, DType::kFp32},
                              {"exp_avg", &exp_avg_digest, DType::kFp32},
                              {"exp_avg_sq", &exp_avg_sq_digest, DType::kFp32}};
  ScratchBytes batch, gathered, full;
  std::vector<int64_t> batched;  // the parameters in `batch`, in order
  auto flush = [&]() -> Status {
    if (batched.empty()) return Status();
    gathered.resize(is_root ? batch.size() * static_cast<size_t>(world_size) : 0);
    ZEROSIM_RETURN_IF_ERROR(comm_.gather(batch.view(), gathered.view(), 0));
    if (is_root) {
      // Parameter by parameter, its four tensors in order: each kind's digest sees its tensors
      // in parameter order, and a capture lists them as documented.
      size_t offset = 0;  // of the current tensor within a rank's batch
      for (int64_t p : batched) {
        const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
        const std::string& name = parameters_[static_cast<size_t>(p)].name;
        for (const TensorKind& kind : kinds) {
          const size_t bytes_per_element = dtype_size_bytes(kind.dtype);
          // The owned ranges of the W ranks cover the tensor: every byte of `full` is written.
          full.resize(static_cast<size_t>(partition.element_count) * bytes_per_element);
          for (int source = 0; source < world_size; ++source) {
            std::memcpy(full.data() + static_cast<size_t>(partition.owned_begin(source)) * bytes_per_element,
                        gathered.data() + static_cast<size_t>(source) * batch.size() + offset,
                        static_cast<size_t>(partition.owned_count(source)) * bytes_per_element);
          }
          kind.digest->tensor(name, static_cast<uint64_t>(partition.element_count), full.data(), full.size());
          if (capture != nullptr) {
            capture->tensors.push_back(CapturedTensor{kind.component, name, kind.dtype, partition.partition_size,
                                                      std::vector<std::byte>(full.data(), full.data() + full.size())});
          }
          offset += static_cast<size_t>(partition.partition_size) * bytes_per_element;
        }
      }
    }
    batch.resize(0);
    batched.clear();
    return Status();
  };
  ZEROSIM_RETURN_IF_ERROR(for_each_partition_state([&](int64_t p, const PartitionStateView& state) -> Status {
    const size_t partition_elements = static_cast<size_t>(layout_.parameters[static_cast<size_t>(p)].partition_size);
    const std::byte* tensors[] = {state.params, reinterpret_cast<const std::byte*>(state.master),
                                  reinterpret_cast<const std::byte*>(state.exp_avg),
                                  reinterpret_cast<const std::byte*>(state.exp_avg_sq)};
    size_t parameter_bytes = 0;
    for (const TensorKind& kind : kinds) parameter_bytes += partition_elements * dtype_size_bytes(kind.dtype);
    size_t offset = batch.size();
    batch.resize(offset + parameter_bytes, offset);
    for (size_t k = 0; k < std::size(kinds); ++k) {
      const size_t bytes = partition_elements * dtype_size_bytes(kinds[k].dtype);
      if (bytes > 0) std::memcpy(batch.data() + offset, tensors[k], bytes);
      offset += bytes;
    }
    batched.push_back(p);
    return batch.size() >= kBatchBytes ? flush() : Status();
  }));
  ZEROSIM_RETURN_IF_ERROR(flush());
  if (!is_root) return FullTrainingState{};

  FullTrainingState state = scalar_state();
  state.digests.params = params_digest.hex();
  state.digests.master = master_digest.hex();
  state.digests.exp_avg = exp_avg_digest.hex();
  state.digests.exp_avg_sq = exp_avg_sq_digest.hex();
  finish_digests(state, state.digests);
  if (capture != nullptr) {
    capture->scalars = state;
    // The buffers, whole (replicated: no owning rank), so that a diagnosis names the one that differs.
    for (size_t b = 0; b < buffer_infos_.size(); ++b) {
      const std::span<const std::byte> bytes = std::as_bytes(std::span<const float>(buffers_[b]));
      capture->tensors.push_back(
          CapturedTensor{"buffers", buffer_infos_[b].name, DType::kFp32, 0, std::vector<std::byte>(bytes.begin(), bytes.end())});
    }
  }
  return state;
}

FullTrainingState RankEngine::scalar_state() const {
  FullTrainingState state;
  state.parameters = parameters_;
  state.model_dtype = model_dtype_;
  state.counters = counters_;
  state.scheduler_last_batch_iteration = scheduler_->last_batch_iteration();
  state.scheduler_learning_rate = next_step_learning_rate();
  state.loss_scaler = loss_scaler_->state();
  state.seed = options_.seed;
  state.data_position = counters_.global_samples;
  state.shuffle_stream = sampler_.shuffle_stream_state(counters_.global_samples);
  state.buffers = buffers_;
  return state;
}

namespace {

uint64_t mix_bits_64(uint64_t x) {  // splitmix64's finalizer: a bijection that spreads every bit
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

Result<RankEngine::StateFingerprint> RankEngine::local_state_fingerprint() {
  StateFingerprint sums{};
  const int rank = comm_.rank();
  const size_t param_bytes = dtype_size_bytes(model_dtype_);
  ZEROSIM_RETURN_IF_ERROR(for_each_partition_state([&](int64_t p, const PartitionStateView& state) -> Status {
    const ParameterPartition& partition = layout_.parameters[static_cast<size_t>(p)];
    const uint64_t begin = static_cast<uint64_t>(partition.owned_begin(rank));
    const size_t count = static_cast<size_t>(partition.owned_count(rank));
    const std::byte* tensors[] = {state.params, reinterpret_cast<const std::byte*>(state.master),
                                  reinterpret_cast<const std::byte*>(state.exp_avg),
                                  reinterpret_cast<const std::byte*>(state.exp_avg_sq)};
    for (size_t kind = 0; kind < 4; ++kind) {
      const size_t element_bytes = kind == 0 ? param_bytes : 4;
      uint64_t lane0 = 0, lane1 = 0;
      for (size_t i = 0; i < count; ++i) {
        uint64_t bits = 0;
        std::memcpy(&bits, tensors[kind] + i * element_bytes, element_bytes);  // little-endian
        const uint64_t position = (static_cast<uint64_t>(p) << 40) ^ (begin + i) ^ (uint64_t{kind} << 62);
        const uint64_t keyed = mix_bits_64(position) ^ bits;
        lane0 += mix_bits_64(keyed + 0x9e3779b97f4a7c15ull);
        lane1 += mix_bits_64(keyed * 0xd6e8feb86659fd93ull + 0x632be59bd9b4e019ull);
      }
      sums[2 * kind] += lane0;
      sums[2 * kind + 1] += lane1;
    }
    return Status();
  }));
  return sums;
}

ComponentDigests fingerprint_digests(const FullTrainingState& scalars, const RankEngine::StateFingerprint& sum) {
  ComponentDigests digests;
  // The parameters' dtype is part of their identity, as in a gathered state's digest.
  const uint64_t dtype_key = mix_bits_64(static_cast<uint64_t>(scalars.model_dtype) + 1);
  std::string* tensors[] = {&digests.params, &digests.master, &digests.exp_avg, &digests.exp_avg_sq};
  for (size_t kind = 0; kind < 4; ++kind) {
    *tensors[kind] = "fp:" + format_hash_128(sum[2 * kind] ^ (kind == 0 ? dtype_key : 0), sum[2 * kind + 1]);
  }
  finish_digests(scalars, digests);
  return digests;
}

}  // namespace zerosim
