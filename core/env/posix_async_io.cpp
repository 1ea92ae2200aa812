#include "core/env/posix_async_io.h"

#include <libaio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "core/env/disk.h"

namespace zerosim {

Status validate_async_io_options(const AsyncIoOptions& options) {
  if (options.block_size_bytes < 4096 || options.block_size_bytes % 4096 != 0) {
    return invalid_argument("aio.block_size must be a positive multiple of 4096 bytes, got " +
                            std::to_string(options.block_size_bytes));
  }
  if (options.queue_depth < 1 || options.queue_depth > 65536) {
    return invalid_argument("aio.queue_depth must be in 1..65536, got " + std::to_string(options.queue_depth));
  }
  if (options.intra_op_parallelism < 1 || options.intra_op_parallelism > 256) {
    return invalid_argument("aio.intra_op_parallelism must be in 1..256, got " +
                            std::to_string(options.intra_op_parallelism));
  }
  return Status();
}

namespace {

// One contiguous piece of a transfer, at most block_size bytes.
struct IoPiece {
  int descriptor = -1;
  const std::string* path = nullptr;
  IoDirection direction = IoDirection::kRead;
  uint64_t offset_bytes = 0;
  std::byte* buffer = nullptr;
  uint64_t length_bytes = 0;
};

Status piece_error(const IoPiece& piece, int error_number) {
  const std::string what = std::string(piece.direction == IoDirection::kRead ? "read " : "write ") + *piece.path +
                           " at offset " + std::to_string(piece.offset_bytes) + " length " +
                           std::to_string(piece.length_bytes) + ": " + std::strerror(error_number);
  if (error_number == ENOSPC || error_number == EDQUOT) return resource_exhausted(what);
  if (error_number == EINVAL) return invalid_argument(what);
  return io_error(what);
}

Status short_transfer(const IoPiece& piece, uint64_t done_bytes) {
  return data_loss(std::string("short ") + (piece.direction == IoDirection::kRead ? "read of " : "write of ") +
                   *piece.path + " at offset " + std::to_string(piece.offset_bytes) + ": " +
                   std::to_string(done_bytes) + " of " + std::to_string(piece.length_bytes) + " bytes");
}

// A worker owns one I/O context (libaio) or does synchronous pread/pwrite, and runs the
// pieces handed to it in order, keeping up to queue_depth in flight.
class IoWorker {
 public:
  IoWorker(const AsyncIoOptions& options, bool use_libaio) : options_(options), use_libaio_(use_libaio) {}
  ~IoWorker() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (context_ != nullptr) io_destroy(context_);
  }

  Status start() {
    if (use_libaio_) {
      const int result = io_setup(static_cast<int>(options_.queue_depth), &context_);
      if (result < 0) {
        context_ = nullptr;
        return io_error(std::string("io_setup(queue_depth=") + std::to_string(options_.queue_depth) +
                        "): " + std::strerror(-result) + " (see /proc/sys/fs/aio-max-nr)");
      }
    }
    thread_ = std::thread([this] { run(); });
    return Status();
  }

  void enqueue(std::vector<IoPiece> pieces) {
    {
      std::lock_guard lock(mutex_);
      for (IoPiece& piece : pieces) pending_.push_back(piece);
    }
    wake_.notify_all();
  }

  // Waits until every enqueued piece is done; returns and clears the first error.
  Status wait_idle() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return pending_.empty() && !busy_; });
    Status status = first_error_;
    first_error_ = Status();
    return status;
  }

 private:
  void run() {
    for (;;) {
      std::vector<IoPiece> batch;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
        if (pending_.empty() && stopping_) return;
        batch.assign(pending_.begin(), pending_.end());
        pending_.clear();
        busy_ = true;
      }
      Status status = use_libaio_ ? run_libaio(batch) : run_synchronous(batch);
      {
        std::lock_guard lock(mutex_);
        if (!status.ok() && first_error_.ok()) first_error_ = status;
        busy_ = pending_.empty() ? false : busy_;
        if (pending_.empty()) busy_ = false;
      }
      idle_.notify_all();
    }
  }

  static Status run_synchronous(const std::vector<IoPiece>& pieces) {
    for (const IoPiece& piece : pieces) {
      uint64_t done_bytes = 0;
      while (done_bytes < piece.length_bytes) {
        const ssize_t count =
            piece.direction == IoDirection::kRead
                ? ::pread(piece.descriptor, piece.buffer + done_bytes, piece.length_bytes - done_bytes,
                          static_cast<off_t>(piece.offset_bytes + done_bytes))
                : ::pwrite(piece.descriptor, piece.buffer + done_bytes, piece.length_bytes - done_bytes,
                           static_cast<off_t>(piece.offset_bytes + done_bytes));
        if (count < 0) {
          if (errno == EINTR) continue;
          return piece_error(piece, errno);
        }
        if (count == 0) return short_transfer(piece, done_bytes);
        done_bytes += static_cast<uint64_t>(count);
      }
    }
    return Status();
  }

  Status run_libaio(const std::vector<IoPiece>& pieces) {
    const size_t depth = static_cast<size_t>(options_.queue_depth);
    std::vector<struct iocb> control_blocks(pieces.size());
    std::vector<struct io_event> events(depth);
    Status first_error;
    size_t next = 0;
    size_t in_flight = 0;
    while (next < pieces.size() || in_flight > 0) {
      // Fill the window: all free slots with overlap_events, else only when it drained.
      const bool may_submit = options_.overlap_events || in_flight == 0;
      if (may_submit && first_error.ok()) {
        const size_t window_end = std::min(pieces.size(), next + (depth - in_flight));
        std::vector<struct iocb*> to_submit;
        for (size_t i = next; i < window_end; ++i) {
          const IoPiece& piece = pieces[i];
          if (piece.direction == IoDirection::kRead) {
            io_prep_pread(&control_blocks[i], piece.descriptor, piece.buffer, piece.length_bytes,
                          static_cast<long long>(piece.offset_bytes));
          } else {
            io_prep_pwrite(&control_blocks[i], piece.descriptor, piece.buffer, piece.length_bytes,
                           static_cast<long long>(piece.offset_bytes));
          }
          control_blocks[i].data = const_cast<IoPiece*>(&piece);
          to_submit.push_back(&control_blocks[i]);
        }
        size_t submitted = 0;
        while (submitted < to_submit.size()) {
          const long count = options_.single_submit ? 1 : static_cast<long>(to_submit.size() - submitted);
          const int result = io_submit(context_, count, to_submit.data() + submitted);
          if (result == -EAGAIN || result == -EINTR) {
            if (in_flight + submitted > 0) break;  // reap first, then retry
            continue;
          }
          if (result < 0) {
            first_error = piece_error(pieces[next + submitted], -result);
            break;
          }
          submitted += static_cast<size_t>(result);
        }
        next += submitted;
        in_flight += submitted;
        if (!first_error.ok()) next = pieces.size();  // stop submitting; drain what is in flight
      } else if (!first_error.ok()) {
        next = pieces.size();
      }
      if (in_flight == 0) continue;
      const long minimum = options_.overlap_events ? 1 : static_cast<long>(in_flight);
      const int reaped = io_getevents(context_, minimum, static_cast<long>(depth), events.data(), nullptr);
      if (reaped == -EINTR) continue;
      if (reaped < 0) {
        // The context is unusable; the pieces in flight cannot be accounted for.
        return io_error(std::string("io_getevents: ") + std::strerror(-reaped));
      }
      for (int e = 0; e < reaped; ++e) {
        const IoPiece& piece = *static_cast<const IoPiece*>(events[static_cast<size_t>(e)].data);
        const long result = static_cast<long>(events[static_cast<size_t>(e)].res);
        if (first_error.ok()) {
          if (result < 0) first_error = piece_error(piece, static_cast<int>(-result));
          else if (static_cast<uint64_t>(result) != piece.length_bytes) first_error = short_transfer(piece, static_cast<uint64_t>(result));
        }
      }
      in_flight -= static_cast<size_t>(reaped);
    }
    return first_error;
  }

  const AsyncIoOptions options_;
  const bool use_libaio_;
  io_context_t context_ = nullptr;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<IoPiece> pending_;
  bool busy_ = false;
  bool stopping_ = false;
  Status first_error_;
};

class PosixAsyncQueue final : public AsyncIoQueue {
 public:
  PosixAsyncQueue(const AsyncIoOptions& options, bool use_libaio) : options_(options), use_libaio_(use_libaio) {}

  Status start() {
    for (int64_t i = 0; i < options_.intra_op_parallelism; ++i) {
      workers_.push_back(std::make_unique<IoWorker>(options_, use_libaio_));
      ZEROSIM_RETURN_IF_ERROR(workers_.back()->start());
    }
    return Status();
  }

  Status submit(const IoRequest& request) override {
    ZEROSIM_CHECK(request.file != nullptr, "IoRequest without a file");
    const int descriptor = request.file->native_descriptor();
    if (descriptor < 0) {
      return failed_precondition("async I/O on " + request.file->path() + ": not a POSIX file");
    }
    if (request.file->direct_io()) {
      constexpr uint64_t kAlignment = 4096;
      const auto address = reinterpret_cast<uintptr_t>(request.buffer);
      if (address % kAlignment || request.offset_bytes % kAlignment || request.length_bytes % kAlignment) {
        return invalid_argument("direct I/O on " + request.file->path() + " at offset " +
                                std::to_string(request.offset_bytes) + " length " +
                                std::to_string(request.length_bytes) + ": buffer, offset and length must be " +
                                "multiples of 4096 bytes");
      }
    }
    // Split the transfer into one contiguous slice per worker (DeepSpeed's intra-op split),
    // each cut into block_size pieces. Slices stay 4096-aligned.
    const uint64_t workers = workers_.size();
    uint64_t slice_bytes = (request.length_bytes + workers - 1) / workers;
    slice_bytes = (slice_bytes + 4095) / 4096 * 4096;
    paths_.push_back(std::make_unique<std::string>(request.file->path()));
    const std::string* path = paths_.back().get();
    for (uint64_t worker = 0; worker < workers; ++worker) {
      const uint64_t slice_begin = std::min(request.length_bytes, worker * slice_bytes);
      const uint64_t slice_end = std::min(request.length_bytes, slice_begin + slice_bytes);
      std::vector<IoPiece> pieces;
      for (uint64_t at = slice_begin; at < slice_end; at += static_cast<uint64_t>(options_.block_size_bytes)) {
        IoPiece piece;
        piece.descriptor = descriptor;
        piece.path = path;
        piece.direction = request.direction;
        piece.offset_bytes = request.offset_bytes + at;
        piece.buffer = request.buffer + at;
        piece.length_bytes = std::min<uint64_t>(static_cast<uint64_t>(options_.block_size_bytes), slice_end - at);
        pieces.push_back(piece);
      }
      if (!pieces.empty()) workers_[worker]->enqueue(std::move(pieces));
    }
    return Status();
  }

  Status wait_all() override {
    Status first;
    for (auto& worker : workers_) {
      Status status = worker->wait_idle();
      if (first.ok() && !status.ok()) first = status;
    }
    paths_.clear();
    return first;
  }

  const char* engine_name() const override { return use_libaio_ ? "libaio" : "pread/pwrite"; }

 private:
  const AsyncIoOptions options_;
  const bool use_libaio_;
  std::vector<std::unique_ptr<IoWorker>> workers_;
  std::vector<std::unique_ptr<std::string>> paths_;  // names for error messages, alive until wait_all
};

}  // namespace

Result<std::unique_ptr<AsyncIoQueue>> make_posix_async_queue(const AsyncIoOptions& options, bool use_libaio) {
  ZEROSIM_RETURN_IF_ERROR(validate_async_io_options(options));
  auto queue = std::make_unique<PosixAsyncQueue>(options, use_libaio);
  ZEROSIM_RETURN_IF_ERROR(queue->start());
  return std::unique_ptr<AsyncIoQueue>(std::move(queue));
}

}  // namespace zerosim
