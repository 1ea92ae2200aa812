// An exact, order-free sum of squares of fp32 values, for the global gradient norm.
//
// Why: the norm is summed over elements that different ranks hold, and the split moves with
// W. A floating-point sum would change its rounding with the split, so the clip factor, and
// with it every parameter, would depend on W. Instead every fp32 value x = m * 2^e (m < 2^24)
// contributes m^2 to an integer bin for its exponent field; integer addition is associative,
// so the bins (and the double computed from them in one fixed order) are a pure function of
// the multiset of values, whatever the rank split or summation order.
// Cost: about one 64-bit multiply and one 64-bit add per element (64-bit bins per block of 2^16
// values, carried into 128-bit ones), and 4 KiB of bins per rank exchanged with one all-gather
// per optimizer step.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace zerosim {

class ExactSquareSum {
 public:
  static constexpr size_t kBinCount = 255;  // fp32 exponent fields 0..254 (255 is inf/NaN)

  void add_squares(std::span<const float> values);
  // The same on up to `threads` threads (the caller's among them), each summing a range into
  // bins of its own, merged afterwards: integer sums, so the same bins as one thread's.
  void add_squares(std::span<const float> values, int threads);
  void merge(const ExactSquareSum& other);
  // The sum as a double (rounded in one fixed order, smallest exponent first); +inf when a
  // value was infinite, NaN when one was NaN.
  double to_double() const;
  bool saw_non_finite() const { return infinity_count_ != 0 || nan_count_ != 0; }

  // Fixed-size little-endian serialization for the all-gather.
  static constexpr size_t kSerializedBytes = kBinCount * 16 + 16;
  void serialize(std::span<std::byte, kSerializedBytes> destination) const;
  static ExactSquareSum deserialize(std::span<const std::byte, kSerializedBytes> source);

 private:
  std::array<unsigned __int128, kBinCount> bins_{};
  uint64_t infinity_count_ = 0;
  uint64_t nan_count_ = 0;
};

}  // namespace zerosim
