// Host buffers aligned for direct I/O (4096 bytes), zero-filled, and optionally locked in
// RAM ("pinned", as DeepSpeed's swap buffers are page-locked) so that the kernel never pages
// them out in the middle of a transfer. Locking is best effort: when RLIMIT_MEMLOCK refuses
// it the buffer stays usable and pinned() says so.
//
// A buffer is a fresh anonymous mapping: zeros from the kernel, never written to make them
// so, and one of 2 MiB or more is 2 MiB-aligned and advised to transparent huge pages (as
// huge_page_allocator.h's state arrays are). Checkpoint I/O stages through buffers of several
// MiB made for each shard; on this project's 2-core VM, faulting those in 4 KiB at a time
// (and zeroing them once more with memset) was a third of a four-rank load's time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/status.h"

namespace zerosim {

class AlignedBuffer {
 public:
  static constexpr size_t kAlignmentBytes = 4096;

  AlignedBuffer() = default;
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // size_bytes is rounded up to the alignment.
  static Result<AlignedBuffer> allocate(size_t size_bytes, bool pin);

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size_bytes() const { return size_bytes_; }
  bool pinned() const { return pinned_; }
  std::span<std::byte> bytes() { return {data_, size_bytes_}; }

 private:
  void release();
  std::byte* data_ = nullptr;
  size_t size_bytes_ = 0;
  void* mapping_ = nullptr;  // data_ lies inside it (at its first 2 MiB boundary when huge)
  size_t mapping_bytes_ = 0;
  bool pinned_ = false;
};

inline uint64_t round_up_bytes(uint64_t value, uint64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

}  // namespace zerosim
