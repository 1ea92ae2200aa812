// What the parallel reader's and writer's tests share: their settings in one call, and random
// bytes from the test's seeded generator.
#pragma once

#include <cstddef>
#include <random>
#include <vector>

#include "core/checkpoint/checkpoint_io.h"

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
  for (std::byte& b : bytes) b = static_cast<std::byte>(random());
  return bytes;
}

}  // namespace zerosim
