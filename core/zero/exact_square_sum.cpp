#include "core/zero/exact_square_sum.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/tensor/thread_split.h"

namespace zerosim {

void ExactSquareSum::add_squares(std::span<const float> values) {
  // A square is below 2^48, so 2^16 of them fit a 64-bit sum: each block of 2^16 values is
  // added into 64-bit bins (one 64-bit add a value where a 128-bit add took two), and the
  // block's bins are carried into the 128-bit ones. Integer sums: the same bins either way.
  constexpr size_t kBlockValues = size_t{1} << 16;
  std::array<uint64_t, kBinCount> block_bins;
  for (size_t start = 0; start < values.size(); start += kBlockValues) {
    const size_t end = std::min(values.size(), start + kBlockValues);
    block_bins.fill(0);
    for (size_t i = start; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &values[i], sizeof bits);
      const uint32_t exponent_field = (bits >> 23) & 0xffu;
      const uint64_t mantissa = bits & 0x7fffffu;
      if (exponent_field == 0xffu) [[unlikely]] {
        if (mantissa == 0) ++infinity_count_;
        else ++nan_count_;
        continue;
      }
      const uint64_t significand = exponent_field == 0 ? mantissa : (mantissa | 0x800000u);
      block_bins[exponent_field] += significand * significand;
    }
    for (size_t field = 0; field < kBinCount; ++field) bins_[field] += block_bins[field];
  }
}

void ExactSquareSum::add_squares(std::span<const float> values, int threads) {
  constexpr size_t kMinValuesPerThread = size_t{1} << 20;  // about a millisecond's work
  const size_t parts = part_count(values.size(), threads, kMinValuesPerThread);
  if (parts == 1) return add_squares(values);
  std::vector<ExactSquareSum> part_sums(parts);
  run_in_ranges(values.size(), parts, 1, [&](size_t first, size_t end, size_t part) {
    part_sums[part].add_squares(values.subspan(first, end - first));
  });
  for (const ExactSquareSum& part_sum : part_sums) merge(part_sum);
}

void ExactSquareSum::merge(const ExactSquareSum& other) {
  for (size_t i = 0; i < kBinCount; ++i) bins_[i] += other.bins_[i];
  infinity_count_ += other.infinity_count_;
  nan_count_ += other.nan_count_;
}

double ExactSquareSum::to_double() const {
  if (nan_count_ != 0) return std::numeric_limits<double>::quiet_NaN();
  if (infinity_count_ != 0) return std::numeric_limits<double>::infinity();
  double total = 0.0;
  for (size_t field = 0; field < kBinCount; ++field) {
    if (bins_[field] == 0) continue;
    // value = significand * 2^(max(field,1) - 150), so its square carries 2^(2*(max(field,1)-150)).
    const int exponent = 2 * ((field == 0 ? 1 : static_cast<int>(field)) - 150);
    const uint64_t high = static_cast<uint64_t>(bins_[field] >> 64);
    const uint64_t low = static_cast<uint64_t>(bins_[field]);
    const double bin_value = std::ldexp(static_cast<double>(high), 64) + static_cast<double>(low);
    total += std::ldexp(bin_value, exponent);
  }
  return total;
}

void ExactSquareSum::serialize(std::span<std::byte, kSerializedBytes> destination) const {
  size_t offset = 0;
  auto put_u64 = [&](uint64_t value) {
    for (int byte = 0; byte < 8; ++byte) destination[offset++] = static_cast<std::byte>(value >> (8 * byte));
  };
  for (const unsigned __int128& bin : bins_) {
    put_u64(static_cast<uint64_t>(bin));
    put_u64(static_cast<uint64_t>(bin >> 64));
  }
  put_u64(infinity_count_);
  put_u64(nan_count_);
}

ExactSquareSum ExactSquareSum::deserialize(std::span<const std::byte, kSerializedBytes> source) {
  ExactSquareSum result;
  size_t offset = 0;
  auto get_u64 = [&]() {
    uint64_t value = 0;
    for (int byte = 0; byte < 8; ++byte) value |= static_cast<uint64_t>(source[offset++]) << (8 * byte);
    return value;
  };
  for (unsigned __int128& bin : result.bins_) {
    const uint64_t low = get_u64();
    const uint64_t high = get_u64();
    bin = (static_cast<unsigned __int128>(high) << 64) | low;
  }
  result.infinity_count_ = get_u64();
  result.nan_count_ = get_u64();
  return result;
}

}  // namespace zerosim
