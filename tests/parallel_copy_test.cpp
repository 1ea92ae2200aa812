// copy_in_parallel (core/tensor/parallel_copy.h): for any size (around the threshold, the page,
// odd tails) and any thread count, the destination holds exactly the source's bytes, and not one
// byte before or after the range is touched.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/tensor/parallel_copy.h"

namespace zerosim {
namespace {

// The first index where a and b differ over `count` bytes, or -1.
std::ptrdiff_t first_difference(const std::byte* a, const std::byte* b, size_t count) {
  if (std::memcmp(a, b, count) == 0) return -1;
  return std::mismatch(a, a + count, b).first - a;
}

// A source of `bytes` plus 2 * offset bytes, no two neighbouring bytes alike for long.
std::vector<std::byte> patterned_source(size_t bytes, size_t offset) {
  std::vector<std::byte> source(bytes + 2 * offset);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  return source;
}

// Copies source's bytes [offset, offset + bytes) between guards into `destination` (resized,
// refilled with the guard byte) and checks the copy and the guards. The caller keeps one
// destination for every thread count: a fresh buffer of this size costs ThreadSanitizer a shadow
// page fault per page.
void expect_exact_copy(const std::vector<std::byte>& source, size_t bytes, int threads, size_t offset,
                       std::vector<std::byte>& destination) {
  constexpr size_t kGuardBytes = 32;
  constexpr std::byte kGuard{0xa5};
  destination.assign(bytes + 2 * offset + 2 * kGuardBytes, kGuard);
  std::byte* const target = destination.data() + offset + kGuardBytes;
  copy_in_parallel(target, source.data() + offset, bytes, threads);
  auto first_unguarded = [&](size_t begin, size_t end) -> std::ptrdiff_t {
    for (size_t i = begin; i < end; ++i) {
      if (destination[i] != kGuard) return static_cast<std::ptrdiff_t>(i - begin);
    }
    return -1;
  };
  EXPECT_EQ(first_unguarded(0, offset + kGuardBytes), -1) << "written before the range";
  EXPECT_EQ(first_difference(target, source.data() + offset, bytes), -1) << "the first byte that differs";
  EXPECT_EQ(first_unguarded(offset + kGuardBytes + bytes, destination.size()), -1) << "written after the range";
}

TEST(ParallelCopy, SizesAroundTheThresholdAndThreadCounts) {
  std::vector<std::byte> destination;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4097}, kParallelCopyMinBytes - 1, kParallelCopyMinBytes,
                       kParallelCopyMinBytes + 1, 3 * kParallelCopyMinBytes + 4095, size_t{41} << 20}) {
    const std::vector<std::byte> source = patterned_source(bytes, /*offset=*/3);
    for (int threads : {0, 1, 2, 3, 8, 64}) {
      SCOPED_TRACE(testing::Message() << bytes << " bytes, " << threads << " threads; replay: ctest -R ParallelCopy");
      expect_exact_copy(source, bytes, threads, /*offset=*/3, destination);
    }
  }
}

RC_GTEST_PROP(ParallelCopyProperty, AnySizeAndThreadCountCopiesExactly, ()) {
  const size_t bytes = *rc::gen::inRange<size_t>(0, size_t{24} << 20);
  const int threads = *rc::gen::inRange(-1, 17);
  const size_t offset = *rc::gen::inRange<size_t>(0, 4096);
  std::vector<std::byte> source(bytes + offset);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::byte>(i * 131 + 7);
  std::vector<std::byte> destination(bytes + 1, std::byte{0x5a});
  copy_in_parallel(destination.data(), source.data() + offset, bytes, threads);
  RC_ASSERT(std::equal(destination.begin(), destination.begin() + static_cast<std::ptrdiff_t>(bytes),
                       source.begin() + static_cast<std::ptrdiff_t>(offset)));
  RC_ASSERT(destination[bytes] == std::byte{0x5a});
}

}  // namespace
}  // namespace zerosim
