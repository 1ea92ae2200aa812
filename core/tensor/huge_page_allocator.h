// An allocator for a rank's flat state arrays (16-bit parameters, master, moments, gradient
// partition): arrays of 2 MiB or more are 2 MiB-aligned and advised to transparent huge pages
// (madvise MADV_HUGEPAGE), so that building a gigabyte of state faults in 512 times fewer pages.
// A load builds its state in memory the process has never touched; on this project's 2-core VM
// first touch of 1 GiB took 3.0 s with 4 KiB pages and 0.4-1.7 s advised, most of a load's time.
// The advice is only advice: where the kernel has THP off (or madvise refuses the range) the
// pages are ordinary ones, and the array is the same.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>
#include <vector>

namespace zerosim {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

template <typename T>
class HugePageAllocator {
 public:
  using value_type = T;
  HugePageAllocator() noexcept = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  T* allocate(size_t count) {
    if (count > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    const size_t bytes = count * sizeof(T);
    if (bytes < kHugePageBytes) {
      void* small = std::malloc(bytes > 0 ? bytes : 1);
      if (small == nullptr) throw std::bad_alloc();
      return static_cast<T*>(small);
    }
    const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    void* large = std::aligned_alloc(kHugePageBytes, rounded);
    if (large == nullptr) throw std::bad_alloc();
    // Advice: a refusal (THP compiled out, EINVAL) leaves ordinary pages, which are correct.
    (void)::madvise(large, rounded, MADV_HUGEPAGE);
    return static_cast<T*>(large);
  }
  void deallocate(T* pointer, size_t) noexcept { std::free(pointer); }

  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
};

// A flat state array.
template <typename T>
using StateArray = std::vector<T, HugePageAllocator<T>>;

}  // namespace zerosim
