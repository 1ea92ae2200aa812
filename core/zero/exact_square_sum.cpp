#include "core/zero/exact_square_sum.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace zerosim {

void ExactSquareSum::add_squares(std::span<const float> values) {
  // A square is below 2^48, so 2^16 of them fit a 64-bit sum: each chunk of values is summed into
  // 64-bit bins, and those into the 128-bit ones once per chunk (integer sums, so the same bins
  // as adding each square to its 128-bit bin directly). Four copies of the 64-bit bins, one per
  // lane of four neighbours: neighbours mostly share an exponent, and with one copy each add
  // would wait for the previous one's store to the same bin.
  constexpr size_t kChunkValues = size_t{1} << 16;
  constexpr size_t kCopies = 4;
  std::array<std::array<uint64_t, kBinCount>, kCopies> chunk_bins;
  for (size_t chunk_start = 0; chunk_start < values.size(); chunk_start += kChunkValues) {
    const size_t chunk_end = std::min(values.size(), chunk_start + kChunkValues);
    for (auto& copy : chunk_bins) copy.fill(0);
    for (size_t i = chunk_start; i < chunk_end; ++i) {
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
      chunk_bins[i % kCopies][exponent_field] += significand * significand;
    }
    for (const auto& copy : chunk_bins) {
      for (size_t field = 0; field < kBinCount; ++field) bins_[field] += copy[field];
    }
  }
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
