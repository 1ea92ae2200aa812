// Reads a file from its first byte to its last, in order, ahead of its caller, and hashes
// every byte as it passes: the reading half of a checkpoint's shard I/O (the writing half is
// parallel_file_writer.h; the settings are checkpoint_io.h's).
//
// The file is read ahead in batches, two (one when not double-buffered): both are filled at
// the start (with one stream, below, the second's reads start when the first's end); the
// caller takes bytes (read, or skip) out of one batch while the other's reads run, and a batch
// is refilled with the next unread part of the file as soon as the caller has taken all of its
// bytes. So the caller's copying and the XXH3-128 of every byte overlap the I/O, and the file
// is read once, whichever parts the caller wants: what it skips is read and
// hashed too, so that checksum() is the whole file's once it is all taken. The caller trusts
// nothing it read before that checksum matches the manifest's.
//
// A batch is read into staging buffers, or, on a buffered file, straight into the caller's
// destination: when a batch is refilled during a read() whose destination still has at least a
// staging buffer's worth of bytes past everything queued, that part is read there and hashed
// in place (a large tensor then costs the kernel's copy and the hash, not a copy more through
// staging). Such a batch ends with the read, so no transfer into the destination outlives the
// call that gave it, not even one that fails.
//
// With CheckpointIoOptions::sequential_reads a buffered file is read as one stream: a batch's
// reads are submitted only when the other batch's have ended (the consumer starts them when it
// has waited for that batch, and hashes and takes it while they run), by one thread in preads
// of a buffer, in file order. Several threads of preads at interleaved offsets of one file read
// it 10-13% slower than one sequential reader on the GPU machine's virtual disk (read_pattern_
// bench, bench/checkpoints.md): the kernel's read-ahead follows one reader, not several.
//
// On a direct (O_DIRECT) file the reads go through libaio into 4096-aligned buffers; a last
// block that the file ends inside is read through a buffered handle of the same file. Every
// read's completion is checked; a failure names the file, the offset and the length, and the
// reader takes no more calls after it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_io.h"
#include "core/checkpoint/manifest.h"
#include "core/env/disk.h"
#include "core/status.h"

namespace zerosim {

class ParallelFileReader {
 public:
  // Opens `path` (direct when options.direct_io and the file system allows it; see note())
  // to read its first `size_bytes` bytes, which the caller has checked are all of it.
  static Result<std::unique_ptr<ParallelFileReader>> open(Disk& disk, const std::string& path, uint64_t size_bytes,
                                                          const CheckpointIoOptions& options);
  ~ParallelFileReader();
  ParallelFileReader(const ParallelFileReader&) = delete;
  ParallelFileReader& operator=(const ParallelFileReader&) = delete;

  // The next destination.size() bytes of the file, into destination.
  Status read(std::span<std::byte> destination);
  // The next `bytes` bytes, read and hashed, not kept.
  Status skip(uint64_t bytes);
  uint64_t position() const { return position_; }
  uint64_t size_bytes() const { return size_bytes_; }
  // XXH3-128 (32 hex digits) of every byte taken so far: the file's, once position() == size_bytes().
  std::string checksum() const { return hash_.hex(); }
  // Not empty when O_DIRECT was asked for and refused (see open_checkpoint_file).
  const std::string& note() const { return note_; }
  const std::string& path() const { return file_->path(); }

 private:
  // A contiguous part of the file in one batch, read into `target`: a staging buffer, or the
  // destination of the read() that queued it (`direct`).
  struct Segment {
    uint64_t offset_bytes = 0;
    uint64_t length_bytes = 0;
    std::byte* target = nullptr;
    bool direct = false;
  };
  struct Batch {
    std::unique_ptr<AsyncIoQueue> queue;
    std::vector<AlignedBuffer> buffers;
    std::vector<Segment> segments;  // in file order, contiguous
    uint64_t begin_bytes = 0;       // the file's bytes [begin, end)
    uint64_t end_bytes = 0;
    bool in_flight = false;
    bool pending = false;           // filled, its reads not submitted yet (one stream)
    bool ready = false;             // waited for and hashed
  };
  ParallelFileReader(const CheckpointIoOptions& options, uint64_t size_bytes, uint64_t buffer_bytes)
      : options_(options), size_bytes_(size_bytes), buffer_bytes_(buffer_bytes) {}
  uint64_t batch_count() const { return options_.double_buffered ? 2 : 1; }
  // Sequential reads of a buffered file: one batch's reads in flight at a time.
  bool one_stream() const { return options_.sequential_reads && !file_->direct_io(); }
  // Plans the reads of the file's next unqueued part (from queued_end_) into `batch`: straight
  // into the current read's destination where it reaches far enough, else staging buffers;
  // and submits them, unless one stream and the other batch's reads are in flight (pending).
  Status fill(Batch& batch);
  // Submits the batch's planned reads.
  Status submit(Batch& batch);
  // Makes the batch holding position_ readable (refilling the one before it, waiting for it,
  // hashing it) and returns it.
  Result<Batch*> current_batch();
  // Takes `bytes` bytes from position_ on; copies them to `destination` unless it is null.
  Status take(std::byte* destination, uint64_t bytes);
  // Records the first failure, after every queued read has ended (none may write into a
  // destination the caller gets back).
  Status fail(Status status);

  const CheckpointIoOptions options_;
  const uint64_t size_bytes_;
  const uint64_t buffer_bytes_;  // a staging buffer; the file's size rounded up to 4096 when smaller
  std::unique_ptr<File> file_;
  std::unique_ptr<File> tail_file_;  // buffered, for a direct file's last partial block
  std::string note_;
  Batch batches_[2];
  size_t front_ = 0;               // the batch that holds position_ (or the next one to)
  uint64_t position_ = 0;
  uint64_t queued_end_ = 0;        // every byte before it is in a batch
  // The read() in progress: its destination holds the file's bytes [read_begin_, read_end_).
  std::byte* read_destination_ = nullptr;
  uint64_t read_begin_ = 0;
  uint64_t read_end_ = 0;
  StreamingHash hash_;
  Status failed_;
};

}  // namespace zerosim
