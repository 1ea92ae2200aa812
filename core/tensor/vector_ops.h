// The model's dense loops, vectorized across independent elements, never reassociated.
//
// add_scaled(a, x, y, n) is y[k] = y[k] + a * x[k]: one multiply and one add, each rounded to
// float (the build forbids FMA contraction, and the SIMD paths use separate multiply and add
// instructions), so every element gets exactly the scalar loop's bits on every path and machine.
// The dense products (add_product) fold with fused multiply-adds instead: one instruction a
// step where an unfused fold takes two, on the CPUs and GPUs that issue one multiply-add a
// cycle a lane; the fold order per output element is the same fixed left fold.
//
// The widest path the CPU has (AVX-512, AVX2, or scalar) is chosen per call from the CPU's
// feature bits (a load and a test).
#pragma once

#include <cstddef>

namespace zerosim {

void add_scaled(float a, const float* x, float* y, size_t n);

// A matrix operand of a product, read where it is stored: element (i, k) at
// data[i * row_stride + k * column_stride]. A row-major array has column_stride 1; the
// transpose of a row-major array has row_stride 1, so a product with A^T or B^T reads the
// array itself instead of a transposed copy (a copy moves every element once more through
// memory, and computes nothing).
struct ProductOperand {
  const float* data;
  size_t row_stride;
  size_t column_stride;
  // `data` as a row-major matrix of `columns` columns.
  static ProductOperand row_major(const float* data, size_t columns) { return {data, columns, 1}; }
  // The transpose of the row-major matrix `stored`, which has `stored_columns` columns.
  static ProductOperand transpose_of(const float* stored, size_t stored_columns) { return {stored, 1, stored_columns}; }
};

// C[r][j] = fma(A[r][k], B[k][j], C[r][j]) for k = 0, 1, ..., inner - 1 in turn: per output
// element a left fold over k from C's value, each step one fused multiply-add (the product and
// the sum rounded once, as IEEE 754 defines fusedMultiplyAdd: the same bits on every CPU and on
// a GPU's __fmaf_rn). A is [rows, inner], B [inner, n], C [rows, n] row-major. The blocking,
// the packing and the path change which elements are computed when, never an element's fold.
void add_product(ProductOperand a, size_t rows, size_t inner, ProductOperand b, size_t n, float* c);
// The same product on up to `threads` threads (the caller's among them), each folding its own
// block of C exactly as above: the same bits for any thread count. C's columns are split first
// (a thread then packs only its own columns of B, not all of B), the remaining parts split the
// rows in whole register blocks. A product too small to be worth a thread runs on the caller.
void add_product_threads(ProductOperand a, size_t rows, size_t inner, ProductOperand b, size_t n, float* c,
                         int threads);
// Both operands row-major.
void add_rows_times_matrix(const float* a, size_t rows, size_t inner, const float* b, size_t n, float* c);
// Each path alone (tests): the scalar loop, which the others must equal; AVX2 and AVX-512 only
// on a CPU that has them.
void add_scaled_scalar(float a, const float* x, float* y, size_t n);
void add_scaled_avx2(float a, const float* x, float* y, size_t n);
void add_scaled_avx512(float a, const float* x, float* y, size_t n);
// The products' paths write C's n columns in rows `ldc` floats apart (ldc >= n: a block of a
// wider C, as a thread's share is).
void add_product_scalar(ProductOperand a, size_t rows, size_t inner, ProductOperand b, size_t n, float* c, size_t ldc);
void add_product_avx2(ProductOperand a, size_t rows, size_t inner, ProductOperand b, size_t n, float* c, size_t ldc);
void add_product_avx512(ProductOperand a, size_t rows, size_t inner, ProductOperand b, size_t n, float* c, size_t ldc);

}  // namespace zerosim
