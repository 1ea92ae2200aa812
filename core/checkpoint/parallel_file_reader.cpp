#include "core/checkpoint/parallel_file_reader.h"

#include <algorithm>
#include <cstring>

namespace zerosim {

Result<std::unique_ptr<ParallelFileReader>> ParallelFileReader::open(Disk& disk, const std::string& path,
                                                                      uint64_t size_bytes,
                                                                      const CheckpointIoOptions& options) {
  ZEROSIM_RETURN_IF_ERROR(validate_checkpoint_io_options(options, path));
  const uint64_t rounded_size = (size_bytes + kDirectIoAlignmentBytes - 1) / kDirectIoAlignmentBytes * kDirectIoAlignmentBytes;
  const uint64_t buffer_bytes = std::max<uint64_t>(kDirectIoAlignmentBytes, std::min<uint64_t>(options.buffer_bytes, rounded_size));
  std::unique_ptr<ParallelFileReader> reader(new ParallelFileReader(options, size_bytes, buffer_bytes));
  ZEROSIM_ASSIGN_OR_RETURN(CheckpointFile opened, open_checkpoint_file(disk, path, OpenMode::kReadOnly, options.direct_io));
  reader->file_ = std::move(opened.file);
  reader->note_ = std::move(opened.note);
  if (reader->file_->direct_io() && size_bytes % kDirectIoAlignmentBytes != 0) {
    ZEROSIM_ASSIGN_OR_RETURN(reader->tail_file_, disk.open(path, FileOpenOptions{}));
  }
  const uint64_t per_group = static_cast<uint64_t>(options.buffers_per_group);
  for (uint64_t g = 0; g < reader->group_count(); ++g) {
    Group& group = reader->groups_[g];
    ZEROSIM_ASSIGN_OR_RETURN(group.queue, make_checkpoint_queue(disk, *reader->file_, options));
    group.buffers.resize(static_cast<size_t>(options.buffers_per_group));
    ZEROSIM_RETURN_IF_ERROR(reader->fill(group, g * per_group));
  }
  return reader;
}

ParallelFileReader::~ParallelFileReader() {
  // The queues' reads write into the buffers: none may outlive them.
  for (Group& group : groups_) {
    if (group.in_flight && group.queue) (void)group.queue->wait_all();
  }
}

Status ParallelFileReader::fill(Group& group, uint64_t first_chunk) {
  group.first_chunk = first_chunk;
  for (size_t i = 0; i < group.buffers.size(); ++i) {
    const uint64_t chunk = first_chunk + i;
    if (chunk >= chunk_count()) break;
    AlignedBuffer& buffer = group.buffers[i];
    if (buffer.size_bytes() != buffer_bytes_) {
      // Pinned (locked in RAM, best effort) for direct transfers, as DeepSpeed's io buffers are.
      ZEROSIM_ASSIGN_OR_RETURN(buffer, AlignedBuffer::allocate(buffer_bytes_, file_->direct_io()));
    }
    const uint64_t offset = chunk * buffer_bytes_;
    const uint64_t length = chunk_length(chunk);
    // A direct read stops at the last 4096 boundary; the rest comes through the page cache.
    const uint64_t queued = tail_file_ ? length / kDirectIoAlignmentBytes * kDirectIoAlignmentBytes : length;
    if (queued > 0) {
      IoRequest request;
      request.file = file_.get();
      request.direction = IoDirection::kRead;
      request.offset_bytes = offset;
      request.buffer = buffer.data();
      request.length_bytes = queued;
      ZEROSIM_RETURN_IF_ERROR(group.queue->submit(request));
      group.in_flight = true;
    }
    if (queued < length) {
      ZEROSIM_RETURN_IF_ERROR(
          tail_file_->read_exact(offset + queued, std::span<std::byte>(buffer.data() + queued, length - queued)));
    }
  }
  return Status();
}

Status ParallelFileReader::make_current_chunk_ready() {
  const uint64_t chunk = position_ / buffer_bytes_;
  if (chunk == ready_chunk_) return Status();
  const uint64_t per_group = static_cast<uint64_t>(options_.buffers_per_group);
  const uint64_t groups = group_count();
  Group& group = groups_[(chunk / per_group) % groups];
  if (chunk % per_group == 0 && chunk > 0) {
    // The caller has taken all of the previous group's chunks: it reads the file's next part
    // (with one group, this one: the part the caller wants now).
    Group& previous = groups_[(chunk / per_group + groups - 1) % groups];
    ZEROSIM_RETURN_IF_ERROR(fill(previous, chunk + (groups - 1) * per_group));
  }
  ZEROSIM_CHECK(chunk >= group.first_chunk && chunk < group.first_chunk + per_group, "a chunk of its group");
  if (group.in_flight) {
    group.in_flight = false;
    ZEROSIM_RETURN_IF_ERROR(group.queue->wait_all());
  }
  const AlignedBuffer& buffer = group.buffers[static_cast<size_t>(chunk - group.first_chunk)];
  hash_.update(std::span<const std::byte>(buffer.data(), chunk_length(chunk)));
  ready_chunk_ = chunk;
  return Status();
}

Status ParallelFileReader::take(std::byte* destination, uint64_t bytes) {
  ZEROSIM_RETURN_IF_ERROR(failed_);
  if (bytes > size_bytes_ - position_) {
    failed_ = data_loss("read of " + file_->path() + " at offset " + std::to_string(position_) + " length " +
                        std::to_string(bytes) + ": past its end at " + std::to_string(size_bytes_));
    return failed_;
  }
  const uint64_t per_group = static_cast<uint64_t>(options_.buffers_per_group);
  while (bytes > 0) {
    if (Status ready = make_current_chunk_ready(); !ready.ok()) {
      failed_ = ready;
      return ready;
    }
    const uint64_t chunk = position_ / buffer_bytes_;
    const uint64_t in_chunk = position_ - chunk * buffer_bytes_;
    const uint64_t taken = std::min(bytes, chunk_length(chunk) - in_chunk);
    if (destination != nullptr) {
      const Group& group = groups_[(chunk / per_group) % group_count()];
      std::memcpy(destination, group.buffers[static_cast<size_t>(chunk - group.first_chunk)].data() + in_chunk, taken);
      destination += taken;
    }
    position_ += taken;
    bytes -= taken;
  }
  return Status();
}

Status ParallelFileReader::read(std::span<std::byte> destination) { return take(destination.data(), destination.size()); }

Status ParallelFileReader::skip(uint64_t bytes) { return take(nullptr, bytes); }

}  // namespace zerosim
