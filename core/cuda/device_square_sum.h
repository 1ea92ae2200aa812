// The exact, order-free sum of squares (core/zero/exact_square_sum.h) of a device array: the
// global gradient norm's input on a GPU rank. Every element adds significand^2 to the integer
// bin of its exponent field; integer addition is associative, so the bins are the CPU's exactly,
// whatever the block and thread split. Blocks of at most 2^16 elements keep 64-bit partial bins
// (each square is below 2^48), and one pass folds the partials into 128-bit bins.
//
// Without the CUDA backend it returns kFailedPrecondition.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/zero/exact_square_sum.h"

namespace zerosim {

// Adds the squares of `count` device floats to `sum` (merge semantics). Synchronous on `stream`
// (a cudaStream_t; nullptr: the default stream).
Status device_add_squares(const float* values, int64_t count, ExactSquareSum& sum, void* stream = nullptr);

}  // namespace zerosim
