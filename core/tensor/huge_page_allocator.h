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
#include <cstdint>
#include <new>
#include <span>
#include <type_traits>
#include <utility>
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
  // resize() default-initializes what it adds (for bytes and floats: leaves it unwritten): the
  // arrays are filled by a copy right after, which a zero fill would only precede.
  template <typename U>
  void construct(U* pointer) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(pointer)) U;
  }
  template <typename U, typename... Args>
  void construct(U* pointer, Args&&... args) {
    ::new (static_cast<void*>(pointer)) U(std::forward<Args>(args)...);
  }

  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
};

// A growable byte or element array on huge pages (an async save's snapshot); resize() leaves
// the elements it adds unwritten (see construct above).
template <typename T>
using StateArray = std::vector<T, HugePageAllocator<T>>;

// A rank's flat state array: zeros, as the kernel hands out fresh anonymous memory, and never
// written to make them so. A vector's assign(n, 0) writes every element before a load writes it
// again; here the pages are faulted in by whoever writes first (a load's read, a step), once.
// Arrays of 2 MiB or more are 2 MiB-aligned and advised to transparent huge pages, as
// HugePageAllocator's are. Every assign_zeros() maps fresh pages: the contents are zero whatever
// the array held before.
template <typename T>
class ZeroPageArray {
  static_assert(std::is_trivially_copyable_v<T>, "zero bytes must be a valid T");

 public:
  ZeroPageArray() = default;
  ~ZeroPageArray() { release(); }
  ZeroPageArray(const ZeroPageArray&) = delete;
  ZeroPageArray& operator=(const ZeroPageArray&) = delete;
  ZeroPageArray(ZeroPageArray&& other) noexcept { swap(other); }
  ZeroPageArray& operator=(ZeroPageArray&& other) noexcept {
    ZeroPageArray(std::move(other)).swap(*this);
    return *this;
  }
  void swap(ZeroPageArray& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(mapping_, other.mapping_);
    std::swap(mapping_bytes_, other.mapping_bytes_);
  }

  // `count` zero elements (throws std::bad_alloc when the kernel refuses the mapping).
  void assign_zeros(size_t count) {
    release();
    if (count == 0) return;
    if (count > static_cast<size_t>(-1) / sizeof(T) - 2 * kHugePageBytes) throw std::bad_array_new_length();
    const size_t bytes = count * sizeof(T);
    const bool huge = bytes >= kHugePageBytes;
    // Huge: map a huge page more than needed and start at the first 2 MiB boundary.
    const size_t mapped = huge ? (bytes + 2 * kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes : bytes;
    void* mapping = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED) throw std::bad_alloc();
    mapping_ = mapping;
    mapping_bytes_ = mapped;
    auto address = reinterpret_cast<uintptr_t>(mapping);
    if (huge) {
      address = (address + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
      // Advice: a refusal leaves ordinary pages, which are correct.
      (void)::madvise(reinterpret_cast<void*>(address), (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes,
                      MADV_HUGEPAGE);
    }
    data_ = reinterpret_cast<T*>(address);
    size_ = count;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  operator std::span<T>() { return {data_, size_}; }
  operator std::span<const T>() const { return {data_, size_}; }

 private:
  void release() noexcept {
    if (mapping_ != nullptr) (void)::munmap(mapping_, mapping_bytes_);
    data_ = nullptr;
    size_ = 0;
    mapping_ = nullptr;
    mapping_bytes_ = 0;
  }
  T* data_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
};

}  // namespace zerosim
