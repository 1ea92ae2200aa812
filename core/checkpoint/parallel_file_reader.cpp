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
  for (uint64_t b = 0; b < reader->batch_count(); ++b) {
    Batch& batch = reader->batches_[b];
    ZEROSIM_ASSIGN_OR_RETURN(batch.queue, make_checkpoint_queue(disk, *reader->file_, options, IoDirection::kRead));
    batch.buffers.resize(static_cast<size_t>(options.buffers_per_group));
    ZEROSIM_RETURN_IF_ERROR(reader->fill(batch));
  }
  return reader;
}

ParallelFileReader::~ParallelFileReader() {
  // The queues' reads write into the buffers: none may outlive them.
  for (Batch& batch : batches_) {
    if (batch.in_flight && batch.queue) (void)batch.queue->wait_all();
  }
}

Status ParallelFileReader::fill(Batch& batch) {
  batch.segments.clear();
  batch.ready = false;
  batch.pending = false;
  batch.begin_bytes = batch.end_bytes = queued_end_;
  if (queued_end_ >= size_bytes_) return Status();
  ZEROSIM_CHECK(read_destination_ == nullptr || (read_begin_ <= queued_end_),
                "everything before the read's position is queued");
  // Straight into the read's destination: a buffered file, and a staging buffer's worth or
  // more of the destination not queued yet (a shorter rest is staged, as the file's next part
  // is read ahead anyway). O_DIRECT would need the destination and the file offset aligned,
  // which a tensor in a shard seldom is; direct files keep their aligned staging buffers.
  if (!file_->direct_io() && read_destination_ != nullptr && read_end_ >= queued_end_ + buffer_bytes_) {
    const uint64_t batch_bytes = static_cast<uint64_t>(options_.buffers_per_group) * buffer_bytes_;
    Segment segment;
    segment.offset_bytes = queued_end_;
    segment.length_bytes = std::min(read_end_ - queued_end_, batch_bytes);
    segment.target = read_destination_ + (queued_end_ - read_begin_);
    segment.direct = true;
    batch.segments.push_back(segment);
  } else {
    for (size_t i = 0; i < batch.buffers.size(); ++i) {
      const uint64_t offset = queued_end_ + i * buffer_bytes_;
      if (offset >= size_bytes_) break;
      AlignedBuffer& buffer = batch.buffers[i];
      if (buffer.size_bytes() != buffer_bytes_) {
        // Pinned (locked in RAM, best effort) for direct transfers, as DeepSpeed's io buffers are.
        ZEROSIM_ASSIGN_OR_RETURN(buffer, AlignedBuffer::allocate(buffer_bytes_, file_->direct_io()));
      }
      Segment segment;
      segment.offset_bytes = offset;
      segment.length_bytes = std::min(buffer_bytes_, size_bytes_ - offset);
      segment.target = buffer.data();
      batch.segments.push_back(segment);
    }
  }
  batch.end_bytes = queued_end_ = batch.segments.back().offset_bytes + batch.segments.back().length_bytes;
  // One stream: this batch's reads start when the other's have ended (current_batch()).
  const Batch& other = batches_[(&batch - batches_ + 1) % batch_count()];
  if (one_stream() && &other != &batch && other.in_flight) {
    batch.pending = true;
    return Status();
  }
  return submit(batch);
}

Status ParallelFileReader::submit(Batch& batch) {
  batch.pending = false;
  for (const Segment& segment : batch.segments) {
    // A direct read stops at the last 4096 boundary; the rest comes through the page cache.
    const uint64_t queued = tail_file_ ? segment.length_bytes / kDirectIoAlignmentBytes * kDirectIoAlignmentBytes
                                       : segment.length_bytes;
    if (queued > 0) {
      IoRequest request;
      request.file = file_.get();
      request.direction = IoDirection::kRead;
      request.offset_bytes = segment.offset_bytes;
      request.buffer = segment.target;
      request.length_bytes = queued;
      ZEROSIM_RETURN_IF_ERROR(batch.queue->submit(request));
      batch.in_flight = true;
    }
    if (queued < segment.length_bytes) {
      ZEROSIM_RETURN_IF_ERROR(tail_file_->read_exact(
          segment.offset_bytes + queued, std::span<std::byte>(segment.target + queued, segment.length_bytes - queued)));
    }
  }
  return Status();
}

Result<ParallelFileReader::Batch*> ParallelFileReader::current_batch() {
  Batch* batch = &batches_[front_];
  if (position_ >= batch->end_bytes) {
    // The caller has taken all of this batch: it reads the file's next unqueued part (with one
    // batch, the part the caller wants now), and the next batch holds position_.
    ZEROSIM_RETURN_IF_ERROR(fill(*batch));
    front_ = (front_ + 1) % batch_count();
    batch = &batches_[front_];
  }
  ZEROSIM_CHECK(position_ >= batch->begin_bytes && position_ < batch->end_bytes, "the front batch holds the position");
  if (!batch->ready) {
    ZEROSIM_CHECK(!batch->pending, "a pending batch is submitted when the one before it is waited for");
    if (batch->in_flight) {
      batch->in_flight = false;
      ZEROSIM_RETURN_IF_ERROR(batch->queue->wait_all());
    }
    // One stream: the next batch's reads run while this one is hashed and taken.
    Batch& next = batches_[(front_ + 1) % batch_count()];
    if (next.pending) ZEROSIM_RETURN_IF_ERROR(submit(next));
    for (const Segment& segment : batch->segments) {
      hash_.update(std::span<const std::byte>(segment.target, segment.length_bytes));
    }
    batch->ready = true;
  }
  return batch;
}

Status ParallelFileReader::fail(Status status) {
  for (Batch& batch : batches_) {
    if (batch.in_flight) {
      batch.in_flight = false;
      (void)batch.queue->wait_all();
    }
  }
  read_destination_ = nullptr;
  failed_ = std::move(status);
  return failed_;
}

Status ParallelFileReader::take(std::byte* destination, uint64_t bytes) {
  ZEROSIM_RETURN_IF_ERROR(failed_);
  if (bytes > size_bytes_ - position_) {
    return fail(data_loss("read of " + file_->path() + " at offset " + std::to_string(position_) + " length " +
                          std::to_string(bytes) + ": past its end at " + std::to_string(size_bytes_)));
  }
  read_destination_ = destination;
  read_begin_ = position_;
  read_end_ = position_ + bytes;
  while (bytes > 0) {
    Result<Batch*> current = current_batch();
    if (!current.ok()) return fail(current.status());
    for (const Segment& segment : (*current)->segments) {
      if (position_ < segment.offset_bytes || position_ >= segment.offset_bytes + segment.length_bytes) continue;
      const uint64_t in_segment = position_ - segment.offset_bytes;
      const uint64_t taken = std::min(bytes, segment.length_bytes - in_segment);
      if (destination != nullptr) {
        if (segment.direct) {
          ZEROSIM_CHECK(segment.target + in_segment == destination, "a direct segment is read where the caller wants it");
        } else {
          std::memcpy(destination, segment.target + in_segment, taken);
        }
        destination += taken;
      }
      position_ += taken;
      bytes -= taken;
      if (bytes == 0) break;
    }
  }
  read_destination_ = nullptr;
  return Status();
}

Status ParallelFileReader::read(std::span<std::byte> destination) { return take(destination.data(), destination.size()); }

Status ParallelFileReader::skip(uint64_t bytes) { return take(nullptr, bytes); }

}  // namespace zerosim
