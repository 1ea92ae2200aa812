// The async I/O queue of the Disk seam: how the swapper moves optimizer state.
//
// A queue takes transfers (read or write of a buffer at a file offset), cuts each into
// block_size pieces and keeps up to queue_depth of them in flight, with DeepSpeed's meanings
// of single_submit and overlap_events (docs/deepspeed-semantics.md §2.5). wait_all() returns when
// every transfer submitted so far has completed, with the first failure: every completion's
// result is checked, and a short transfer, EIO or ENOSPC becomes an error that names the file,
// the offset and the length of the piece that failed.
//
// Buffers, offsets and lengths of direct transfers must be aligned to the disk's
// direct_io_alignment_bytes(); a buffer must stay valid until wait_all() returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace zerosim {

class File;

struct AsyncIoOptions {
  int64_t block_size_bytes = 1048576;  // aio.block_size
  int64_t queue_depth = 8;             // aio.queue_depth
  int64_t intra_op_parallelism = 1;    // aio.intra_op_parallelism: contexts (threads) per transfer
  bool single_submit = false;          // aio.single_submit: one io_submit per piece
  bool overlap_events = true;          // aio.overlap_events: refill as pieces complete
};

enum class IoDirection { kRead, kWrite };

struct IoRequest {
  File* file = nullptr;
  IoDirection direction = IoDirection::kRead;
  uint64_t offset_bytes = 0;
  std::byte* buffer = nullptr;
  uint64_t length_bytes = 0;
};

class AsyncIoQueue {
 public:
  virtual ~AsyncIoQueue() = default;
  // Queues a transfer. Errors here are about the request itself (a file this queue cannot
  // drive, misalignment); I/O errors are reported by wait_all().
  virtual Status submit(const IoRequest& request) = 0;
  // Waits for every submitted transfer and reports the first failure.
  virtual Status wait_all() = 0;
  // "libaio" or "pread/pwrite": for the log line and the benchmark.
  virtual const char* engine_name() const = 0;
};

// Validates the options (positive sizes; block size a multiple of 4096) with the config key
// in the message.
Status validate_async_io_options(const AsyncIoOptions& options);

}  // namespace zerosim
