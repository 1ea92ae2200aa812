#include "core/swap/optimizer_swapper.h"

#include "core/swap/swap_directory.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace zerosim {
namespace {

constexpr std::array<SwapTensorKind, 3> kStateKinds = {SwapTensorKind::kMaster, SwapTensorKind::kExpAvg,
                                                       SwapTensorKind::kExpAvgSq};

}  // namespace

int64_t minimum_swap_buffer_count(bool pipeline_read, bool pipeline_write) {
  return 3 * (1 + (pipeline_read ? 1 : 0) + (pipeline_write ? 1 : 0));
}

struct OptimizerSwapper::Slot {
  enum class State { kFree, kReading, kHeld, kWriting };
  State state = State::kFree;
  int sub_group = -1;
  int64_t step = 0;  // the optimizer step whose state the buffers hold (or are being read as)
  std::array<AlignedBuffer, 3> buffers;
  std::array<std::unique_ptr<File>, 3> files;

  std::span<float> payload(size_t kind_index, int64_t element_count) {
    return {reinterpret_cast<float*>(buffers[kind_index].data() + SwapFileHeader::kHeaderBytes),
            static_cast<size_t>(element_count)};
  }
  Status close_files() {
    Status first;
    for (auto& file : files) {
      if (!file) continue;
      Status status = file->close();
      if (first.ok() && !status.ok()) first = status;
      file.reset();
    }
    return first;
  }
};

OptimizerSwapper::OptimizerSwapper(Disk& disk, OptimizerSwapperOptions options)
    : disk_(disk), options_(std::move(options)) {
  directory_.path = swap_rank_directory(options_.nvme_path, options_.run_id, options_.rank, options_.world_size);
}

OptimizerSwapper::~OptimizerSwapper() {
  // Buffers must outlive the transfers that use them.
  if (read_queue_) read_queue_->wait_all().ignore_error();
  if (write_queue_) write_queue_->wait_all().ignore_error();
  for (auto& slot : slots_) slot->close_files().ignore_error();
  // The swap files are scratch state (a checkpoint, not the swap directory, is what a resume
  // reads), so a run that ends removes them; a crashed run leaves them, and their headers
  // make sure they are never mistaken for another run's or another step's state.
  if (directory_.lock) disk_.remove_tree(directory_.path).ignore_error();
}

Result<std::unique_ptr<OptimizerSwapper>> OptimizerSwapper::create(Disk& disk, const OptimizerSwapperOptions& options,
                                                                   std::string* engine_note) {
  if (options.nvme_path.empty()) {
    return invalid_argument("zero_optimization.offload_optimizer.nvme_path: required when device is \"nvme\"");
  }
  if (options.run_id.empty() || options.run_id.size() >= 64 ||
      options.run_id.find_first_of("/\\") != std::string::npos || options.run_id == "." || options.run_id == "..") {
    return invalid_argument("run id '" + options.run_id + "': expected 1 to 63 characters without '/'");
  }
  const int64_t minimum = minimum_swap_buffer_count(options.pipeline_read, options.pipeline_write);
  if (options.buffer_count < minimum) {
    return invalid_argument("zero_optimization.offload_optimizer.buffer_count is " +
                            std::to_string(options.buffer_count) + "; swapping master, exp_avg and exp_avg_sq" +
                            (options.pipeline_read ? " with pipeline_read" : "") +
                            (options.pipeline_write ? " with pipeline_write" : "") + " needs at least " +
                            std::to_string(minimum));
  }
  ZEROSIM_RETURN_IF_ERROR(validate_async_io_options(options.aio));

  std::unique_ptr<OptimizerSwapper> swapper(new OptimizerSwapper(disk, options));
  ZEROSIM_ASSIGN_OR_RETURN(swapper->directory_,
                           open_swap_directory(disk, swapper->directory_.path, options.run_id, engine_note));
  const Disk::AsyncEngine engine = swapper->directory_.engine();
  ZEROSIM_ASSIGN_OR_RETURN(swapper->read_queue_, disk.make_async_queue(options.aio, engine));
  ZEROSIM_ASSIGN_OR_RETURN(swapper->write_queue_, disk.make_async_queue(options.aio, engine));

  int64_t largest = 0;
  for (int64_t count : options.sub_group_element_counts) largest = std::max(largest, count);
  const uint64_t buffer_bytes = swap_file_size_bytes(static_cast<uint64_t>(largest), DType::kFp32);
  const int64_t slot_count = minimum / 3;  // only what the pipeline can use
  for (int64_t s = 0; s < slot_count; ++s) {
    auto slot = std::make_unique<Slot>();
    for (AlignedBuffer& buffer : slot->buffers) {
      ZEROSIM_ASSIGN_OR_RETURN(buffer, AlignedBuffer::allocate(buffer_bytes, options.pin_memory));
    }
    swapper->slots_.push_back(std::move(slot));
  }
  return swapper;
}

const char* OptimizerSwapper::engine_name() const { return read_queue_->engine_name(); }

std::string OptimizerSwapper::path_of(int sub_group, SwapTensorKind kind) const {
  return directory_.path + "/" + swap_file_name(kind, static_cast<uint32_t>(sub_group));
}

SwapFileHeader OptimizerSwapper::expected_header(int sub_group, SwapTensorKind kind, int64_t step) const {
  SwapFileHeader header;
  header.run_id = options_.run_id;
  header.rank = static_cast<uint32_t>(options_.rank);
  header.world_size = static_cast<uint32_t>(options_.world_size);
  header.sub_group = static_cast<uint32_t>(sub_group);
  header.kind = kind;
  header.element_count = static_cast<uint64_t>(options_.sub_group_element_counts[static_cast<size_t>(sub_group)]);
  header.dtype = DType::kFp32;
  header.optimizer_step = step;
  return header;
}

Status OptimizerSwapper::open_slot_files(Slot& slot, int sub_group, OpenMode mode) {
  for (size_t k = 0; k < kStateKinds.size(); ++k) {
    FileOpenOptions open_options;
    open_options.mode = mode;
    open_options.direct_io = directory_.direct_io;
    ZEROSIM_ASSIGN_OR_RETURN(slot.files[k], disk_.open(path_of(sub_group, kStateKinds[k]), open_options));
  }
  return Status();
}

Result<OptimizerSwapper::Slot*> OptimizerSwapper::free_slot() {
  for (auto& slot : slots_) {
    if (slot->state == Slot::State::kFree) return slot.get();
  }
  // Reclaim write-behind slots: their writes must complete before the buffers are reused.
  for (auto& slot : slots_) {
    if (slot->state == Slot::State::kWriting) {
      ZEROSIM_RETURN_IF_ERROR(finish_write(*slot));
      return slot.get();
    }
  }
  return internal_error("swapper: no free buffer slot (a sub-group was acquired twice without release)");
}

Status OptimizerSwapper::write_initial(int sub_group, std::span<const float> master) {
  return write_state(sub_group, 0, master, {}, {});
}

Status OptimizerSwapper::write_state(int sub_group, int64_t step, std::span<const float> master,
                                     std::span<const float> exp_avg, std::span<const float> exp_avg_sq) {
  const int64_t count = options_.sub_group_element_counts[static_cast<size_t>(sub_group)];
  ZEROSIM_CHECK(static_cast<int64_t>(master.size()) == count, "write_state: master size differs from the sub-group");
  ZEROSIM_CHECK(exp_avg.empty() || static_cast<int64_t>(exp_avg.size()) == count, "write_state: exp_avg size");
  ZEROSIM_CHECK(exp_avg_sq.empty() || static_cast<int64_t>(exp_avg_sq.size()) == count, "write_state: exp_avg_sq size");
  ZEROSIM_ASSIGN_OR_RETURN(Slot * slot, free_slot());
  for (size_t k = 0; k < kStateKinds.size(); ++k) {
    std::span<float> payload = slot->payload(k, count);
    const std::span<const float> source = kStateKinds[k] == SwapTensorKind::kMaster   ? master
                                          : kStateKinds[k] == SwapTensorKind::kExpAvg ? exp_avg
                                                                                      : exp_avg_sq;
    if (source.empty()) std::fill(payload.begin(), payload.end(), 0.0f);
    else std::copy(source.begin(), source.end(), payload.begin());
  }
  ZEROSIM_RETURN_IF_ERROR(open_slot_files(*slot, sub_group, OpenMode::kCreateTruncate));
  slot->sub_group = sub_group;
  slot->state = Slot::State::kHeld;
  ZEROSIM_RETURN_IF_ERROR(release(sub_group, step));
  return flush();
}

Status OptimizerSwapper::prefetch(int sub_group, int64_t expected_step) {
  for (auto& slot : slots_) {
    if (slot->sub_group == sub_group && slot->state != Slot::State::kFree) {
      // Read after write of the same sub-group: let the write land first.
      if (slot->state == Slot::State::kWriting) ZEROSIM_RETURN_IF_ERROR(finish_write(*slot));
      else return Status();  // already reading or held
    }
  }
  ZEROSIM_ASSIGN_OR_RETURN(Slot * slot, free_slot());
  ZEROSIM_RETURN_IF_ERROR(open_slot_files(*slot, sub_group, OpenMode::kReadOnly));
  slot->sub_group = sub_group;
  slot->step = expected_step;
  slot->state = Slot::State::kReading;
  const uint64_t file_bytes = swap_file_size_bytes(
      static_cast<uint64_t>(options_.sub_group_element_counts[static_cast<size_t>(sub_group)]), DType::kFp32);
  for (size_t k = 0; k < kStateKinds.size(); ++k) {
    IoRequest request;
    request.file = slot->files[k].get();
    request.direction = IoDirection::kRead;
    request.offset_bytes = 0;
    request.buffer = slot->buffers[k].data();
    request.length_bytes = file_bytes;
    ZEROSIM_RETURN_IF_ERROR(read_queue_->submit(request));
  }
  return Status();
}

Status OptimizerSwapper::finish_read(Slot& slot) {
  Status io_status = read_queue_->wait_all();
  Status close_status = slot.close_files();
  if (!io_status.ok()) {
    slot.state = Slot::State::kFree;
    return io_status;
  }
  ZEROSIM_RETURN_IF_ERROR(close_status);
  const int64_t count = options_.sub_group_element_counts[static_cast<size_t>(slot.sub_group)];
  for (size_t k = 0; k < kStateKinds.size(); ++k) {
    const std::string path = path_of(slot.sub_group, kStateKinds[k]);
    SwapFileHeader found;
    Status status = check_swap_header(slot.buffers[k].bytes(), expected_header(slot.sub_group, kStateKinds[k], slot.step),
                                      path, found);
    const std::span<const std::byte> payload(slot.buffers[k].data() + SwapFileHeader::kHeaderBytes,
                                             static_cast<size_t>(count) * sizeof(float));
    if (status.ok() && swap_payload_checksum(payload) != found.payload_checksum) {
      status = data_loss("swap file " + path + ": payload checksum mismatch (torn or corrupted write)");
    }
    if (!status.ok()) {
      slot.state = Slot::State::kFree;
      return status;
    }
  }
  slot.state = Slot::State::kHeld;
  return Status();
}

Result<OptimizerSwapper::SubGroupState> OptimizerSwapper::acquire(int sub_group, int64_t expected_step) {
  Slot* slot = nullptr;
  for (auto& candidate : slots_) {
    if (candidate->sub_group == sub_group && (candidate->state == Slot::State::kReading ||
                                              candidate->state == Slot::State::kHeld)) {
      slot = candidate.get();
    }
  }
  if (slot == nullptr) {
    ZEROSIM_RETURN_IF_ERROR(prefetch(sub_group, expected_step));
    for (auto& candidate : slots_) {
      if (candidate->sub_group == sub_group && candidate->state == Slot::State::kReading) slot = candidate.get();
    }
  }
  ZEROSIM_CHECK(slot != nullptr, "acquire: the sub-group's read was not started");
  ZEROSIM_CHECK(slot->step == expected_step, "acquire: prefetched for another step");
  if (slot->state == Slot::State::kReading) ZEROSIM_RETURN_IF_ERROR(finish_read(*slot));
  const int64_t count = options_.sub_group_element_counts[static_cast<size_t>(sub_group)];
  return SubGroupState{slot->payload(0, count), slot->payload(1, count), slot->payload(2, count)};
}

Status OptimizerSwapper::finish_write(Slot& slot) {
  Status io_status = write_queue_->wait_all();
  Status close_status = slot.close_files();
  slot.state = Slot::State::kFree;
  slot.sub_group = -1;
  ZEROSIM_RETURN_IF_ERROR(io_status);
  return close_status;
}

Status OptimizerSwapper::release(int sub_group, std::optional<int64_t> step) {
  Slot* slot = nullptr;
  for (auto& candidate : slots_) {
    if (candidate->sub_group == sub_group && candidate->state == Slot::State::kHeld) slot = candidate.get();
  }
  ZEROSIM_CHECK(slot != nullptr, "release of a sub-group that is not held");
  if (!step) {
    slot->state = Slot::State::kFree;
    slot->sub_group = -1;
    return slot->close_files();
  }
  // Write-behind keeps one write in flight: the previous one completes first.
  for (auto& other : slots_) {
    if (other.get() != slot && other->state == Slot::State::kWriting) ZEROSIM_RETURN_IF_ERROR(finish_write(*other));
  }
  if (!slot->files[0]) ZEROSIM_RETURN_IF_ERROR(open_slot_files(*slot, sub_group, OpenMode::kReadWrite));
  const int64_t count = options_.sub_group_element_counts[static_cast<size_t>(sub_group)];
  const uint64_t file_bytes = swap_file_size_bytes(static_cast<uint64_t>(count), DType::kFp32);
  const size_t payload_bytes = static_cast<size_t>(count) * sizeof(float);
  for (size_t k = 0; k < kStateKinds.size(); ++k) {
    std::byte* buffer = slot->buffers[k].data();
    // The tail past the payload is padding up to the aligned size: zero, so files are
    // byte-for-byte deterministic (DeepSpeed leaves stale buffer bytes there).
    std::memset(buffer + SwapFileHeader::kHeaderBytes + payload_bytes, 0,
                file_bytes - SwapFileHeader::kHeaderBytes - payload_bytes);
    SwapFileHeader header = expected_header(sub_group, kStateKinds[k], *step);
    header.payload_checksum =
        swap_payload_checksum(std::span<const std::byte>(buffer + SwapFileHeader::kHeaderBytes, payload_bytes));
    encode_swap_header(header, slot->buffers[k].bytes());
    IoRequest request;
    request.file = slot->files[k].get();
    request.direction = IoDirection::kWrite;
    request.offset_bytes = 0;
    request.buffer = buffer;
    request.length_bytes = file_bytes;
    ZEROSIM_RETURN_IF_ERROR(write_queue_->submit(request));
  }
  slot->step = *step;
  slot->state = Slot::State::kWriting;
  if (!options_.pipeline_write) return finish_write(*slot);
  return Status();
}

Status OptimizerSwapper::flush() {
  for (auto& slot : slots_) {
    if (slot->state == Slot::State::kWriting) ZEROSIM_RETURN_IF_ERROR(finish_write(*slot));
  }
  return Status();
}

}  // namespace zerosim
