// Elementwise kernels for the model's dense loops, vectorized across independent elements.
//
// add_scaled(a, x, y, n) is y[k] = y[k] + a * x[k]: one multiply and one add, each rounded to
// float (the build forbids FMA contraction, and the SIMD paths use separate multiply and add
// instructions), so every element gets exactly the scalar loop's bits on every path and machine.
// A dense product written as a sequence of add_scaled calls over its reduction index is
// therefore the same left fold, per output element, as the naive triple loop: vectorized over
// the outputs, never reassociated.
//
// The widest path the CPU has (AVX-512, AVX2, or scalar) is chosen per call from the CPU's
// feature bits (a load and a test).
#pragma once

#include <cstddef>

namespace zerosim {

void add_scaled(float a, const float* x, float* y, size_t n);
// Each path alone (tests): the scalar loop, which the others must equal; AVX2 and AVX-512 only
// on a CPU that has them.
void add_scaled_scalar(float a, const float* x, float* y, size_t n);
void add_scaled_avx2(float a, const float* x, float* y, size_t n);
void add_scaled_avx512(float a, const float* x, float* y, size_t n);

}  // namespace zerosim
