// Writes a byte stream into a file, from offset 0 in order: what the caller appends is copied
// into staging buffers, and each full buffer goes to the Disk's async queue while the caller
// fills the next. The buffers form two groups, each with its own queue: the caller fills one
// group while the other's writes run, and waits for a group's writes only before it reuses
// that group's buffers. A group's bytes, once written, start going to the device
// (File::start_writeback) while the next ones are made. So a checkpoint shard is serialized and
// hashed (by the caller) while its earlier bytes are being written.
//
// Through the page cache a file is written by one thread, one group at a time: Linux's local
// file systems (ext4, XFS, btrfs) hold the inode's lock exclusively for a buffered write, so a
// second writer of the same file only spins on that lock, on a CPU the rank's copying and
// hashing (or the training step beside an async save) could use. Measured: the same save rate
// on the GPU machine's host (1 GiB at W = 1: 2416 MB/s against 2139 with four threads a buffer
// and both groups in flight; W = 4: 2530 against 2656), while on the 2-core VM `perf` put a third
// of a save's samples in rwsem_spin_on_owner under ext4_buffered_write_iter.
//
// On a direct (O_DIRECT) file the buffers are 4096-aligned and go through libaio; the last one
// is written padded to 4096 bytes and the file then truncated to the stream's length.
//
// Crash consistency is the caller's, as before: nothing written is durable before File::sync,
// and the writes of a group may complete in any order (the simulator's queue reorders them).
// Every write's completion is checked; finish() reports the first failure, naming the file,
// the offset and the length (the queue's message).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/checkpoint/checkpoint_io.h"
#include "core/env/disk.h"
#include "core/status.h"

namespace zerosim {

class ParallelFileWriter {
 public:
  // `file` (opened by open_checkpoint_file, direct or not) must outlive the writer. Fails when
  // the options are out of range or the disk cannot make an async queue.
  static Result<std::unique_ptr<ParallelFileWriter>> create(Disk& disk, File& file, const CheckpointIoOptions& options);
  ~ParallelFileWriter();
  ParallelFileWriter(const ParallelFileWriter&) = delete;
  ParallelFileWriter& operator=(const ParallelFileWriter&) = delete;

  // Copies `bytes` to the end of the stream (the file's offset written_bytes() on).
  Status append(std::span<const std::byte> bytes);
  // Writes what is staged and waits for every write. After it, or after any error, the writer
  // takes no more bytes.
  Status finish();
  uint64_t appended_bytes() const { return appended_bytes_; }

 private:
  struct Group {
    std::unique_ptr<AsyncIoQueue> queue;
    std::vector<AlignedBuffer> buffers;
    bool in_flight = false;
    uint64_t first_offset = 0, end_offset = 0;  // the file range its writes in flight cover
  };
  // Waits for the group's writes, then starts their writeback (File::start_writeback), so the
  // final sync() does not flush the whole file at once.
  Status complete(Group& group);
  ParallelFileWriter(File& file, const CheckpointIoOptions& options) : file_(file), options_(options) {}
  // Allocates a staging buffer on its first use.
  Status prepare_buffer(AlignedBuffer& buffer);
  // Queues the current buffer's bytes (on a direct file padded to 4096) at their offset.
  Status submit_current_buffer();
  // Submits the current buffer; moves to the next buffer (the next group's first, after
  // waiting for that group's writes, when this group is used up).
  Status submit_current();

  File& file_;
  const CheckpointIoOptions options_;
  Group groups_[2];
  int group_count() const { return options_.double_buffered ? 2 : 1; }
  int group_ = 0;          // the group being filled
  int buffer_ = 0;         // its buffer being filled
  size_t buffer_used_ = 0;
  uint64_t appended_bytes_ = 0;
  uint64_t submitted_bytes_ = 0;
  Status failed_;          // the first error; the writer is done after it
  bool finished_ = false;
};

}  // namespace zerosim
