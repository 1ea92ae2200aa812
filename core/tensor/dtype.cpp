#include "core/tensor/dtype.h"

#include "core/tensor/dtype_bits.h"

namespace zerosim {

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
  if (dtype == DType::kFp32) {
    std::memcpy(destination, source, element_count * sizeof(float));
    return;
  }
  auto* out = reinterpret_cast<uint16_t*>(destination);
  if (dtype == DType::kFp16) {
    for (size_t i = 0; i < element_count; ++i) out[i] = fp32_to_fp16_bits(source[i]);
  } else {
    for (size_t i = 0; i < element_count; ++i) out[i] = fp32_to_bf16_bits(source[i]);
  }
}

void cast_to_fp32(DType dtype, const std::byte* source, float* destination, size_t element_count) {
  if (dtype == DType::kFp32) {
    std::memcpy(destination, source, element_count * sizeof(float));
    return;
  }
  const auto* in = reinterpret_cast<const uint16_t*>(source);
  if (dtype == DType::kFp16) {
    for (size_t i = 0; i < element_count; ++i) destination[i] = fp16_bits_to_fp32(in[i]);
  } else {
    for (size_t i = 0; i < element_count; ++i) destination[i] = bf16_bits_to_fp32(in[i]);
  }
}

}  // namespace zerosim
