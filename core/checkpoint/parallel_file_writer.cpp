#include "core/checkpoint/parallel_file_writer.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace zerosim {

Result<std::unique_ptr<ParallelFileWriter>> ParallelFileWriter::create(Disk& disk, File& file,
                                                                        const ParallelWriteOptions& options) {
  if (options.buffer_bytes < 4096 || options.buffer_bytes % 4096 != 0 || options.buffers_per_group < 1 ||
      options.writer_threads < 1 || options.writer_threads > 256) {
    return invalid_argument("parallel writer for " + file.path() + ": buffers of " + std::to_string(options.buffer_bytes) +
                            " bytes (a positive multiple of 4096), " + std::to_string(options.buffers_per_group) +
                            " per group (at least 1), " + std::to_string(options.writer_threads) +
                            " writer threads (1 to 256)");
  }
  std::unique_ptr<ParallelFileWriter> writer(new ParallelFileWriter(file, options));
  AsyncIoOptions queue_options;
  queue_options.block_size_bytes = static_cast<int64_t>(std::min<size_t>(options.buffer_bytes, size_t{1} << 20));
  queue_options.queue_depth = 8;
  queue_options.intra_op_parallelism = options.writer_threads;
  for (Group& group : writer->groups_) {
    ZEROSIM_ASSIGN_OR_RETURN(group.queue, disk.make_async_queue(queue_options, Disk::AsyncEngine::kPreadPwrite));
    group.buffers.resize(static_cast<size_t>(options.buffers_per_group));
  }
  writer->groups_[0].buffers[0].resize(options.buffer_bytes);
  return writer;
}

ParallelFileWriter::~ParallelFileWriter() {
  // The queues' writes read the buffers: none may outlive them (errors were the caller's to see).
  for (Group& group : groups_) {
    if (group.in_flight) (void)group.queue->wait_all();
  }
}

Status ParallelFileWriter::complete(Group& group) {
  if (!group.in_flight) return Status();
  group.in_flight = false;
  ZEROSIM_RETURN_IF_ERROR(group.queue->wait_all());
  return file_.start_writeback(group.first_offset, group.end_offset - group.first_offset);
}

Status ParallelFileWriter::submit_current() {
  Group& group = groups_[group_];
  std::vector<std::byte>& buffer = group.buffers[static_cast<size_t>(buffer_)];
  if (buffer_used_ > 0) {
    IoRequest request;
    request.file = &file_;
    request.direction = IoDirection::kWrite;
    request.offset_bytes = submitted_bytes_;
    request.buffer = buffer.data();
    request.length_bytes = buffer_used_;
    ZEROSIM_RETURN_IF_ERROR(group.queue->submit(request));
    if (!group.in_flight) group.first_offset = submitted_bytes_;
    group.in_flight = true;
    submitted_bytes_ += buffer_used_;
    group.end_offset = submitted_bytes_;
    buffer_used_ = 0;
  }
  if (++buffer_ == options_.buffers_per_group) {
    buffer_ = 0;
    group_ = 1 - group_;
    ZEROSIM_RETURN_IF_ERROR(complete(groups_[group_]));
  }
  std::vector<std::byte>& next_buffer = groups_[group_].buffers[static_cast<size_t>(buffer_)];
  if (next_buffer.size() != options_.buffer_bytes) next_buffer.resize(options_.buffer_bytes);
  return Status();
}

Status ParallelFileWriter::append(std::span<const std::byte> bytes) {
  ZEROSIM_CHECK(!finished_, "bytes appended to a finished parallel writer");
  ZEROSIM_RETURN_IF_ERROR(failed_);
  while (!bytes.empty()) {
    std::vector<std::byte>& buffer = groups_[group_].buffers[static_cast<size_t>(buffer_)];
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
  if (failed_.ok() && buffer_used_ > 0) {
    Group& group = groups_[group_];
    IoRequest request;
    request.file = &file_;
    request.direction = IoDirection::kWrite;
    request.offset_bytes = submitted_bytes_;
    request.buffer = group.buffers[static_cast<size_t>(buffer_)].data();
    request.length_bytes = buffer_used_;
    failed_ = group.queue->submit(request);
    if (failed_.ok()) {
      if (!group.in_flight) group.first_offset = submitted_bytes_;
      group.in_flight = true;
      submitted_bytes_ += buffer_used_;
      group.end_offset = submitted_bytes_;
      buffer_used_ = 0;
    }
  }
  // The older group first, so that writeback starts in file order.
  for (Group* group : {&groups_[1 - group_], &groups_[group_]}) {
    const Status completed = complete(*group);
    if (failed_.ok()) failed_ = completed;
  }
  return failed_;
}

}  // namespace zerosim
