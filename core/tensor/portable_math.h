// exp, log and cos that give the same bits on every x86-64 machine.
//
// Why: glibc picks its libm variants at run time by CPU features (__expf_fma, __cos_fma, ...),
// and those are not bit-identical to the SSE2 ones, so std::exp in the softmax or std::cos in
// a scheduler made the training state depend on the machine. These use only IEEE basic
// operations (+, -, *, /, exact scaling and rounding to integer) in a fixed order, built
// with -ffp-contract=off, so they are pure functions of their inputs. Accuracy: within a
// couple of ulps of the true value in double (ample for a softmax and a learning rate); they
// are not correctly rounded, only reproducible.
#pragma once

#include <cstddef>

namespace zerosim {

// 1/n! for n = 0..14, the exp series' coefficients: each is 1 divided by 2, 3, ..., n in turn,
// every quotient rounded to nearest. portable_math.cpp proves them equal to that division at
// compile time; the CUDA kernels read them (device_portable_math.cuh) rather than dividing.
inline constexpr double kExpInverseFactorials[15] = {
    0x1p+0, 0x1p+0, 0x1p-1, 0x1.5555555555555p-3, 0x1.5555555555555p-5, 0x1.1111111111111p-7, 0x1.6c16c16c16c17p-10,
    0x1.a01a01a01a01ap-13, 0x1.a01a01a01a01ap-16, 0x1.71de3a556c734p-19, 0x1.27e4fb7789f5dp-22, 0x1.ae64567f544e4p-26,
    0x1.1eed8eff8d898p-29, 0x1.6124613a86d0ap-33, 0x1.93974a8c07c9ep-37};

double portable_exp(double x);
double portable_log(double x);
double portable_cos(double x);

// The float versions evaluate in double and round once.
inline float portable_expf(float x) { return static_cast<float>(portable_exp(static_cast<double>(x))); }

// out[i] = portable_expf(x[i]) for i < n, bit for bit (x and out may be the same array). With
// AVX-512 eight at a time: the same operations in the same order on each lane (the reduction,
// the Horner steps as separate multiplies and adds, the scaling by 2^k as two exact-then-once-
// rounded multiplies, which is what ldexp computes); a softmax over a vocabulary spends most of
// its time here.
void portable_expf_array(const float* x, float* out, size_t n);
// out[i] = portable_exp(x[i]), bit for bit, the same way.
void portable_exp_array(const double* x, double* out, size_t n);
inline float portable_logf(float x) { return static_cast<float>(portable_log(static_cast<double>(x))); }

}  // namespace zerosim
