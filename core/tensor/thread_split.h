// Running a computation's independent parts on a few threads of one rank.
//
// What it promises: part(k) runs once for each k in 0..parts-1, part 0 on the caller and the
// others on threads started for this call, and run_in_parts returns when all have; it throws
// nothing of its own (a thread or memory it cannot have leaves the part to the caller). Whether a
// part runs on its own thread or on the caller (when the system has no thread to give) changes
// nothing but the time: the callers give each part outputs of its own and fold any shared result
// afterwards in a fixed order, so the bits never depend on the thread count. Threads are started
// per call, so the callers split only work of a millisecond or more.
#pragma once

#include <algorithm>
#include <cstddef>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

namespace zerosim {

template <typename Part>
void run_in_parts(size_t parts, Part&& part) {
  std::vector<std::thread> helpers;
  try {
    helpers.reserve(parts > 0 ? parts - 1 : 0);
  } catch (const std::bad_alloc&) {
    // No room to track helpers: the caller runs every part. Callers inside a collective
    // (between its barriers) rely on this never failing.
    for (size_t k = 0; k < parts; ++k) part(k);
    return;
  }
  for (size_t k = 1; k < parts; ++k) {
    try {
      helpers.emplace_back([&part, k] { part(k); });
    } catch (const std::exception&) {  // std::system_error, or std::bad_alloc for its state
      part(k);  // no thread to be had: the caller runs this part itself
    }
  }
  if (parts > 0) part(size_t{0});
  for (std::thread& helper : helpers) helper.join();
}

// range(first, end, k) over contiguous ranges [first, end) that together cover [0, count), at
// most `parts` of them (k counts them from 0), every range but the last a multiple of
// `alignment` items long: each on a part of run_in_parts. Nothing runs when count is 0.
template <typename Range>
void run_in_ranges(size_t count, size_t parts, size_t alignment, Range&& range) {
  if (count == 0) return;
  const size_t per_part = (count + parts - 1) / std::max<size_t>(1, parts);
  const size_t length = (per_part + alignment - 1) / alignment * alignment;
  run_in_parts((count + length - 1) / length, [&](size_t k) { range(k * length, std::min(count, (k + 1) * length), k); });
}

// How many parts to split `count` items into: at most `threads`, and none smaller than
// `minimum_per_part` items (1 when the work is too small to be worth a thread).
inline size_t part_count(size_t count, int threads, size_t minimum_per_part) {
  const size_t wanted = threads <= 1 ? 1 : static_cast<size_t>(threads);
  return std::max<size_t>(1, std::min(wanted, count / std::max<size_t>(1, minimum_per_part)));
}

}  // namespace zerosim
