#include "core/checkpoint/parallel_file_writer.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace zerosim {

Result<std::unique_ptr<ParallelFileWriter>> ParallelFileWriter::create(Disk& disk, File& file,
                                                                        const CheckpointIoOptions& options) {
  ZEROSIM_RETURN_IF_ERROR(validate_checkpoint_io_options(options, file.path()));
  std::unique_ptr<ParallelFileWriter> writer(new ParallelFileWriter(file, options));
  // Buffered writes to one file take turns on its inode's lock: one writing thread.
  CheckpointIoOptions queue_options = options;
  if (!file.direct_io()) queue_options.threads = 1;
  for (int g = 0; g < writer->group_count(); ++g) {
    Group& group = writer->groups_[g];
    ZEROSIM_ASSIGN_OR_RETURN(group.queue, make_checkpoint_queue(disk, file, queue_options, IoDirection::kWrite));
    group.buffers.resize(static_cast<size_t>(options.buffers_per_group));
  }
  ZEROSIM_RETURN_IF_ERROR(writer->prepare_buffer(writer->groups_[0].buffers[0]));
  return writer;
}

ParallelFileWriter::~ParallelFileWriter() {
  // The queues' writes read the buffers: none may outlive them (errors were the caller's to see).
  for (Group& group : groups_) {
    if (group.in_flight) (void)group.queue->wait_all();
  }
}

Status ParallelFileWriter::prepare_buffer(AlignedBuffer& buffer) {
  if (buffer.size_bytes() == options_.buffer_bytes) return Status();
  // Pinned (locked in RAM, best effort) for direct transfers, as DeepSpeed's io buffers are.
  ZEROSIM_ASSIGN_OR_RETURN(buffer, AlignedBuffer::allocate(options_.buffer_bytes, file_.direct_io()));
  return Status();
}

Status ParallelFileWriter::complete(Group& group) {
  if (!group.in_flight) return Status();
  group.in_flight = false;
  ZEROSIM_RETURN_IF_ERROR(group.queue->wait_all());
  // A direct write left no dirty pages to start.
  if (file_.direct_io()) return Status();
  return file_.start_writeback(group.first_offset, group.end_offset - group.first_offset);
}

Status ParallelFileWriter::submit_current_buffer() {
  if (buffer_used_ == 0) return Status();
  Group& group = groups_[group_];
  AlignedBuffer& buffer = group.buffers[static_cast<size_t>(buffer_)];
  IoRequest request;
  request.file = &file_;
  request.direction = IoDirection::kWrite;
  request.offset_bytes = submitted_bytes_;
  request.buffer = buffer.data();
  request.length_bytes = buffer_used_;
  if (file_.direct_io() && buffer_used_ % kDirectIoAlignmentBytes != 0) {
    // Only the stream's last buffer is partial: zeros to the alignment, cut off by finish().
    const size_t padded = (buffer_used_ + kDirectIoAlignmentBytes - 1) / kDirectIoAlignmentBytes * kDirectIoAlignmentBytes;
    std::memset(buffer.data() + buffer_used_, 0, padded - buffer_used_);
    request.length_bytes = padded;
  }
  if (!file_.direct_io() && !group.in_flight) {
    // One group's writes at a time (see create): the other group's end before this one's start.
    for (Group& other : groups_) {
      if (&other != &group) ZEROSIM_RETURN_IF_ERROR(complete(other));
    }
  }
  ZEROSIM_RETURN_IF_ERROR(group.queue->submit(request));
  if (!group.in_flight) group.first_offset = submitted_bytes_;
  group.in_flight = true;
  submitted_bytes_ += buffer_used_;
  group.end_offset = submitted_bytes_;
  buffer_used_ = 0;
  return Status();
}

Status ParallelFileWriter::submit_current() {
  ZEROSIM_RETURN_IF_ERROR(submit_current_buffer());
  if (++buffer_ == options_.buffers_per_group) {
    buffer_ = 0;
    // The next group (the same one when not double-buffered): its writes end before its reuse.
    group_ = (group_ + 1) % group_count();
    ZEROSIM_RETURN_IF_ERROR(complete(groups_[group_]));
  }
  return prepare_buffer(groups_[group_].buffers[static_cast<size_t>(buffer_)]);
}

Status ParallelFileWriter::append(std::span<const std::byte> bytes) {
  ZEROSIM_CHECK(!finished_, "bytes appended to a finished parallel writer");
  ZEROSIM_RETURN_IF_ERROR(failed_);
  while (!bytes.empty()) {
    AlignedBuffer& buffer = groups_[group_].buffers[static_cast<size_t>(buffer_)];
    const size_t taken = std::min(bytes.size(), options_.buffer_bytes - buffer_used_);
    std::memcpy(buffer.data() + buffer_used_, bytes.data(), taken);
    buffer_used_ += taken;
    appended_bytes_ += taken;
    bytes = bytes.subspan(taken);
    if (buffer_used_ == options_.buffer_bytes) {
      if (Status submitted = submit_current(); !submitted.ok()) {
        failed_ = submitted;
        return submitted;
      }
    }
  }
  return Status();
}

Status ParallelFileWriter::finish() {
  if (finished_) return failed_;
  finished_ = true;
  const bool padded = file_.direct_io() && appended_bytes_ % kDirectIoAlignmentBytes != 0;
  if (failed_.ok()) failed_ = submit_current_buffer();
  // The older group first, so that writeback starts in file order.
  for (int g = 1; g <= group_count(); ++g) {
    const Status completed = complete(groups_[(group_ + g) % group_count()]);
    if (failed_.ok()) failed_ = completed;
  }
  if (failed_.ok() && padded) failed_ = file_.truncate(appended_bytes_);
  return failed_;
}

}  // namespace zerosim
