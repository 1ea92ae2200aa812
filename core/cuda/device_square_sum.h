// The exact, order-free sum of squares (core/zero/exact_square_sum.h) of a device array: the
// global gradient norm's input on a GPU rank. Every element adds significand^2 to the integer
// bin of its exponent field; integer addition is associative, so the bins are the CPU's exactly,
// whatever the block, warp and thread split. Blocks of at most 2^16 elements keep 64-bit partial
// bins (each square is below 2^48; on chip, 32-bit counters of 16-bit pieces), and a second
// launch folds the partials into 128-bit bins, a block a bin.
//
// Without the CUDA backend both entry points return kFailedPrecondition.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "core/zero/exact_square_sum.h"

namespace zerosim {

// Keeps its device scratch (the partial bins) between calls, so that a step's norm allocates
// and frees nothing (a cudaFree waits for the whole device). Used from one thread at a time.
class DeviceSquareSummer {
 public:
  DeviceSquareSummer() = default;
  ~DeviceSquareSummer();
  DeviceSquareSummer(const DeviceSquareSummer&) = delete;
  DeviceSquareSummer& operator=(const DeviceSquareSummer&) = delete;

  // Adds the squares of `count` device floats to `sum` (merge semantics). Synchronous on
  // `stream` (a cudaStream_t; nullptr: the default stream).
  Status add_squares(const float* values, int64_t count, ExactSquareSum& sum, void* stream);

 private:
  void* scratch_ = nullptr;  // device memory: partial bins, then the folded low and high words
  size_t scratch_bytes_ = 0;
};

// The same with scratch of its own for the one call.
Status device_add_squares(const float* values, int64_t count, ExactSquareSum& sum, void* stream = nullptr);

}  // namespace zerosim
