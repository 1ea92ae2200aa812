#include "core/checkpoint/checkpoint_io.h"

#include <algorithm>

namespace zerosim {

Status validate_checkpoint_io_options(const CheckpointIoOptions& options, const std::string& path) {
  if (options.buffer_bytes < kDirectIoAlignmentBytes || options.buffer_bytes % kDirectIoAlignmentBytes != 0 ||
      options.buffers_per_group < 1 || options.threads < 1 || options.threads > 256) {
    return invalid_argument("checkpoint I/O for " + path + ": buffers of " + std::to_string(options.buffer_bytes) +
                            " bytes (a positive multiple of 4096), " + std::to_string(options.buffers_per_group) +
                            " per group (at least 1), " + std::to_string(options.threads) + " threads (1 to 256)");
  }
  if (options.direct_io) {
    if (Status aio = validate_async_io_options(options.aio); !aio.ok()) {
      return invalid_argument("checkpoint I/O for " + path + ": " + aio.message());
    }
  }
  return Status();
}

Result<CheckpointFile> open_checkpoint_file(Disk& disk, const std::string& path, OpenMode mode, bool direct_io) {
  CheckpointFile opened;
  FileOpenOptions options;
  options.mode = mode;
  if (direct_io) {
    options.direct_io = true;
    Result<std::unique_ptr<File>> direct = disk.open(path, options);
    if (direct.ok()) {
      opened.file = std::move(direct).value();
      return opened;
    }
    // EINVAL is the file system saying no to O_DIRECT (tmpfs before Linux 6.6, some overlays);
    // any other error is the open's own.
    if (direct.status().code() != StatusCode::kInvalidArgument) return direct.status();
    opened.note = "O_DIRECT is refused for " + path + " (" + direct.status().message() +
                  "); checkpoint I/O there goes through the page cache";
    options.direct_io = false;
  }
  ZEROSIM_ASSIGN_OR_RETURN(opened.file, disk.open(path, options));
  return opened;
}

Result<std::unique_ptr<AsyncIoQueue>> make_checkpoint_queue(Disk& disk, const File& file,
                                                            const CheckpointIoOptions& options, IoDirection direction) {
  if (file.direct_io()) return disk.make_async_queue(options.aio, Disk::AsyncEngine::kLibaio);
  AsyncIoOptions buffered;
  buffered.queue_depth = 8;
  if (direction == IoDirection::kRead && options.sequential_reads) {
    buffered.block_size_bytes = static_cast<int64_t>(options.buffer_bytes);
    buffered.intra_op_parallelism = 1;
    return disk.make_async_queue(buffered, Disk::AsyncEngine::kPreadPwrite);
  }
  buffered.block_size_bytes = static_cast<int64_t>(std::min<size_t>(options.buffer_bytes, size_t{1} << 20));
  buffered.intra_op_parallelism = options.threads;
  return disk.make_async_queue(buffered, Disk::AsyncEngine::kPreadPwrite);
}

}  // namespace zerosim
