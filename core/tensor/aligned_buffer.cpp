#include "core/tensor/aligned_buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <utility>

namespace zerosim {

AlignedBuffer::~AlignedBuffer() { release(); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)),
      pinned_(std::exchange(other.pinned_, false)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    pinned_ = std::exchange(other.pinned_, false);
  }
  return *this;
}

void AlignedBuffer::release() {
  if (data_ == nullptr) return;
  if (pinned_) ::munlock(data_, size_bytes_);
  std::free(data_);
  data_ = nullptr;
  size_bytes_ = 0;
  pinned_ = false;
}

Result<AlignedBuffer> AlignedBuffer::allocate(size_t size_bytes, bool pin) {
  AlignedBuffer buffer;
  buffer.size_bytes_ = static_cast<size_t>(round_up_bytes(size_bytes == 0 ? 1 : size_bytes, kAlignmentBytes));
  void* memory = nullptr;
  if (::posix_memalign(&memory, kAlignmentBytes, buffer.size_bytes_) != 0 || memory == nullptr) {
    return resource_exhausted("cannot allocate an aligned buffer of " + std::to_string(buffer.size_bytes_) + " bytes");
  }
  buffer.data_ = static_cast<std::byte*>(memory);
  std::memset(buffer.data_, 0, buffer.size_bytes_);
  buffer.pinned_ = pin && ::mlock(buffer.data_, buffer.size_bytes_) == 0;
  return buffer;
}

}  // namespace zerosim
