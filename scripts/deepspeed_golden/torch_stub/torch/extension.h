// Stand-in for <torch/extension.h>, just enough to compile DeepSpeed's CPU Adam sources
// (csrc/includes/cpu_adam.h, csrc/includes/simd.h, csrc/adam/cpu_adam_impl.cpp) without
// libtorch, for scripts/deepspeed_golden/cpu_adam_driver.cpp.
//
// Why <math.h> is here: the real torch/extension.h pulls in pybind11 and so Python.h, which
// includes <math.h>. In C++ (libstdc++) <math.h> puts std's float overloads (sqrt(float),
// ...) into the global namespace, so the unqualified `sqrt(1 - _betta2_t)` in
// Adam_Optimizer::update_state is the single-precision square root. With only <cmath> the
// same call finds C's double `::sqrt` and the bias correction is computed in double and then
// rounded, which gives different fp32 bits. ZEROSIM_STUB_WITHOUT_MATH_H builds the second,
// wrong variant on purpose (cpu_adam_golden.py counts how many steps differ).
#pragma once

#ifndef ZEROSIM_STUB_WITHOUT_MATH_H
#include <math.h>
#endif
#include <cmath>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#define TORCH_CHECK(cond, ...) \
    do {                       \
        if (!(cond)) throw std::runtime_error("TORCH_CHECK failed: " #cond); \
    } while (0)

namespace c10 {

// 16-bit types: the sources instantiate their kernels for these, the driver never runs them.
struct Half {
    uint16_t x;
    Half() = default;
    Half(float) { std::abort(); }
    operator float() const { std::abort(); }
};
struct BFloat16 {
    uint16_t x;
    BFloat16() = default;
    BFloat16(float) { std::abort(); }
    operator float() const { std::abort(); }
};

enum class ScalarType { Half, BFloat16, Float };

template <typename T>
struct CppTypeToScalarType;
template <>
struct CppTypeToScalarType<Half> : std::integral_constant<ScalarType, ScalarType::Half> {};
template <>
struct CppTypeToScalarType<BFloat16> : std::integral_constant<ScalarType, ScalarType::BFloat16> {};
template <>
struct CppTypeToScalarType<float> : std::integral_constant<ScalarType, ScalarType::Float> {};

inline const char* toString(ScalarType t)
{
    return t == ScalarType::Half ? "Half" : t == ScalarType::BFloat16 ? "BFloat16" : "Float";
}

}  // namespace c10

namespace at {
using c10::ScalarType;
struct TypeMeta {
    ScalarType type;
};
inline ScalarType typeMetaToScalarType(TypeMeta m) { return m.type; }
}  // namespace at

namespace torch {

struct TensorOptions {
    at::TypeMeta meta;
    at::TypeMeta dtype() const { return meta; }
};

// A contiguous fp32 view of caller-owned memory: all the driver feeds to ds_adam_step.
class Tensor {
public:
    Tensor() = default;
    Tensor(float* data, int64_t numel) : data_(data), numel_(numel) {}
    Tensor contiguous() const { return *this; }
    bool is_contiguous() const { return true; }
    bool defined() const { return data_ != nullptr; }
    void* data_ptr() const { return data_; }
    template <typename T>
    T* data_ptr() const
    {
        static_assert(std::is_same_v<T, float>, "the stub only holds fp32 data");
        return static_cast<T*>(data_);
    }
    int64_t numel() const { return numel_; }
    size_t element_size() const { return sizeof(float); }
    c10::ScalarType scalar_type() const { return c10::ScalarType::Float; }
    TensorOptions options() const { return TensorOptions{at::TypeMeta{c10::ScalarType::Float}}; }

private:
    float* data_ = nullptr;
    int64_t numel_ = 0;
};

constexpr c10::ScalarType kFloat32 = c10::ScalarType::Float;

}  // namespace torch
