// Reads a file from its first byte to its last, in order, with the file system's parallelism,
// and hashes every byte as it passes: the reading half of a checkpoint's shard I/O (the
// writing half is parallel_file_writer.h; the settings are checkpoint_io.h's).
//
// The file is cut into staging buffers, in two groups (one when not double-buffered): both
// groups' reads are queued at the start; the caller takes bytes (read, or skip) out of one group's buffers while the other's
// reads run, and a group is refilled with the next unread part of the file as soon as the
// caller has taken all of its bytes. So the caller's copying and the XXH3-128 of every byte
// overlap the I/O, and the file is read once, whichever parts the caller wants: what it
// skips is read and hashed too, so that checksum() is the whole file's once it is all taken.
// The caller trusts nothing it read before that checksum matches the manifest's.
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
  struct Group {
    std::unique_ptr<AsyncIoQueue> queue;
    std::vector<AlignedBuffer> buffers;
    uint64_t first_chunk = 0;
    bool in_flight = false;
  };
  ParallelFileReader(const CheckpointIoOptions& options, uint64_t size_bytes, uint64_t buffer_bytes)
      : options_(options), size_bytes_(size_bytes), buffer_bytes_(buffer_bytes) {}
  uint64_t chunk_count() const { return (size_bytes_ + buffer_bytes_ - 1) / buffer_bytes_; }
  uint64_t chunk_length(uint64_t chunk) const { return std::min(buffer_bytes_, size_bytes_ - chunk * buffer_bytes_); }
  // Queues the reads of the group's chunks from `first_chunk` on (those the file has).
  Status fill(Group& group, uint64_t first_chunk);
  // Makes the chunk at position_ readable (waiting for its group) and hashes it.
  Status make_current_chunk_ready();
  // Takes `bytes` bytes from position_ on; copies them to `destination` unless it is null.
  Status take(std::byte* destination, uint64_t bytes);

  const CheckpointIoOptions options_;
  const uint64_t size_bytes_;
  const uint64_t buffer_bytes_;  // a chunk; the file's size rounded up to 4096 when smaller
  std::unique_ptr<File> file_;
  std::unique_ptr<File> tail_file_;  // buffered, for a direct file's last partial block
  std::string note_;
  Group groups_[2];
  uint64_t group_count() const { return options_.double_buffered ? 2 : 1; }
  uint64_t position_ = 0;
  uint64_t ready_chunk_ = UINT64_MAX;  // the chunk at position_ once waited for and hashed
  StreamingHash hash_;
  Status failed_;
};

}  // namespace zerosim
