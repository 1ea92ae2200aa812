// A large memcpy split across threads: the copy an async save takes of the rank's state while
// the step loop waits (RankEngine's snapshot). One thread's memcpy runs at about a third of what
// a host's memory moves with several (1 GiB took 413 ms on the GPU machine's host, one thread),
// and the step loop waits for all of it.
//
// The bytes are the same whatever the thread count: each thread copies its own contiguous
// slice. Copies under kParallelCopyMinBytes, or with threads <= 1, are one memcpy on the
// caller's thread. A thread that cannot be started leaves its slice to the caller (the copy is
// then slower, never incomplete).
#pragma once

#include <cstddef>

namespace zerosim {

inline constexpr size_t kParallelCopyMinBytes = size_t{8} << 20;

// destination[0, bytes) = source[0, bytes); the ranges must not overlap.
void copy_in_parallel(std::byte* destination, const std::byte* source, size_t bytes, int threads);

}  // namespace zerosim
