#include "core/tensor/dtype.h"

#include <immintrin.h>

#include <cstring>

#include "core/tensor/dtype_bits.h"
#include "core/tensor/thread_split.h"

namespace zerosim {

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kFp16: return "fp16";
    case Precision::kBf16: return "bf16";
  }
  return "unknown";
}

const char* offload_device_name(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::kNone: return "none";
    case OffloadDevice::kCpu: return "cpu";
    case OffloadDevice::kNvme: return "nvme";
  }
  return "unknown";
}

namespace {

// The bulk casts on AVX-512, chosen at run time (never by -march), with the scalar functions'
// bits: bf16 by the same integer operations, sixteen lanes at a time; fp16 by the CPU's own
// conversions (vcvtph2ps, and vcvtps2ph with round-to-nearest-even), which the tests hold to
// fp32_bits_to_fp16_bits / fp16_bits_to_fp32_bits on every 16-bit pattern and a sweep of fp32
// patterns. The casts run on every gathered layer and every gradient exchange, so a scalar loop
// here is a large share of a step's host time.
bool avx512_casts_available() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }

__attribute__((target("avx512f,avx512bw"))) size_t bf16_to_fp32_avx512(const uint16_t* in, float* out, size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_si512(out + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
  }
  return i;
}

__attribute__((target("avx512f,avx512bw"))) size_t fp32_to_bf16_avx512(const float* in, uint16_t* out, size_t count) {
  const __m512i magnitude_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i infinity = _mm512_set1_epi32(0x7f800000);
  const __m512i bias = _mm512_set1_epi32(0x7fff);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512i bits = _mm512_loadu_si512(in + i);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, magnitude_mask), infinity);
    const __m512i high = _mm512_srli_epi32(bits, 16);
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(bias, _mm512_and_si512(high, one))), 16);
    const __m512i result = _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(high, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(result));
  }
  return i;
}

__attribute__((target("avx512f"))) size_t fp16_to_fp32_avx512(const uint16_t* in, float* out, size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
  }
  return i;
}

__attribute__((target("avx512f"))) size_t fp32_to_fp16_avx512(const float* in, uint16_t* out, size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i half = _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), half);
  }
  return i;
}

}  // namespace

uint16_t fp32_to_fp16_bits(float value) { return fp32_bits_to_fp16_bits(float_bits(value)); }

float fp16_bits_to_fp32(uint16_t bits) { return bits_to_float(fp16_bits_to_fp32_bits(bits)); }

uint16_t fp32_to_bf16_bits(float value) { return fp32_bits_to_bf16_bits(float_bits(value)); }

float round_through(DType dtype, float value) {
  switch (dtype) {
    case DType::kFp32: return value;
    case DType::kFp16: return fp16_bits_to_fp32(fp32_to_fp16_bits(value));
    case DType::kBf16: return bf16_bits_to_fp32(fp32_to_bf16_bits(value));
  }
  return value;
}

void cast_from_fp32(DType dtype, const float* source, std::byte* destination, size_t element_count) {
  if (element_count == 0) return;  // an empty vector's data() may be null, which memcpy may not take
  if (dtype == DType::kFp32) {
    std::memcpy(destination, source, element_count * sizeof(float));
    return;
  }
  auto* out = reinterpret_cast<uint16_t*>(destination);
  const bool wide = avx512_casts_available();
  if (dtype == DType::kFp16) {
    for (size_t i = wide ? fp32_to_fp16_avx512(source, out, element_count) : 0; i < element_count; ++i) {
      out[i] = fp32_to_fp16_bits(source[i]);
    }
  } else {
    for (size_t i = wide ? fp32_to_bf16_avx512(source, out, element_count) : 0; i < element_count; ++i) {
      out[i] = fp32_to_bf16_bits(source[i]);
    }
  }
}

void cast_to_fp32(DType dtype, const std::byte* source, float* destination, size_t element_count) {
  if (element_count == 0) return;  // an empty vector's data() may be null, which memcpy may not take
  if (dtype == DType::kFp32) {
    std::memcpy(destination, source, element_count * sizeof(float));
    return;
  }
  const auto* in = reinterpret_cast<const uint16_t*>(source);
  const bool wide = avx512_casts_available();
  if (dtype == DType::kFp16) {
    for (size_t i = wide ? fp16_to_fp32_avx512(in, destination, element_count) : 0; i < element_count; ++i) {
      destination[i] = fp16_bits_to_fp32(in[i]);
    }
  } else {
    for (size_t i = wide ? bf16_to_fp32_avx512(in, destination, element_count) : 0; i < element_count; ++i) {
      destination[i] = bf16_bits_to_fp32(in[i]);
    }
  }
}

void cast_to_fp32_threads(DType dtype, const std::byte* source, float* destination, size_t element_count,
                          int threads) {
  const size_t element_bytes = dtype_size_bytes(dtype);
  run_in_ranges(element_count, part_count(element_count, threads, kCastElementsPerThread), 64,
                [&](size_t first, size_t end, size_t) {
                  cast_to_fp32(dtype, source + first * element_bytes, destination + first, end - first);
                });
}

void cast_from_fp32_threads(DType dtype, const float* source, std::byte* destination, size_t element_count,
                            int threads) {
  const size_t element_bytes = dtype_size_bytes(dtype);
  run_in_ranges(element_count, part_count(element_count, threads, kCastElementsPerThread), 64,
                [&](size_t first, size_t end, size_t) {
                  cast_from_fp32(dtype, source + first, destination + first * element_bytes, end - first);
                });
}

void fill_zeros_threads(float* destination, size_t element_count, int threads) {
  run_in_ranges(element_count, part_count(element_count, threads, kCastElementsPerThread), 64,
                [&](size_t first, size_t end, size_t) { std::memset(destination + first, 0, (end - first) * sizeof(float)); });
}

}  // namespace zerosim
