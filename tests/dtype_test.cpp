// fp16 and bf16 casts: round to nearest even, checked against the hardware converter
// (F16C, round-to-nearest mode) and against hand-worked values.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <immintrin.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "core/tensor/dtype.h"

namespace zerosim {
namespace {

__attribute__((target("f16c"))) uint16_t hardware_fp16(float value) {
  return static_cast<uint16_t>(_cvtss_sh(value, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hardware_fp16_to_fp32(uint16_t bits) { return _cvtsh_ss(bits); }

TEST(Dtype, Fp16HandWorkedValues) {
  EXPECT_EQ(fp32_to_fp16_bits(1.0f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16_bits(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_fp16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16_bits(65520.0f), 0x7c00);  // the halfway point to 65536 rounds up to inf
  EXPECT_EQ(fp32_to_fp16_bits(65519.996f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp32_to_fp16_bits(std::ldexp(1.0f, -25)), 0x0000);  // half of it: ties to even (0)
  EXPECT_EQ(fp32_to_fp16_bits(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: ties to even (2)
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even keeps 1.
  EXPECT_EQ(fp32_to_fp16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(fp32_to_fp16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(fp32_to_fp16_bits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(fp16_bits_to_fp32(fp32_to_fp16_bits(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Dtype, Bf16HandWorkedValues) {
  EXPECT_EQ(fp32_to_bf16_bits(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even keeps 1.
  EXPECT_EQ(fp32_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(fp32_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(fp32_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_TRUE(std::isnan(bf16_bits_to_fp32(fp32_to_bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_bits_to_fp32(0x3f80), 1.0f);
}

TEST(Dtype, Fp16MatchesHardwareOnEveryHalfAndItsNeighbours) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C on this CPU";
  for (uint32_t half = 0; half < 0x10000; ++half) {
    const float value = hardware_fp16_to_fp32(static_cast<uint16_t>(half));
    ASSERT_EQ(float_bits(fp16_bits_to_fp32(static_cast<uint16_t>(half))), float_bits(value)) << half;
    if (std::isnan(value)) continue;
    // The value itself and the fp32 values just around it and halfway to the next half.
    const float next = std::nextafter(value, std::numeric_limits<float>::infinity());
    for (float probe : {value, next, std::nextafter(value, -std::numeric_limits<float>::infinity())}) {
      ASSERT_EQ(fp32_to_fp16_bits(probe), hardware_fp16(probe)) << "probe bits " << float_bits(probe);
    }
  }
}

RC_GTEST_PROP(DtypeProperty, Fp16MatchesHardwareOnRandomFloats, (uint32_t bits)) {
  RC_PRE(__builtin_cpu_supports("f16c"));
  const float value = bits_to_float(bits);
  RC_PRE(!std::isnan(value));
  RC_ASSERT(fp32_to_fp16_bits(value) == hardware_fp16(value));
}

RC_GTEST_PROP(DtypeProperty, Bf16IsNearestEvenOfItsNeighbours, (uint32_t bits)) {
  const float value = bits_to_float(bits);
  RC_PRE(std::isfinite(value) && std::fabs(value) < 1e38f);
  const uint16_t rounded = fp32_to_bf16_bits(value);
  const double below = bf16_bits_to_fp32(static_cast<uint16_t>(bits >> 16));
  const double above = bf16_bits_to_fp32(static_cast<uint16_t>((bits >> 16) + 1));
  const double error = std::fabs(static_cast<double>(bf16_bits_to_fp32(rounded)) - value);
  RC_ASSERT(error <= std::fabs(above - below) / 2);
  if (std::fabs(value - below) == std::fabs(above - value)) RC_ASSERT((rounded & 1) == 0);
}

// The bulk casts (AVX-512 where the CPU has it, the scalar functions otherwise) give the scalar
// functions' bits: every 16-bit pattern widened, and fp32 patterns narrowed (every 7th pattern
// over all 2^32, and every pattern of the exponents next to fp16's and bf16's edges), from
// unaligned starts and with tails shorter than a vector. The sanitizer builds, which look for
// memory errors rather than for bits and run the loops some ten times slower, take every 217th
// pattern and each edge's first batch: the same code paths; the release run sweeps them all.
TEST(Dtype, BulkCastsGiveTheScalarFunctionsBits) {
#ifdef ZEROSIM_SANITIZED
  constexpr uint64_t kPatternStride = 217;
  constexpr uint32_t kEdgeBatches = 1;
#else
  constexpr uint64_t kPatternStride = 7;
  constexpr uint32_t kEdgeBatches = 8;
#endif
  std::vector<uint16_t> halves(65536 + 3);
  for (size_t k = 0; k < halves.size(); ++k) halves[k] = static_cast<uint16_t>(k * 40503u);
  std::vector<float> widened(halves.size());
  for (const size_t offset : {size_t{0}, size_t{1}, size_t{3}}) {
    const size_t count = halves.size() - offset;
    cast_to_fp32(DType::kFp16, reinterpret_cast<const std::byte*>(halves.data() + offset), widened.data(), count);
    for (size_t k = 0; k < count; ++k) {
      ASSERT_EQ(float_bits(widened[k]), float_bits(fp16_bits_to_fp32(halves[offset + k]))) << "fp16 " << halves[offset + k];
    }
    cast_to_fp32(DType::kBf16, reinterpret_cast<const std::byte*>(halves.data() + offset), widened.data(), count);
    for (size_t k = 0; k < count; ++k) {
      ASSERT_EQ(float_bits(widened[k]), float_bits(bf16_bits_to_fp32(halves[offset + k]))) << "bf16 " << halves[offset + k];
    }
  }
  constexpr size_t kBatch = 1 << 20;
  std::vector<float> floats(kBatch + 5);
  std::vector<uint16_t> narrowed(kBatch + 5);
  auto check = [&](size_t count, size_t offset) {
    for (const DType dtype : {DType::kFp16, DType::kBf16}) {
      cast_from_fp32(dtype, floats.data() + offset, reinterpret_cast<std::byte*>(narrowed.data()), count);
      for (size_t k = 0; k < count; ++k) {
        const float value = floats[offset + k];
        const uint16_t expected = dtype == DType::kFp16 ? fp32_to_fp16_bits(value) : fp32_to_bf16_bits(value);
        ASSERT_EQ(narrowed[k], expected) << dtype_name(dtype) << " of fp32 bits " << float_bits(value);
      }
    }
  };
  uint64_t pattern = 0;
  while (pattern < (uint64_t{1} << 32)) {
    size_t filled = 0;
    for (; filled < kBatch + 5 && pattern < (uint64_t{1} << 32); ++filled, pattern += kPatternStride) {
      floats[filled] = bits_to_float(static_cast<uint32_t>(pattern));
    }
    check(filled > 2 ? filled - 2 : filled, filled > 2 ? 2 : 0);
  }
  // Every pattern whose exponent is next to fp16's overflow and subnormal edges and bf16's.
  for (const uint32_t exponent : {0u, 1u, 101u, 102u, 103u, 111u, 112u, 113u, 142u, 143u, 254u, 255u}) {
    for (const uint32_t sign : {0u, 0x80000000u}) {
      for (uint32_t base = 0; base < kEdgeBatches * kBatch; base += kBatch) {
        for (size_t k = 0; k < kBatch; ++k) {
          floats[k] = bits_to_float(sign | (exponent << 23) | (base + static_cast<uint32_t>(k)));
        }
        check(kBatch, 0);
      }
    }
  }
}

TEST(Dtype, BulkCastsRoundTrip) {
  const std::vector<float> values = {0.0f, -0.0f, 1.5f, -3.25f, 1e-3f, 70000.0f};
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    std::vector<std::byte> storage(values.size() * dtype_size_bytes(dtype));
    std::vector<float> back(values.size());
    cast_from_fp32(dtype, values.data(), storage.data(), values.size());
    cast_to_fp32(dtype, storage.data(), back.data(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(float_bits(back[i]), float_bits(round_through(dtype, values[i]))) << dtype_name(dtype) << " " << i;
    }
  }
}

// The threaded cast covers every element once, whatever the split: sizes around the split's
// minimum and its 64-element alignment, 1 to 7 threads, each dtype; the bytes past the end
// are left alone.
TEST(Dtype, ThreadedCastGivesTheSerialCastsBitsForAnySplit) {
  const size_t minimum = kCastElementsPerThread;
  for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    for (size_t count : {size_t{0}, size_t{1}, minimum - 1, 2 * minimum + 63, 3 * minimum + 65, 7 * minimum + 1}) {
      std::vector<std::byte> storage(count * dtype_size_bytes(dtype));
      for (size_t i = 0; i < storage.size(); ++i) storage[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
      std::vector<float> expected(count + 1, -7.0f);
      cast_to_fp32(dtype, storage.data(), expected.data(), count);
      for (int threads : {1, 2, 3, 7}) {
        std::vector<float> got(count + 1, -7.0f);
        cast_to_fp32_threads(dtype, storage.data(), got.data(), count, threads);
        bool same = true;
        for (size_t i = 0; i <= count && same; ++i) same = float_bits(got[i]) == float_bits(expected[i]);
        EXPECT_TRUE(same) << dtype_name(dtype) << " count " << count << " threads " << threads
                          << "; replay: tests/dtype_test --gtest_filter=Dtype.ThreadedCast*";
      }
    }
  }
}

TEST(Dtype, ThreadedNarrowingAndZeroFillGiveTheSerialBytesForAnySplit) {
  const size_t minimum = kCastElementsPerThread;
  for (size_t count : {size_t{0}, size_t{1}, minimum - 1, 2 * minimum + 63, 3 * minimum + 65, 7 * minimum + 1}) {
    std::vector<float> source(count);
    for (size_t i = 0; i < count; ++i) source[i] = std::bit_cast<float>(static_cast<uint32_t>(i * 2654435761u));
    for (DType dtype : {DType::kFp32, DType::kFp16, DType::kBf16}) {
      const size_t bytes = count * dtype_size_bytes(dtype);
      std::vector<std::byte> expected(bytes + 1, std::byte{0x5a});
      cast_from_fp32(dtype, source.data(), expected.data(), count);
      for (int threads : {1, 2, 3, 7}) {
        std::vector<std::byte> got(bytes + 1, std::byte{0x5a});
        cast_from_fp32_threads(dtype, source.data(), got.data(), count, threads);
        EXPECT_TRUE(got == expected) << dtype_name(dtype) << " count " << count << " threads " << threads
                                     << "; replay: tests/dtype_test --gtest_filter=Dtype.ThreadedNarrowing*";
      }
    }
    for (int threads : {1, 2, 3, 7}) {
      std::vector<float> filled(count + 1, -7.0f);
      fill_zeros_threads(filled.data(), count, threads);
      size_t nonzero = 0;
      for (size_t i = 0; i < count; ++i) nonzero += float_bits(filled[i]) != 0u;
      EXPECT_EQ(nonzero, 0u) << "count " << count << " threads " << threads;
      EXPECT_EQ(filled[count], -7.0f) << "the fill ran past its end; count " << count << " threads " << threads;
    }
  }
}

}  // namespace
}  // namespace zerosim
