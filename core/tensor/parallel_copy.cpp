#include "core/tensor/parallel_copy.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

namespace zerosim {

void copy_in_parallel(std::byte* destination, const std::byte* source, size_t bytes, int threads) {
  if (bytes == 0) return;
  // Slices of at least half the threshold: a thread is worth starting for a few MiB, not less.
  const size_t most_slices = std::max<size_t>(1, bytes / (kParallelCopyMinBytes / 2));
  const size_t slices = bytes < kParallelCopyMinBytes || threads <= 1
                            ? 1
                            : std::min(static_cast<size_t>(threads), most_slices);
  // 4 KiB-aligned slice boundaries (whole pages to each thread), the last slice takes the rest.
  const size_t slice_bytes = (bytes / slices + 4095) / 4096 * 4096;
  std::vector<std::thread> helpers;
  try {
    helpers.reserve(slices - 1);
  } catch (const std::bad_alloc&) {
    // No room to track helpers: one memcpy (callers inside a collective rely on no failure).
    std::memcpy(destination, source, bytes);
    return;
  }
  for (size_t slice = 1; slice < slices; ++slice) {
    const size_t begin = std::min(bytes, slice * slice_bytes);
    const size_t end = slice + 1 == slices ? bytes : std::min(bytes, begin + slice_bytes);
    if (begin == end) continue;
    try {
      helpers.emplace_back([=] { std::memcpy(destination + begin, source + begin, end - begin); });
    } catch (const std::exception&) {  // std::system_error, or std::bad_alloc for its state
      // No thread to be had: the caller copies this slice itself.
      std::memcpy(destination + begin, source + begin, end - begin);
    }
  }
  std::memcpy(destination, source, std::min(bytes, slice_bytes));  // the first slice: the caller's
  for (std::thread& helper : helpers) helper.join();
}

}  // namespace zerosim
