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

// C[r][j] = C[r][j] + A[r][k] * B[k][j] for k = 0, 1, ..., inner - 1 in turn, each product and
// sum rounded to float: per output element the same left fold as add_scaled applied row by row
// over k (so the same bits), with a block of C held in registers across the whole fold instead
// of loaded and stored at every k. A [rows, inner], B [inner, n], C [rows, n], row-major.
void add_rows_times_matrix(const float* a, size_t rows, size_t inner, const float* b, size_t n, float* c);
// The same product with C's rows split among up to `threads` threads (the caller's among them),
// in blocks of whole register blocks, each thread folding its own rows exactly as above: the
// same bits for any thread count. A product too small to be worth a thread runs on the caller.
void add_rows_times_matrix_threads(const float* a, size_t rows, size_t inner, const float* b, size_t n, float* c,
                                   int threads);
// Each path alone (tests): the scalar loop, which the others must equal; AVX2 and AVX-512 only
// on a CPU that has them.
void add_scaled_scalar(float a, const float* x, float* y, size_t n);
void add_scaled_avx2(float a, const float* x, float* y, size_t n);
void add_scaled_avx512(float a, const float* x, float* y, size_t n);
void add_rows_times_matrix_scalar(const float* a, size_t rows, size_t inner, const float* b, size_t n, float* c);
void add_rows_times_matrix_avx2(const float* a, size_t rows, size_t inner, const float* b, size_t n, float* c);
void add_rows_times_matrix_avx512(const float* a, size_t rows, size_t inner, const float* b, size_t n, float* c);

}  // namespace zerosim
