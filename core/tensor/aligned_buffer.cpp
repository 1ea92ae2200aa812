#include "core/tensor/aligned_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "core/tensor/huge_page_allocator.h"

namespace zerosim {

AlignedBuffer::~AlignedBuffer() { release(); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_bytes_(std::exchange(other.mapping_bytes_, 0)),
      pinned_(std::exchange(other.pinned_, false)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    pinned_ = std::exchange(other.pinned_, false);
  }
  return *this;
}

void AlignedBuffer::release() {
  if (data_ == nullptr) return;
  if (pinned_) ::munlock(data_, size_bytes_);
  (void)::munmap(mapping_, mapping_bytes_);
  data_ = nullptr;
  size_bytes_ = 0;
  mapping_ = nullptr;
  mapping_bytes_ = 0;
  pinned_ = false;
}

Result<AlignedBuffer> AlignedBuffer::allocate(size_t size_bytes, bool pin) {
  AlignedBuffer buffer;
  buffer.size_bytes_ = static_cast<size_t>(round_up_bytes(size_bytes == 0 ? 1 : size_bytes, kAlignmentBytes));
  const bool huge = buffer.size_bytes_ >= kHugePageBytes;
  // Huge: one huge page more than needed, so that the buffer can start at a 2 MiB boundary.
  buffer.mapping_bytes_ = huge ? static_cast<size_t>(round_up_bytes(buffer.size_bytes_, kHugePageBytes)) + kHugePageBytes
                               : buffer.size_bytes_;
  void* mapping = ::mmap(nullptr, buffer.mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) {
    const int error = errno;
    buffer.mapping_bytes_ = 0;
    return resource_exhausted("cannot map an aligned buffer of " + std::to_string(buffer.size_bytes_) +
                              " bytes: " + std::strerror(error));
  }
  buffer.mapping_ = mapping;
  auto address = reinterpret_cast<uintptr_t>(mapping);
  if (huge) {
    address = static_cast<uintptr_t>(round_up_bytes(address, kHugePageBytes));
    // Advice: a refusal (THP off or compiled out) leaves ordinary pages, which are correct.
    (void)::madvise(reinterpret_cast<void*>(address), round_up_bytes(buffer.size_bytes_, kHugePageBytes), MADV_HUGEPAGE);
  }
  buffer.data_ = reinterpret_cast<std::byte*>(address);
  buffer.pinned_ = pin && ::mlock(buffer.data_, buffer.size_bytes_) == 0;
  return buffer;
}

}  // namespace zerosim
