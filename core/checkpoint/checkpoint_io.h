// How a checkpoint's shards move between memory and the disk: the settings shared by the
// parallel writer (parallel_file_writer.h) and reader (parallel_file_reader.h), and the open
// that asks for O_DIRECT and falls back, with a note, where the file system refuses it.
//
// Two modes, as DeepSpeed's checkpoint writers (runtime/model_checkpointing: the "fast" writer
// is O_DIRECT through its aio handle with a double io buffer; without a writer, buffered
// torch.save):
//   buffered  the page cache: reads as one sequential stream a file (sequential_reads: one
//             thread, a buffer a pread, one batch in flight, the kernel reading ahead), or with
//             `threads` pread threads per staged buffer (as DCP's threads read); one writing
//             thread (see parallel_file_writer.h: the file system serializes buffered writes to
//             one file);
//   direct    O_DIRECT through libaio (the swapper's engine) with the `aio` settings: the
//             staging buffers are 4096-aligned, the device moves the bytes, no page cache.
// Either way a file is moved through staging buffers in two groups: one group's transfers run
// while the caller fills (or empties) the other, so hashing and copying overlap the I/O (one
// group when not double-buffered: the caller waits for its transfers before each refill). A
// buffered read larger than what is queued ahead skips the staging for the rest: it is read
// straight into the caller's memory (parallel_file_reader.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/env/async_io.h"
#include "core/env/disk.h"
#include "core/status.h"
#include "core/tensor/aligned_buffer.h"

namespace zerosim {

struct CheckpointIoOptions {
  size_t buffer_bytes = size_t{8} << 20;  // one staging buffer, and so one queued transfer
  int buffers_per_group = 2;
  bool double_buffered = true;            // two groups of buffers (see above), else one
  int threads = 4;          // buffered reads that are not sequential: pread threads per transfer
  // Buffered reads as one stream a file: one batch in flight, read by one thread in preads of
  // a buffer, in file order, so the kernel sees a single sequential reader and reads ahead
  // for it (parallel_file_reader.h). False: both batches in flight, `threads` threads each.
  bool sequential_reads = true;
  bool direct_io = false;   // O_DIRECT through libaio (see above), buffered where refused
  AsyncIoOptions aio;       // direct: the libaio queue's block size, depth, contexts
};

// Buffer size a positive multiple of 4096, at least one buffer per group, 1 to 256 threads,
// and (direct) valid aio settings; the error names the file and the values.
Status validate_checkpoint_io_options(const CheckpointIoOptions& options, const std::string& path);

// A file opened for a checkpoint transfer: direct when asked and the file system allows it.
struct CheckpointFile {
  std::unique_ptr<File> file;
  // Set when O_DIRECT was asked for and refused: what was used instead, naming the file.
  std::string note;
};
Result<CheckpointFile> open_checkpoint_file(Disk& disk, const std::string& path, OpenMode mode, bool direct_io);

// The queue that moves a file's staged buffers: libaio for a direct file, else the
// pread/pwrite engine with `threads` threads in 1 MiB pieces, or, for sequential reads, one
// thread in pieces of a buffer.
Result<std::unique_ptr<AsyncIoQueue>> make_checkpoint_queue(Disk& disk, const File& file,
                                                            const CheckpointIoOptions& options, IoDirection direction);

inline constexpr uint64_t kDirectIoAlignmentBytes = AlignedBuffer::kAlignmentBytes;

}  // namespace zerosim
