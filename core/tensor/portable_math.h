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

namespace zerosim {

double portable_exp(double x);
double portable_log(double x);
double portable_cos(double x);

// The float versions evaluate in double and round once.
inline float portable_expf(float x) { return static_cast<float>(portable_exp(static_cast<double>(x))); }
inline float portable_logf(float x) { return static_cast<float>(portable_log(static_cast<double>(x))); }

}  // namespace zerosim
