// What the parallel reader's and writer's tests share: their settings in one call, random
// bytes from the test's seeded generator, and a disk that records what its queues were given.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include "core/checkpoint/checkpoint_io.h"
#include "tests/forwarding_disk.h"

namespace zerosim {

inline CheckpointIoOptions io(size_t buffer_bytes, int buffers_per_group, int threads, bool direct = false,
                              bool double_buffered = true) {
  CheckpointIoOptions options;
  options.buffer_bytes = buffer_bytes;
  options.buffers_per_group = buffers_per_group;
  options.threads = threads;
  options.direct_io = direct;
  options.double_buffered = double_buffered;
  options.sequential_reads = false;  // `threads` threads a buffer; one_stream() for the other mode
  return options;
}

// The same options reading a buffered file as one sequential stream.
inline CheckpointIoOptions one_stream(CheckpointIoOptions options) {
  options.sequential_reads = true;
  return options;
}

inline std::vector<std::byte> random_bytes(size_t count, std::mt19937_64& random) {
  std::vector<std::byte> bytes(count);
  // Eight bytes of each draw: the streams here are up to 21 MiB, eight times the draws and
  // stores of a byte a draw under the sanitizers.
  for (size_t at = 0; at < count; at += sizeof(uint64_t)) {
    const uint64_t word = random();
    std::memcpy(bytes.data() + at, &word, std::min(sizeof(uint64_t), count - at));
  }
  return bytes;
}

// Records, over all the queues it makes, each queue's options, every transfer submitted (its
// memory), and the most queues that had transfers outstanding (submitted, not yet waited for)
// at once.
class QueueRecordingDisk final : public ForwardingDisk {
 public:
  using ForwardingDisk::ForwardingDisk;
  Result<std::unique_ptr<AsyncIoQueue>> make_async_queue(const AsyncIoOptions& options, AsyncEngine engine) override {
    ZEROSIM_ASSIGN_OR_RETURN(std::unique_ptr<AsyncIoQueue> inner, base_.make_async_queue(options, engine));
    std::lock_guard lock(mutex_);
    queue_options_.push_back(options);
    return std::unique_ptr<AsyncIoQueue>(new Recorded(*this, std::move(inner)));
  }
  std::vector<AsyncIoOptions> queue_options() {
    std::lock_guard lock(mutex_);
    return queue_options_;
  }
  int64_t most_threads() {
    std::lock_guard lock(mutex_);
    int64_t most = 0;
    for (const AsyncIoOptions& options : queue_options_) most = std::max(most, options.intra_op_parallelism);
    return most;
  }
  int most_queues_outstanding() {
    std::lock_guard lock(mutex_);
    return most_outstanding_;
  }
  // The bytes transferred into [begin, end).
  uint64_t bytes_transferred_into(const std::byte* begin, const std::byte* end) {
    std::lock_guard lock(mutex_);
    uint64_t inside = 0;
    for (const IoRequest& request : requests_) {
      if (request.buffer >= begin && request.buffer + request.length_bytes <= end) inside += request.length_bytes;
    }
    return inside;
  }

 private:
  class Recorded final : public AsyncIoQueue {
   public:
    Recorded(QueueRecordingDisk& disk, std::unique_ptr<AsyncIoQueue> inner) : disk_(disk), inner_(std::move(inner)) {}
    Status submit(const IoRequest& request) override {
      {
        std::lock_guard lock(disk_.mutex_);
        disk_.requests_.push_back(request);
        if (!outstanding_) {
          outstanding_ = true;
          disk_.most_outstanding_ = std::max(disk_.most_outstanding_, ++disk_.outstanding_);
        }
      }
      return inner_->submit(request);
    }
    Status wait_all() override {
      Status waited = inner_->wait_all();
      std::lock_guard lock(disk_.mutex_);
      if (outstanding_) --disk_.outstanding_;
      outstanding_ = false;
      return waited;
    }
    const char* engine_name() const override { return inner_->engine_name(); }

   private:
    QueueRecordingDisk& disk_;
    std::unique_ptr<AsyncIoQueue> inner_;
    bool outstanding_ = false;  // submitted since the last wait_all (under disk_.mutex_)
  };
  std::mutex mutex_;
  std::vector<AsyncIoOptions> queue_options_;
  std::vector<IoRequest> requests_;
  int outstanding_ = 0;
  int most_outstanding_ = 0;
};

}  // namespace zerosim
