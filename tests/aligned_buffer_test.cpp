// AlignedBuffer: what direct I/O and the checkpoint staging rely on. Every buffer is zeros
// when handed out (the writer's padded last block and the swapper's padding are written from
// it), 4096-aligned (O_DIRECT refuses anything else), as large as asked rounded up to 4096, and
// one of 2 MiB or more starts at a 2 MiB boundary (without it no transparent huge page can back
// its first bytes). A moved-from buffer owns nothing, so that each mapping is released once.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/tensor/aligned_buffer.h"
#include "core/tensor/huge_page_allocator.h"

namespace zerosim {
namespace {

uintptr_t address_of(const AlignedBuffer& buffer) { return reinterpret_cast<uintptr_t>(buffer.data()); }

bool all_zero(const AlignedBuffer& buffer) {
  return std::all_of(buffer.data(), buffer.data() + buffer.size_bytes(), [](std::byte b) { return b == std::byte{0}; });
}

void expect_promises(size_t asked_bytes) {
  Result<AlignedBuffer> buffer = AlignedBuffer::allocate(asked_bytes, /*pin=*/false);
  ASSERT_TRUE(buffer.ok()) << buffer.status().to_string();
  const size_t expected_bytes = std::max<size_t>(4096, (asked_bytes + 4095) / 4096 * 4096);
  EXPECT_EQ(buffer->size_bytes(), expected_bytes) << "asked " << asked_bytes;
  EXPECT_EQ(address_of(*buffer) % AlignedBuffer::kAlignmentBytes, 0u) << "asked " << asked_bytes;
  if (expected_bytes >= kHugePageBytes) {
    EXPECT_EQ(address_of(*buffer) % kHugePageBytes, 0u) << "asked " << asked_bytes;
  }
  EXPECT_TRUE(all_zero(*buffer)) << "asked " << asked_bytes;
  // Every byte is the caller's to write (a mapping shorter than size_bytes() would fault here).
  std::fill(buffer->data(), buffer->data() + buffer->size_bytes(), std::byte{0x5a});
  EXPECT_EQ(buffer->data()[buffer->size_bytes() - 1], std::byte{0x5a});
}

TEST(AlignedBuffer, SizesAroundThePageAndTheHugePageKeepEveryPromise) {
  for (size_t asked : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{4097}, kHugePageBytes - 4096,
                       kHugePageBytes - 1, kHugePageBytes, kHugePageBytes + 1, 3 * kHugePageBytes + 12345,
                       size_t{9} << 20}) {
    expect_promises(asked);
  }
}

RC_GTEST_PROP(AlignedBufferProperty, AnySizeIsZeroedAlignedAndWritable, ()) {
  const size_t asked = *rc::gen::inRange<size_t>(0, size_t{12} << 20);
  Result<AlignedBuffer> buffer = AlignedBuffer::allocate(asked, /*pin=*/*rc::gen::arbitrary<bool>());
  RC_ASSERT(buffer.ok());
  RC_ASSERT(buffer->size_bytes() >= std::max<size_t>(asked, 1));
  RC_ASSERT(buffer->size_bytes() % 4096 == 0);
  RC_ASSERT(buffer->size_bytes() - std::max<size_t>(asked, 1) < 4096);
  RC_ASSERT(address_of(*buffer) % 4096 == 0);
  if (buffer->size_bytes() >= kHugePageBytes) RC_ASSERT(address_of(*buffer) % kHugePageBytes == 0);
  RC_ASSERT(all_zero(*buffer));
}

TEST(AlignedBuffer, AFreshBufferIsZerosEvenWhereAReleasedOneWasWritten) {
  // Memory handed back and taken again must not carry the last owner's bytes into a shard's
  // padding: write a buffer full, release it, and take as many more of the same size.
  for (int round = 0; round < 4; ++round) {
    Result<AlignedBuffer> used = AlignedBuffer::allocate(kHugePageBytes + 4096, false);
    ASSERT_TRUE(used.ok());
    std::fill(used->data(), used->data() + used->size_bytes(), std::byte{0xff});
    *used = AlignedBuffer();
    Result<AlignedBuffer> fresh = AlignedBuffer::allocate(kHugePageBytes + 4096, false);
    ASSERT_TRUE(fresh.ok());
    EXPECT_TRUE(all_zero(*fresh)) << "round " << round;
  }
}

TEST(AlignedBuffer, MovingHandsOverTheMappingAndLeavesTheSourceEmpty) {
  Result<AlignedBuffer> made = AlignedBuffer::allocate(kHugePageBytes, /*pin=*/true);
  ASSERT_TRUE(made.ok());
  std::byte* data = made->data();
  const bool pinned = made->pinned();
  AlignedBuffer moved(std::move(*made));
  EXPECT_EQ(made->data(), nullptr);
  EXPECT_EQ(made->size_bytes(), 0u);
  EXPECT_FALSE(made->pinned());
  EXPECT_EQ(moved.data(), data);
  EXPECT_EQ(moved.size_bytes(), kHugePageBytes);
  EXPECT_EQ(moved.pinned(), pinned);

  Result<AlignedBuffer> other = AlignedBuffer::allocate(8192, false);
  ASSERT_TRUE(other.ok());
  moved = std::move(*other);  // releases the 2 MiB mapping, takes the 8 KiB one
  EXPECT_EQ(moved.size_bytes(), 8192u);
  EXPECT_EQ(other->data(), nullptr);
  moved.data()[8191] = std::byte{1};
  EXPECT_EQ(moved.bytes().size(), 8192u);
}

}  // namespace
}  // namespace zerosim
