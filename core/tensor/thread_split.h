// Running a computation's independent parts on a few threads of one rank.
//
// What it promises: part(k) runs once for each k in 0..parts-1, part 0 on the caller and the
// others on threads started for this call, and run_in_parts returns when all have. Whether a
// part runs on its own thread or on the caller (when the system has no thread to give) changes
// nothing but the time: the callers give each part outputs of its own and fold any shared result
// afterwards in a fixed order, so the bits never depend on the thread count. Threads are started
// per call, so the callers split only work of a millisecond or more.
#pragma once

#include <algorithm>
#include <cstddef>
#include <system_error>
#include <thread>
#include <vector>

namespace zerosim {

template <typename Part>
void run_in_parts(size_t parts, Part&& part) {
  std::vector<std::thread> helpers;
  helpers.reserve(parts > 0 ? parts - 1 : 0);
  for (size_t k = 1; k < parts; ++k) {
    try {
      helpers.emplace_back([&part, k] { part(k); });
    } catch (const std::system_error&) {
      part(k);  // no thread to be had: the caller runs this part itself
    }
  }
  if (parts > 0) part(size_t{0});
  for (std::thread& helper : helpers) helper.join();
}

// How many parts to split `count` items into: at most `threads`, and none smaller than
// `minimum_per_part` items (1 when the work is too small to be worth a thread).
inline size_t part_count(size_t count, int threads, size_t minimum_per_part) {
  const size_t wanted = threads <= 1 ? 1 : static_cast<size_t>(threads);
  return std::max<size_t>(1, std::min(wanted, count / std::max<size_t>(1, minimum_per_part)));
}

}  // namespace zerosim
