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
