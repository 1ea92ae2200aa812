// Tests for core/optim: AdamW arithmetic and its ISA paths, the loss scaler's state machine,
// the LR schedules and unscale-and-clip.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "core/optim/adamw.h"
#include "core/optim/grad_clip.h"
#include "core/optim/loss_scaler.h"
#include "core/optim/lr_scheduler.h"

namespace zerosim {
namespace {

std::vector<SimdPath> available_paths() {
  std::vector<SimdPath> paths;
  for (SimdPath path : {SimdPath::kScalar, SimdPath::kAvx2, SimdPath::kAvx512})
    if (simd_path_available(path)) paths.push_back(path);
  return paths;
}

std::vector<uint32_t> bits_of(const std::vector<float>& values) {
  std::vector<uint32_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = std::bit_cast<uint32_t>(values[i]);
  return bits;
}

struct AdamArrays {
  std::vector<float> params;
  std::vector<float> grads;
  std::vector<float> exp_avg;
  std::vector<float> exp_avg_sq;
};

void run_step(SimdPath path, const AdamHyperparameters& hyperparameters, int64_t step_index, float grad_multiplier,
              AdamArrays& arrays) {
  adam_update(path, make_adam_step_scalars(hyperparameters, step_index), grad_multiplier, arrays.params.data(),
              arrays.grads.data(), arrays.exp_avg.data(), arrays.exp_avg_sq.data(), arrays.params.size());
}

// ---------------------------------------------------------------------------------------------
// An independent spelling of DeepSpeedCPUAdam's per-element list (docs/deepspeed-semantics.md §3.2)
// with the documented FMA policy, for steps 1..3 only: there repeated multiplication in double
// gives the same bits as exponentiation by squaring (b*b, then b*b*b == b*(b*b)).
struct ReferenceElement {
  float param, exp_avg, exp_avg_sq;
};

ReferenceElement reference_adam_element(const AdamHyperparameters& h, int step_index, float grad_multiplier,
                                        ReferenceElement state, float grad_in) {
  float bias_correction1 = 1.0f;
  float bias_correction2_rsqrt = 1.0f;
  if (h.bias_correction) {
    // DeepSpeed's running fp32 products, spelled out without the early stop.
    float beta1_power = 1.0f, beta2_power = 1.0f;
    for (int i = 0; i < step_index; ++i) {
      beta1_power *= h.beta1;
      beta2_power *= h.beta2;
    }
    bias_correction1 = 1.0f - beta1_power;
    bias_correction2_rsqrt = 1.0f / std::sqrt(1.0f - beta2_power);
  }
  const float step_size = -h.learning_rate / bias_correction1;
  float g = grad_in * grad_multiplier;
  if (!h.adamw_mode && h.weight_decay > 0.0f) g = std::fmaf(state.param, h.weight_decay, g);
  float m = state.exp_avg * h.beta1;
  m = std::fmaf(g, 1.0f - h.beta1, m);
  float v = state.exp_avg_sq * h.beta2;
  v = std::fmaf(g * g, 1.0f - h.beta2, v);
  const float d = std::fmaf(std::sqrt(v), bias_correction2_rsqrt, h.epsilon);
  const float u = m / d;
  float p = state.param;
  if (h.adamw_mode && h.weight_decay > 0.0f) p = std::fmaf(p, -h.learning_rate * h.weight_decay, p);
  p = std::fmaf(u, step_size, p);
  return {p, m, v};
}

// Textbook AdamW / Adam-L2 in double (PyTorch's formulas), for a tolerance check that
// catches a wrong formula independently of rounding.
ReferenceElement textbook_adam_element(const AdamHyperparameters& h, int step_index, double grad_multiplier,
                                       ReferenceElement state, double grad_in) {
  double g = grad_in * grad_multiplier;
  double p = state.param;
  if (!h.adamw_mode) g += h.weight_decay * p;
  const double m = h.beta1 * double(state.exp_avg) + (1.0 - h.beta1) * g;
  const double v = h.beta2 * double(state.exp_avg_sq) + (1.0 - h.beta2) * g * g;
  const double bc1 = h.bias_correction ? 1.0 - std::pow(double(h.beta1), step_index) : 1.0;
  const double bc2 = h.bias_correction ? 1.0 - std::pow(double(h.beta2), step_index) : 1.0;
  if (h.adamw_mode) p -= double(h.learning_rate) * h.weight_decay * p;
  p -= double(h.learning_rate) / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + h.epsilon);
  return {static_cast<float>(p), static_cast<float>(m), static_cast<float>(v)};
}

// ---------------------------------------------------------------------------------------------
// AdamW

TEST(AdamStepScalars, HandDerivedValues) {
  AdamHyperparameters h;
  h.learning_rate = 0.125f;
  h.beta1 = 0.5f;
  h.beta2 = 0.75f;
  h.epsilon = 0.5f;
  h.weight_decay = 0.5f;
  const AdamStepScalars s = make_adam_step_scalars(h, 1);
  EXPECT_EQ(s.bias_correction1, 0.5f);         // 1 - 0.5
  EXPECT_EQ(s.bias_correction2_rsqrt, 2.0f);   // 1 / sqrt(1 - 0.75)
  EXPECT_EQ(s.step_size, -0.25f);              // -0.125 / 0.5
  EXPECT_EQ(s.decoupled_decay_factor, -0.0625f);
  EXPECT_EQ(s.one_minus_beta1, 0.5f);
  EXPECT_EQ(s.one_minus_beta2, 0.25f);
  EXPECT_EQ(s.decay_mode, WeightDecayMode::kDecoupled);

  const AdamStepScalars s2 = make_adam_step_scalars(h, 2);
  EXPECT_EQ(s2.bias_correction1, 0.75f);       // 1 - 0.25
  // fp32 as DeepSpeed's update_state(): 1 - 0.5625 = 0.4375 exactly, then sqrtf and 1/x in
  // float, which here differs from the double chain's rounding.
  EXPECT_EQ(s2.bias_correction2_rsqrt, 1.0f / std::sqrt(0.4375f));
  EXPECT_NE(s2.bias_correction2_rsqrt, static_cast<float>(1.0 / std::sqrt(0.4375)));

  h.adamw_mode = false;
  EXPECT_EQ(make_adam_step_scalars(h, 1).decay_mode, WeightDecayMode::kL2);
  h.weight_decay = 0.0f;
  EXPECT_EQ(make_adam_step_scalars(h, 1).decay_mode, WeightDecayMode::kNone);
  h.adamw_mode = true;
  EXPECT_EQ(make_adam_step_scalars(h, 1).decay_mode, WeightDecayMode::kNone);

  h.bias_correction = false;
  const AdamStepScalars uncorrected = make_adam_step_scalars(h, 7);
  EXPECT_EQ(uncorrected.bias_correction1, 1.0f);
  EXPECT_EQ(uncorrected.bias_correction2_rsqrt, 1.0f);
  EXPECT_EQ(uncorrected.step_size, -0.125f);
}

// One AdamW step worked out by hand, numbers chosen so that every op is exact:
// lr 0.125, betas (0.5, 0.75), eps 0.5, wd 0.5, grad_multiplier 0.5, t = 1.
//   element 0: g = 1*0.5 = 0.5; m = 0.25; v = 0.0625; d = 0.25*2 + 0.5 = 1; u = 0.25;
//              p = 1 - 0.0625*1 = 0.9375; p = 0.9375 + 0.25*(-0.25) = 0.875
//   element 1: g = -3*0.5 = -1.5; m = -0.75; v = 0.5625; d = 0.75*2 + 0.5 = 2; u = -0.375;
//              p = -2 + 0.125 = -1.875; p = -1.875 + 0.09375 = -1.78125
TEST(AdamUpdate, HandDerivedAdamWStep) {
  AdamHyperparameters h;
  h.learning_rate = 0.125f;
  h.beta1 = 0.5f;
  h.beta2 = 0.75f;
  h.epsilon = 0.5f;
  h.weight_decay = 0.5f;
  h.adamw_mode = true;
  for (SimdPath path : available_paths()) {
    SCOPED_TRACE(simd_path_name(path));
    AdamArrays a{{1.0f, -2.0f}, {1.0f, -3.0f}, {0.0f, 0.0f}, {0.0f, 0.0f}};
    run_step(path, h, 1, 0.5f, a);
    EXPECT_EQ(a.params, (std::vector<float>{0.875f, -1.78125f}));
    EXPECT_EQ(a.exp_avg, (std::vector<float>{0.25f, -0.75f}));
    EXPECT_EQ(a.exp_avg_sq, (std::vector<float>{0.0625f, 0.5625f}));
  }
}

// Two Adam-L2 steps by hand: lr 0.375, betas (0.5, 0), eps 0, wd 0.25, p0 = 2.
//   t=1: bc1 = 0.5, step_size = -0.75, bc2 = 1. g = 2*0.25 + 1 = 1.5; m = 0.75; v = 2.25;
//        d = 1.5; u = 0.5; p = 2 - 0.375 = 1.625
//   t=2: bc1 = 0.75, step_size = -0.5. g = 1.625*0.25 + 0.59375 = 1; m = 0.375 + 0.5 = 0.875;
//        v = 0 + 1 = 1; d = 1; u = 0.875; p = 1.625 - 0.4375 = 1.1875
TEST(AdamUpdate, HandDerivedAdamL2TwoSteps) {
  AdamHyperparameters h;
  h.learning_rate = 0.375f;
  h.beta1 = 0.5f;
  h.beta2 = 0.0f;
  h.epsilon = 0.0f;
  h.weight_decay = 0.25f;
  h.adamw_mode = false;
  for (SimdPath path : available_paths()) {
    SCOPED_TRACE(simd_path_name(path));
    AdamArrays a{{2.0f}, {1.0f}, {0.0f}, {0.0f}};
    run_step(path, h, 1, 1.0f, a);
    EXPECT_EQ(a.params[0], 1.625f);
    EXPECT_EQ(a.exp_avg[0], 0.75f);
    EXPECT_EQ(a.exp_avg_sq[0], 2.25f);
    a.grads[0] = 0.59375f;
    run_step(path, h, 2, 1.0f, a);
    EXPECT_EQ(a.params[0], 1.1875f);
    EXPECT_EQ(a.exp_avg[0], 0.875f);
    EXPECT_EQ(a.exp_avg_sq[0], 1.0f);
  }
}

// Three steps on a few elements against the independent float reference (bit-exact) and the
// textbook double formulas (close), for every combination of mode, bias correction and decay.
TEST(AdamUpdate, MatchesReferencesOverThreeSteps) {
  const std::vector<float> initial_params = {0.5f, -1.25f, 3.0f, 0.0f, 1e-3f, -7.5f, 2.0f, 0.1f, -0.3f};
  const std::vector<std::vector<float>> grads_per_step = {
      {0.1f, -0.2f, 0.3f, 0.0f, 1e-4f, -5.0f, 0.25f, -0.01f, 2.0f},
      {-0.05f, 0.4f, 0.3f, 1.0f, 2e-4f, 3.0f, -0.25f, 0.02f, -1.0f},
      {0.2f, 0.1f, -0.6f, -1.0f, 0.0f, -1.0f, 0.5f, 0.03f, 0.5f},
  };
  for (bool adamw_mode : {true, false}) {
    for (bool bias_correction : {true, false}) {
      for (float weight_decay : {0.0f, 0.01f}) {
        AdamHyperparameters h;
        h.learning_rate = 1e-2f;
        h.beta1 = 0.9f;
        h.beta2 = 0.999f;
        h.epsilon = 1e-8f;
        h.weight_decay = weight_decay;
        h.adamw_mode = adamw_mode;
        h.bias_correction = bias_correction;
        const float grad_multiplier = 0.75f;
        for (SimdPath path : available_paths()) {
          SCOPED_TRACE(testing::Message() << simd_path_name(path) << " adamw=" << adamw_mode
                                          << " bias_correction=" << bias_correction << " wd=" << weight_decay);
          AdamArrays a{initial_params, {}, std::vector<float>(initial_params.size(), 0.0f),
                       std::vector<float>(initial_params.size(), 0.0f)};
          std::vector<ReferenceElement> exact(initial_params.size()), textbook(initial_params.size());
          for (size_t i = 0; i < initial_params.size(); ++i) exact[i] = textbook[i] = {initial_params[i], 0.0f, 0.0f};
          for (int step = 1; step <= 3; ++step) {
            a.grads = grads_per_step[step - 1];
            run_step(path, h, step, grad_multiplier, a);
            for (size_t i = 0; i < initial_params.size(); ++i) {
              exact[i] = reference_adam_element(h, step, grad_multiplier, exact[i], a.grads[i]);
              textbook[i] = textbook_adam_element(h, step, grad_multiplier, textbook[i], a.grads[i]);
              EXPECT_EQ(std::bit_cast<uint32_t>(a.params[i]), std::bit_cast<uint32_t>(exact[i].param))
                  << "step " << step << " element " << i;
              EXPECT_EQ(std::bit_cast<uint32_t>(a.exp_avg[i]), std::bit_cast<uint32_t>(exact[i].exp_avg));
              EXPECT_EQ(std::bit_cast<uint32_t>(a.exp_avg_sq[i]), std::bit_cast<uint32_t>(exact[i].exp_avg_sq));
              const float tolerance = 2e-5f * std::max(1.0f, std::fabs(textbook[i].param));
              EXPECT_NEAR(a.params[i], textbook[i].param, tolerance) << "step " << step << " element " << i;
            }
          }
        }
      }
    }
  }
}

TEST(AdamUpdate, BiasCorrectionOffIsPlainAdam) {
  // Without bias correction, step 1 from zero moments moves p by -lr * (1-b1) g / (sqrt(1-b2)|g| + eps).
  AdamHyperparameters h;
  h.learning_rate = 0.5f;
  h.beta1 = 0.5f;
  h.beta2 = 0.75f;
  h.epsilon = 0.0f;
  h.bias_correction = false;
  for (SimdPath path : available_paths()) {
    SCOPED_TRACE(simd_path_name(path));
    AdamArrays a{{1.0f}, {2.0f}, {0.0f}, {0.0f}};
    run_step(path, h, 5, 1.0f, a);  // the step index must not matter
    // m = 1, v = 1, d = 1, u = 1, p = 1 - 0.5
    EXPECT_EQ(a.params[0], 0.5f);
    EXPECT_EQ(a.exp_avg[0], 1.0f);
    EXPECT_EQ(a.exp_avg_sq[0], 1.0f);
  }
}

TEST(AdamUpdate, ZeroWeightDecayIsTheSameInBothModes) {
  AdamHyperparameters adamw;
  adamw.weight_decay = 0.0f;
  adamw.adamw_mode = true;
  AdamHyperparameters l2 = adamw;
  l2.adamw_mode = false;
  AdamArrays a{{1.0f, -2.0f, 0.5f}, {0.3f, 0.1f, -0.7f}, {0.01f, 0.0f, -0.02f}, {0.001f, 0.0f, 0.004f}};
  AdamArrays b = a;
  run_step(best_simd_path(), adamw, 3, 1.0f, a);
  run_step(best_simd_path(), l2, 3, 1.0f, b);
  EXPECT_EQ(bits_of(a.params), bits_of(b.params));
  EXPECT_EQ(bits_of(a.exp_avg), bits_of(b.exp_avg));
  EXPECT_EQ(bits_of(a.exp_avg_sq), bits_of(b.exp_avg_sq));
  // And decay, when on, does change the result.
  AdamArrays c = b;
  adamw.weight_decay = 0.1f;
  AdamArrays d = a;
  run_step(best_simd_path(), adamw, 4, 1.0f, c);
  run_step(best_simd_path(), l2, 4, 1.0f, d);
  EXPECT_NE(bits_of(c.params), bits_of(d.params));
}

// Unscaling inside the kernel is one multiply, so it is the same as scaling the gradients
// beforehand and passing 1.
TEST(AdamUpdate, GradMultiplierEqualsPrescaledGradients) {
  AdamHyperparameters h;
  h.weight_decay = 0.01f;
  const float multiplier = 1.0f / 3000.0f;
  AdamArrays fused{{0.5f, -0.25f, 2.0f}, {300.0f, -4500.0f, 12.5f}, {0.1f, 0.2f, -0.3f}, {0.4f, 0.5f, 0.6f}};
  AdamArrays separate = fused;
  for (float& g : separate.grads) g = g * multiplier;
  for (SimdPath path : available_paths()) {
    AdamArrays x = fused, y = separate;
    run_step(path, h, 9, multiplier, x);
    run_step(path, h, 9, 1.0f, y);
    EXPECT_EQ(bits_of(x.params), bits_of(y.params)) << simd_path_name(path);
    EXPECT_EQ(bits_of(x.exp_avg), bits_of(y.exp_avg)) << simd_path_name(path);
  }
}

TEST(AdamUpdate, ZeroLengthAndPathQueries) {
  EXPECT_TRUE(simd_path_available(SimdPath::kScalar));
  EXPECT_TRUE(simd_path_available(best_simd_path()));
  EXPECT_STREQ(simd_path_name(SimdPath::kAvx512), "avx512");
  EXPECT_STREQ(simd_path_name(SimdPath::kAvx2), "avx2");
  EXPECT_STREQ(simd_path_name(SimdPath::kScalar), "scalar");
  for (SimdPath path : available_paths())
    adam_update(path, make_adam_step_scalars(AdamHyperparameters{}, 1), 1.0f, nullptr, nullptr, nullptr, nullptr, 0);
}

TEST(AdamHyperparameters, ValidationNamesTheField) {
  EXPECT_TRUE(validate_adam_hyperparameters(AdamHyperparameters{}).ok());
  AdamHyperparameters h;
  h.beta1 = 1.0f;
  Status status = validate_adam_hyperparameters(h);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("betas[0]"), std::string::npos);
  h = AdamHyperparameters{};
  h.beta2 = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(validate_adam_hyperparameters(h).message().find("betas[1]"), std::string::npos);
  h = AdamHyperparameters{};
  h.epsilon = -1.0f;
  EXPECT_NE(validate_adam_hyperparameters(h).message().find("eps"), std::string::npos);
  h.epsilon = 0.0f;  // 0/0 on zero gradients: refused
  EXPECT_NE(validate_adam_hyperparameters(h).message().find("eps"), std::string::npos);
  h = AdamHyperparameters{};
  h.weight_decay = std::numeric_limits<float>::infinity();
  EXPECT_NE(validate_adam_hyperparameters(h).message().find("weight_decay"), std::string::npos);
}

// The early stop changes no bias correction: against the plain running product over every
// step up to past the point where 1 - beta^t rounds to 1 (t about 17,000 for 0.999).
TEST(AdamStepScalars, RunningBetaPowerStopsWithoutChangingTheCorrection) {
  EXPECT_EQ(running_beta_power(0.5f, 0), 1.0f);
  EXPECT_EQ(running_beta_power(0.5f, 10), 1.0f / 1024.0f);
  EXPECT_EQ(running_beta_power(0.0f, 3), 0.0f);
  for (float beta : {0.0f, 0.5f, 0.9f, 0.95f, 0.999f}) {
    float plain = 1.0f;
    for (int64_t t = 1; t <= 25000; ++t) {
      plain *= beta;
      if (t > 3000 && t % 7 != 0) continue;  // each call is O(t): every step early, a sample later
      const float stopped = running_beta_power(beta, t);
      ASSERT_EQ(std::bit_cast<uint32_t>(1.0f - stopped), std::bit_cast<uint32_t>(1.0f - plain))
          << "beta " << beta << " t " << t;
      ASSERT_EQ(std::bit_cast<uint32_t>(1.0f / std::sqrt(1.0f - stopped)),
                std::bit_cast<uint32_t>(1.0f / std::sqrt(1.0f - plain)))
          << "beta " << beta << " t " << t;
    }
  }
}

// The step scalars of step t depend on (hyperparameters, t) only: a resumed process that
// computes them fresh gets the bits the uninterrupted run used.
TEST(AdamStepScalars, SameBitsFreshOrAfterRestart) {
  AdamHyperparameters h;
  h.learning_rate = 3e-4f;
  h.beta1 = 0.9f;
  h.beta2 = 0.95f;
  h.weight_decay = 0.1f;
  std::vector<AdamStepScalars> uninterrupted;
  for (int64_t t = 1; t <= 2000; ++t) uninterrupted.push_back(make_adam_step_scalars(h, t));
  for (int64_t t : {1, 2, 7, 500, 1999, 2000}) {
    const AdamHyperparameters reloaded = h;  // as read back from a checkpoint
    const AdamStepScalars fresh = make_adam_step_scalars(reloaded, t);
    const AdamStepScalars& before = uninterrupted[t - 1];
    EXPECT_EQ(std::bit_cast<uint32_t>(fresh.step_size), std::bit_cast<uint32_t>(before.step_size)) << t;
    EXPECT_EQ(std::bit_cast<uint32_t>(fresh.bias_correction1), std::bit_cast<uint32_t>(before.bias_correction1));
    EXPECT_EQ(std::bit_cast<uint32_t>(fresh.bias_correction2_rsqrt),
              std::bit_cast<uint32_t>(before.bias_correction2_rsqrt));
    EXPECT_EQ(std::bit_cast<uint32_t>(fresh.decoupled_decay_factor),
              std::bit_cast<uint32_t>(before.decoupled_decay_factor));
  }
}

// Six steps straight vs three steps, state copied out and back (a save and a resume in a new
// buffer), three more steps: the same bits.
TEST(AdamUpdate, ResumedRunMatchesUninterruptedRun) {
  AdamHyperparameters h;
  h.weight_decay = 0.05f;
  const size_t n = 1000;
  AdamArrays straight{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n, 0.0f),
                      std::vector<float>(n, 0.0f)};
  for (size_t i = 0; i < n; ++i) straight.params[i] = std::sin(static_cast<float>(i));
  auto grads_at = [&](int step) {
    std::vector<float> grads(n);
    for (size_t i = 0; i < n; ++i) grads[i] = std::cos(static_cast<float>(i * 7 + step)) * 0.01f;
    return grads;
  };
  AdamArrays resumed = straight;
  for (int step = 1; step <= 6; ++step) {
    straight.grads = grads_at(step);
    run_step(SimdPath::kScalar, h, step, 0.5f, straight);
  }
  for (int step = 1; step <= 3; ++step) {
    resumed.grads = grads_at(step);
    run_step(best_simd_path(), h, step, 0.5f, resumed);
  }
  AdamArrays reloaded{std::vector<float>(resumed.params), {}, std::vector<float>(resumed.exp_avg),
                      std::vector<float>(resumed.exp_avg_sq)};
  for (int step = 4; step <= 6; ++step) {
    reloaded.grads = grads_at(step);
    run_step(best_simd_path(), h, step, 0.5f, reloaded);
  }
  EXPECT_EQ(bits_of(straight.params), bits_of(reloaded.params));
  EXPECT_EQ(bits_of(straight.exp_avg), bits_of(reloaded.exp_avg));
  EXPECT_EQ(bits_of(straight.exp_avg_sq), bits_of(reloaded.exp_avg_sq));
}

rc::Gen<float> any_finite_float() {
  return rc::gen::suchThat(rc::gen::map(rc::gen::arbitrary<uint32_t>(),
                                        [](uint32_t bits) { return std::bit_cast<float>(bits); }),
                           [](float value) { return std::isfinite(value); });
}

// Typical training magnitudes, with exact zeros, most of the time; any finite value (denormals,
// huge values that overflow inside the step) some of the time.
rc::Gen<float> test_float() {
  return rc::gen::oneOf(
      rc::gen::map(rc::gen::inRange<int>(-1000000, 1000001), [](int x) { return static_cast<float>(x) * 1e-5f; }),
      rc::gen::map(rc::gen::inRange<int>(-30, 31), [](int e) { return std::ldexp(1.37f, e); }),
      rc::gen::just(0.0f), any_finite_float());
}

AdamHyperparameters generate_hyperparameters() {
  AdamHyperparameters h;
  h.learning_rate = static_cast<float>(*rc::gen::inRange<int>(0, 100001)) * 1e-6f;
  h.beta1 = static_cast<float>(*rc::gen::inRange<int>(0, 1000)) / 1000.0f;
  h.beta2 = *rc::gen::element(0.999f, 0.95f, 0.0f, 0.5f, 0.9999f);
  h.epsilon = *rc::gen::element(1e-8f, 1e-6f, 0.0f, 0.5f);
  h.weight_decay = *rc::gen::element(0.0f, 0.01f, 0.1f, 1.0f);
  h.adamw_mode = *rc::gen::arbitrary<bool>();
  h.bias_correction = *rc::gen::arbitrary<bool>();
  return h;
}

// The determinism contract for ISA paths: scalar, AVX2 and AVX-512 write the same bits, for
// any length (tails of every size), any alignment and any hyperparameters. Run on a CPU
// without AVX-512 it checks what it can.
RC_GTEST_PROP(AdamUpdateProperty, AllSimdPathsGiveIdenticalBits, ()) {
  const size_t length = *rc::gen::inRange<size_t>(0, 301);
  const size_t misalignment = *rc::gen::inRange<size_t>(0, 16);  // in floats
  const AdamHyperparameters h = generate_hyperparameters();
  const int64_t step_index = *rc::gen::inRange<int64_t>(1, 100000);
  const float grad_multiplier = *rc::gen::element(1.0f, 0.5f, 1.0f / 65536.0f, 3.1e-3f);
  const int steps = *rc::gen::inRange(1, 4);

  AdamArrays initial;
  for (auto* array : {&initial.params, &initial.grads, &initial.exp_avg, &initial.exp_avg_sq}) {
    *array = std::vector<float>(misalignment, 0.0f);
    const auto values = *rc::gen::container<std::vector<float>>(length, test_float());
    array->insert(array->end(), values.begin(), values.end());
  }
  for (float& v : initial.exp_avg_sq) v = std::fabs(v);  // a second moment is never negative

  auto run = [&](SimdPath path) {
    AdamArrays a = initial;
    for (int s = 0; s < steps; ++s)
      adam_update(path, make_adam_step_scalars(h, step_index + s), grad_multiplier, a.params.data() + misalignment,
                  a.grads.data() + misalignment, a.exp_avg.data() + misalignment,
                  a.exp_avg_sq.data() + misalignment, length);
    return a;
  };
  const AdamArrays reference = run(SimdPath::kScalar);
  for (SimdPath path : available_paths()) {
    if (path == SimdPath::kScalar) continue;
    const AdamArrays result = run(path);
    RC_ASSERT(bits_of(result.params) == bits_of(reference.params));
    RC_ASSERT(bits_of(result.exp_avg) == bits_of(reference.exp_avg));
    RC_ASSERT(bits_of(result.exp_avg_sq) == bits_of(reference.exp_avg_sq));
    RC_ASSERT(bits_of(result.grads) == bits_of(reference.grads));  // read only
  }
}

// Element-wise: any split into chunks (as threads or sub-groups do) gives the same bits.
RC_GTEST_PROP(AdamUpdateProperty, ChunkingDoesNotChangeBits, ()) {
  const size_t length = *rc::gen::inRange<size_t>(1, 301);
  const size_t split = *rc::gen::inRange<size_t>(0, length + 1);
  const AdamHyperparameters h = generate_hyperparameters();
  AdamArrays whole;
  for (auto* array : {&whole.params, &whole.grads, &whole.exp_avg, &whole.exp_avg_sq})
    *array = *rc::gen::container<std::vector<float>>(length, test_float());
  for (float& v : whole.exp_avg_sq) v = std::fabs(v);
  AdamArrays chunked = whole;
  const AdamStepScalars scalars = make_adam_step_scalars(h, 3);
  adam_update(scalars, 1.0f, whole.params.data(), whole.grads.data(), whole.exp_avg.data(), whole.exp_avg_sq.data(),
              length);
  adam_update(scalars, 1.0f, chunked.params.data(), chunked.grads.data(), chunked.exp_avg.data(),
              chunked.exp_avg_sq.data(), split);
  adam_update(scalars, 1.0f, chunked.params.data() + split, chunked.grads.data() + split,
              chunked.exp_avg.data() + split, chunked.exp_avg_sq.data() + split, length - split);
  RC_ASSERT(bits_of(whole.params) == bits_of(chunked.params));
  RC_ASSERT(bits_of(whole.exp_avg) == bits_of(chunked.exp_avg));
  RC_ASSERT(bits_of(whole.exp_avg_sq) == bits_of(chunked.exp_avg_sq));
}

// ---------------------------------------------------------------------------------------------
// Loss scaler

DynamicLossScalerOptions scaler_options(double initial_scale, int64_t window, int64_t hysteresis,
                                        bool consecutive = false, double min_scale = 1.0, bool raise = false) {
  DynamicLossScalerOptions options;
  options.initial_scale = initial_scale;
  options.loss_scale_window = window;
  options.hysteresis = hysteresis;
  options.consecutive_hysteresis = consecutive;
  options.min_loss_scale = min_scale;
  options.raise_error_at_min_scale = raise;
  return options;
}

LossScaler make_scaler(const DynamicLossScalerOptions& options) {
  Result<LossScaler> scaler = LossScaler::make_dynamic(options);
  EXPECT_TRUE(scaler.ok()) << scaler.status().to_string();
  return std::move(scaler).value();
}

void update(LossScaler& scaler, bool overflow) {
  const Status status = scaler.update_scale(overflow);
  ASSERT_TRUE(status.ok()) << status.to_string();
}

TEST(LossScaler, HysteresisDelaysTheFirstHalving) {
  LossScaler scaler = make_scaler(scaler_options(65536.0, 1000, 2));
  EXPECT_EQ(scaler.state(), (LossScalerState{65536.0, 0, -1, 2}));
  update(scaler, true);  // tolerated: hysteresis 2 -> 1, scale kept
  EXPECT_EQ(scaler.state(), (LossScalerState{65536.0, 1, 0, 1}));
  update(scaler, true);  // counts: halve
  EXPECT_EQ(scaler.state(), (LossScalerState{32768.0, 2, 1, 1}));
  update(scaler, true);  // hysteresis stays spent: halve again
  EXPECT_EQ(scaler.state(), (LossScalerState{16384.0, 3, 2, 1}));
  update(scaler, false);  // clean, but not a full window: hysteresis not refilled
  EXPECT_EQ(scaler.state(), (LossScalerState{16384.0, 4, 2, 1}));
}

TEST(LossScaler, DoublesAfterEachCleanWindowAndRefillsHysteresis) {
  LossScaler scaler = make_scaler(scaler_options(8.0, 3, 2));
  // From the start, last_overflow = -1: stable = iteration; doubles at iterations 3, 6, ...
  std::vector<double> scales;
  for (int i = 0; i < 7; ++i) {
    update(scaler, false);
    scales.push_back(scaler.loss_scale());
  }
  EXPECT_EQ(scales, (std::vector<double>{8, 8, 8, 16, 16, 16, 32}));
  // An overflow at iteration 7 spends hysteresis; the window restarts from there.
  update(scaler, true);
  EXPECT_EQ(scaler.state(), (LossScalerState{32.0, 8, 7, 1}));
  update(scaler, false);  // iteration 8: stable 0
  update(scaler, false);  // 9: stable 1
  update(scaler, false);  // 10: stable 2
  EXPECT_EQ(scaler.state(), (LossScalerState{32.0, 11, 7, 1}));
  update(scaler, false);  // 11: stable 3 -> double, refill hysteresis
  EXPECT_EQ(scaler.state(), (LossScalerState{64.0, 12, 7, 2}));
}

TEST(LossScaler, MinimumScaleFloor) {
  LossScaler scaler = make_scaler(scaler_options(4.0, 1000, 1, false, 1.0, /*raise=*/false));
  update(scaler, true);
  EXPECT_EQ(scaler.loss_scale(), 2.0);
  update(scaler, true);
  EXPECT_EQ(scaler.loss_scale(), 1.0);
  update(scaler, true);  // clamped, the run goes on
  EXPECT_EQ(scaler.loss_scale(), 1.0);
  EXPECT_EQ(scaler.state().current_iteration, 3);

  // A minimum that is not a power of two: max(4/2, 3) = 3.
  LossScaler odd = make_scaler(scaler_options(4.0, 1000, 1, false, 3.0, false));
  update(odd, true);
  EXPECT_EQ(odd.loss_scale(), 3.0);
}

TEST(LossScaler, RaisesAtMinimumScaleLikeDeepSpeed) {
  LossScaler scaler = make_scaler(scaler_options(2.0, 1000, 2, false, 1.0, /*raise=*/true));
  update(scaler, true);  // hysteresis 2 -> 1
  update(scaler, true);  // 2 -> 1
  const LossScalerState before = scaler.state();
  const Status status = scaler.update_scale(true);
  EXPECT_EQ(status.code(), StatusCode::kAborted);
  EXPECT_EQ(scaler.state(), before);  // DeepSpeed raises before touching its state
  // DeepSpeed's default, and what from_config gives.
  EXPECT_TRUE(DynamicLossScalerOptions{}.raise_error_at_min_scale);
}

TEST(LossScaler, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  LossScaler consecutive = make_scaler(scaler_options(1024.0, 1000, 3, /*consecutive=*/true));
  LossScaler plain = make_scaler(scaler_options(1024.0, 1000, 3, /*consecutive=*/false));
  for (bool overflow : {true, false, true, true}) {
    update(consecutive, overflow);
    update(plain, overflow);
  }
  // consecutive: 3 -> 2, refill 3, -> 2, -> 1. plain: 3 -> 2, stays 2, -> 1, halve.
  EXPECT_EQ(consecutive.state(), (LossScalerState{1024.0, 4, 3, 1}));
  EXPECT_EQ(plain.state(), (LossScalerState{512.0, 4, 3, 1}));
  update(consecutive, true);
  EXPECT_EQ(consecutive.loss_scale(), 512.0);
}

RC_GTEST_PROP(LossScalerProperty, RestoredStateContinuesIdentically, ()) {
  const DynamicLossScalerOptions options =
      scaler_options(std::ldexp(1.0, *rc::gen::inRange(0, 33)), *rc::gen::inRange<int64_t>(1, 6),
                     *rc::gen::inRange<int64_t>(1, 4), *rc::gen::arbitrary<bool>(),
                     *rc::gen::element(1.0, 0.25, 3.0), false);
  const auto before_save = *rc::gen::container<std::vector<bool>>(rc::gen::arbitrary<bool>());
  const auto after_save = *rc::gen::container<std::vector<bool>>(rc::gen::arbitrary<bool>());
  LossScaler original = *LossScaler::make_dynamic(options);
  for (bool overflow : before_save) RC_ASSERT(original.update_scale(overflow).ok());
  const LossScalerState saved = original.state();
  LossScaler resumed = *LossScaler::make_dynamic(options);
  RC_ASSERT(resumed.restore_state(saved).ok());
  for (bool overflow : after_save) {
    RC_ASSERT(original.update_scale(overflow).ok());
    RC_ASSERT(resumed.update_scale(overflow).ok());
    RC_ASSERT(original.state() == resumed.state());
  }
}

TEST(LossScaler, RestoreRefusesUnreachableStates) {
  LossScaler scaler = make_scaler(scaler_options(1024.0, 10, 2));
  EXPECT_FALSE(scaler.restore_state({0.0, 5, 2, 1}).ok());
  EXPECT_FALSE(scaler.restore_state({1024.0, -1, -1, 1}).ok());
  EXPECT_FALSE(scaler.restore_state({1024.0, 5, 5, 1}).ok());
  EXPECT_FALSE(scaler.restore_state({1024.0, 5, 2, 3}).ok());
  EXPECT_FALSE(scaler.restore_state({1024.0, 5, 2, 0}).ok());
  EXPECT_EQ(scaler.state(), (LossScalerState{1024.0, 0, -1, 2}));
  EXPECT_TRUE(scaler.restore_state({256.0, 5, 2, 1}).ok());
  EXPECT_EQ(scaler.state(), (LossScalerState{256.0, 5, 2, 1}));
}

TEST(LossScaler, ConstructionValidatesLikeDeepSpeed) {
  EXPECT_FALSE(LossScaler::make_dynamic(scaler_options(1024.0, 0, 2)).ok());
  EXPECT_FALSE(LossScaler::make_dynamic(scaler_options(1024.0, 10, 0)).ok());
  EXPECT_FALSE(LossScaler::make_dynamic(scaler_options(0.0, 10, 2)).ok());
  EXPECT_FALSE(LossScaler::make_dynamic(scaler_options(1024.0, 10, 2, false, 0.0)).ok());
  Result<LossScaler> bad_window = LossScaler::make_dynamic(scaler_options(1024.0, 0, 2));
  EXPECT_NE(bad_window.status().message().find("fp16.loss_scale_window"), std::string::npos);
  EXPECT_FALSE(LossScaler::make_static(-1.0, true).ok());
}

TEST(LossScaler, FromConfigAndStaticScaling) {
  LossScalerConfig config;  // defaults: dynamic, 2^16, window 1000, hysteresis 2, min 1
  Result<LossScaler> dynamic = LossScaler::from_config(config, Precision::kFp16);
  ASSERT_TRUE(dynamic.ok());
  EXPECT_TRUE(dynamic->is_dynamic());
  EXPECT_TRUE(dynamic->checks_overflow());
  EXPECT_EQ(dynamic->state(), (LossScalerState{65536.0, 0, -1, 2}));
  EXPECT_EQ(dynamic->options().loss_scale_window, 1000);
  EXPECT_TRUE(dynamic->options().raise_error_at_min_scale);

  config.dynamic = false;
  config.static_loss_scale = 128.0;
  Result<LossScaler> fixed = LossScaler::from_config(config, Precision::kFp16);
  ASSERT_TRUE(fixed.ok());
  EXPECT_FALSE(fixed->is_dynamic());
  EXPECT_TRUE(fixed->checks_overflow());  // fp16 still skips overflowing steps
  const LossScalerState before = fixed->state();
  for (bool overflow : {true, true, false, true}) EXPECT_TRUE(fixed->update_scale(overflow).ok());
  EXPECT_EQ(fixed->state(), before);
  EXPECT_EQ(fixed->loss_scale(), 128.0);

  for (Precision precision : {Precision::kBf16, Precision::kFp32}) {
    Result<LossScaler> none = LossScaler::from_config(LossScalerConfig{}, precision);
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(none->loss_scale(), 1.0);
    EXPECT_FALSE(none->checks_overflow());
  }
}

// ---------------------------------------------------------------------------------------------
// LR schedules

SchedulerConfig warmup_config(SchedulerType type, WarmupType warmup_type, double min_lr, double max_lr,
                              int64_t warmup_steps, int64_t total_steps = 0) {
  SchedulerConfig config;
  config.type = type;
  config.warmup_type = warmup_type;
  config.warmup_min_lr = min_lr;
  config.warmup_max_lr = max_lr;
  config.warmup_num_steps = warmup_steps;
  config.total_num_steps = total_steps;
  return config;
}

TEST(LearningRateSchedule, WarmupLrLog) {
  const SchedulerConfig config = warmup_config(SchedulerType::kWarmupLR, WarmupType::kLog, 0.001, 0.011, 10);
  const double base = 0.5;  // ignored by WarmupLR
  const double delta = 0.011 - 0.001;  // DeepSpeed's delta_lrs, not the literal 0.01
  EXPECT_EQ(learning_rate_at(config, base, -1), 0.001);  // before the first step(): min lr
  EXPECT_EQ(learning_rate_at(config, base, 0), 0.001);   // ln(1) = 0
  const double inverse_log = 1.0 / std::log(10.0);
  EXPECT_EQ(learning_rate_at(config, base, 1), 0.001 + delta * (inverse_log * std::log(2.0)));
  EXPECT_NEAR(learning_rate_at(config, base, 1), 0.001 + 0.01 * 0.30102999566, 1e-12);
  EXPECT_EQ(learning_rate_at(config, base, 9), 0.001 + delta * (inverse_log * std::log(10.0)));
  EXPECT_NEAR(learning_rate_at(config, base, 9), 0.011, 1e-15);
  EXPECT_EQ(learning_rate_at(config, base, 10), 0.001 + delta * 1.0);  // t = N: gamma 1
  EXPECT_EQ(learning_rate_at(config, base, 100000), 0.001 + delta * 1.0);
}

TEST(LearningRateSchedule, WarmupLrLinearAndClampToTwoSteps) {
  const SchedulerConfig config = warmup_config(SchedulerType::kWarmupLR, WarmupType::kLinear, 0.0, 0.008, 8);
  EXPECT_EQ(learning_rate_at(config, 1.0, -1), 0.0);
  EXPECT_EQ(learning_rate_at(config, 1.0, 0), 0.0);
  EXPECT_EQ(learning_rate_at(config, 1.0, 2), 0.008 * 0.25);
  EXPECT_EQ(learning_rate_at(config, 1.0, 4), 0.004);
  EXPECT_EQ(learning_rate_at(config, 1.0, 7), 0.008 * (7.0 / 8.0));
  EXPECT_EQ(learning_rate_at(config, 1.0, 8), 0.008);

  // warmup_num_steps 1 is clamped to N = 2 (log(1) would be 0).
  for (WarmupType type : {WarmupType::kLinear, WarmupType::kLog}) {
    const SchedulerConfig one = warmup_config(SchedulerType::kWarmupLR, type, 0.0, 1.0, 1);
    EXPECT_EQ(learning_rate_at(one, 1.0, 0), 0.0);
    EXPECT_EQ(learning_rate_at(one, 1.0, 1), type == WarmupType::kLinear ? 0.5 : 1.0 / std::log(2.0) * std::log(2.0));
    EXPECT_EQ(learning_rate_at(one, 1.0, 2), 1.0);
  }
}

TEST(LearningRateSchedule, WarmupDecayLr) {
  const SchedulerConfig config =
      warmup_config(SchedulerType::kWarmupDecayLR, WarmupType::kLinear, 0.0, 1.0, 10, 110);
  EXPECT_EQ(learning_rate_at(config, 9.0, -1), 0.0);
  EXPECT_EQ(learning_rate_at(config, 9.0, 5), 0.5);
  EXPECT_EQ(learning_rate_at(config, 9.0, 10), 1.0);   // (110 - 10) / 100
  EXPECT_EQ(learning_rate_at(config, 9.0, 60), 0.5);   // (110 - 60) / 100
  EXPECT_EQ(learning_rate_at(config, 9.0, 85), 0.25);
  EXPECT_EQ(learning_rate_at(config, 9.0, 110), 0.0);
  EXPECT_EQ(learning_rate_at(config, 9.0, 500), 0.0);  // max(0, negative)
  // T <= N: the decay span is max(1, T - N) = 1.
  const SchedulerConfig short_run = warmup_config(SchedulerType::kWarmupDecayLR, WarmupType::kLinear, 0.0, 1.0, 10, 5);
  EXPECT_EQ(learning_rate_at(short_run, 9.0, 10), 0.0);
}

TEST(LearningRateSchedule, WarmupCosineLr) {
  SchedulerConfig config = warmup_config(SchedulerType::kWarmupCosineLR, WarmupType::kLinear, 0.0, 0.0, 10, 110);
  config.warmup_min_ratio = 0.2;
  config.cos_min_ratio = 1e-4;
  const double base = 0.1;
  EXPECT_EQ(learning_rate_at(config, base, -1), 0.0);  // ratio 0 before the first step
  EXPECT_EQ(learning_rate_at(config, base, 0), base * 0.2);
  EXPECT_EQ(learning_rate_at(config, base, 5), base * (0.2 + 0.5 * (1.0 - 0.2)));
  // t = N: progress 1/100.
  EXPECT_EQ(learning_rate_at(config, base, 10),
            base * (1e-4 + (1.0 - 1e-4) * ((1.0 + std::cos(std::numbers::pi * 0.01)) / 2.0)));
  EXPECT_NEAR(learning_rate_at(config, base, 59), base * (1e-4 + (1.0 - 1e-4) * 0.5), 1e-15);  // progress 0.5
  EXPECT_EQ(learning_rate_at(config, base, 109), base * 1e-4);  // progress 1: the floor
  EXPECT_EQ(learning_rate_at(config, base, 1000), base * 1e-4);  // clamped, no rise again
  config.warmup_type = WarmupType::kLog;
  EXPECT_EQ(learning_rate_at(config, base, 0), base * 0.2);
  EXPECT_EQ(learning_rate_at(config, base, 3), base * (0.2 + (1.0 / std::log(10.0)) * std::log(4.0) * (1.0 - 0.2)));
}

// DeepSpeed before 0.15.3 built its warm-up schedules without setting the lr (measured on
// 0.14.5): the first step runs at the optimizer's lr; from t = 0 the schedule is unchanged.
TEST(LearningRateSchedule, BeforeDeepSpeed0153TheFirstStepRunsAtTheOptimizersLr) {
  SchedulerConfig cosine = warmup_config(SchedulerType::kWarmupCosineLR, WarmupType::kLinear, 0.0, 0.0, 10, 110);
  cosine.warmup_min_ratio = 0.2;
  for (SchedulerConfig config : {warmup_config(SchedulerType::kWarmupLR, WarmupType::kLog, 0.001, 0.011, 10),
                                 warmup_config(SchedulerType::kWarmupDecayLR, WarmupType::kLinear, 0.0, 1.0, 10, 110),
                                 cosine}) {
    SchedulerConfig before = config;
    before.first_step_at_optimizer_lr = true;
    EXPECT_EQ(learning_rate_at(before, 0.5, -1), 0.5);
    EXPECT_NE(learning_rate_at(config, 0.5, -1), 0.5);
    for (int64_t t : {0, 1, 5, 10, 200}) EXPECT_EQ(learning_rate_at(before, 0.5, t), learning_rate_at(config, 0.5, t)) << t;
  }
}

TEST(LearningRateSchedule, NoSchedulerIsConstant) {
  SchedulerConfig config;
  config.type = SchedulerType::kNone;
  for (int64_t t : {-1, 0, 1, 1000000}) EXPECT_EQ(learning_rate_at(config, 3e-4, t), 3e-4);
}

TEST(LearningRateScheduler, StepsRestoresAndValidates) {
  const SchedulerConfig config = warmup_config(SchedulerType::kWarmupLR, WarmupType::kLinear, 0.0, 1.0, 4);
  Result<LearningRateScheduler> created = LearningRateScheduler::create(config, 1e-3);
  ASSERT_TRUE(created.ok());
  LearningRateScheduler scheduler = *created;
  EXPECT_EQ(scheduler.last_batch_iteration(), -1);
  EXPECT_EQ(scheduler.current_lr(), 0.0);  // optimizer step 1
  scheduler.step();
  EXPECT_EQ(scheduler.current_lr(), 0.0);  // step 2 runs at t = 0
  scheduler.step();
  EXPECT_EQ(scheduler.current_lr(), 0.25);
  for (int i = 0; i < 10; ++i) scheduler.step();
  EXPECT_EQ(scheduler.last_batch_iteration(), 11);
  EXPECT_EQ(scheduler.current_lr(), 1.0);

  // Resume: a fresh scheduler restored to t continues with the same bits.
  LearningRateScheduler resumed = *LearningRateScheduler::create(config, 1e-3);
  ASSERT_TRUE(resumed.restore(1).ok());
  EXPECT_EQ(resumed.current_lr(), 0.25);
  EXPECT_FALSE(resumed.restore(-2).ok());
  EXPECT_EQ(resumed.last_batch_iteration(), 1);

  SchedulerConfig bad = config;
  bad.warmup_num_steps = 0;
  Result<LearningRateScheduler> refused = LearningRateScheduler::create(bad, 1e-3);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("warmup_num_steps"), std::string::npos);
}

RC_GTEST_PROP(LearningRateSchedulerProperty, RestoreContinuesWithSameBits, ()) {
  SchedulerConfig config;
  config.type = *rc::gen::element(SchedulerType::kNone, SchedulerType::kWarmupLR, SchedulerType::kWarmupDecayLR,
                                  SchedulerType::kWarmupCosineLR);
  config.warmup_type = *rc::gen::element(WarmupType::kLog, WarmupType::kLinear);
  config.warmup_num_steps = *rc::gen::inRange<int64_t>(1, 50);
  config.total_num_steps = *rc::gen::inRange<int64_t>(0, 200);
  config.warmup_min_lr = 1e-5;
  config.warmup_max_lr = 3e-4;
  const int64_t saved_after = *rc::gen::inRange<int64_t>(0, 150);
  LearningRateScheduler original = *LearningRateScheduler::create(config, 2e-4);
  for (int64_t i = 0; i < saved_after; ++i) original.step();
  LearningRateScheduler resumed = *LearningRateScheduler::create(config, 2e-4);
  RC_ASSERT(resumed.restore(original.last_batch_iteration()).ok());
  for (int i = 0; i < 60; ++i) {
    RC_ASSERT(std::bit_cast<uint64_t>(original.current_lr()) == std::bit_cast<uint64_t>(resumed.current_lr()));
    RC_ASSERT(original.current_lr() >= 0.0);
    original.step();
    resumed.step();
  }
}

// ---------------------------------------------------------------------------------------------
// Unscale and clip

TEST(UnscaleAndClip, NoClipWhenNormIsSmall) {
  const UnscaleAndClip result = compute_unscale_and_clip(/*scaled norm=*/0.5f * 1024.0f, 1024.0, 1.0);
  EXPECT_FALSE(result.clipped);
  EXPECT_EQ(result.combined_scale, 1024.0f);
  EXPECT_EQ(result.grad_multiplier, 1.0f / 1024.0f);
}

// Every op in fp32, as on DeepSpeed's fp32 norm tensor: the double chain gives another
// multiplier for this norm.
TEST(UnscaleAndClip, ClipsInFp32WhenNormIsLarge) {
  const float norm = 0x1.0381d8p+10f;  // found by search: the two chains round apart here
  const UnscaleAndClip result = compute_unscale_and_clip(norm, 1024.0, 1.0);
  EXPECT_TRUE(result.clipped);
  const float clip = ((norm / 1024.0f) + 1e-6f) / 1.0f;
  EXPECT_EQ(result.combined_scale, clip * 1024.0f);
  EXPECT_EQ(result.grad_multiplier, 1.0f / (clip * 1024.0f));
  const double clip_in_double = ((static_cast<double>(norm) / 1024.0) + 1e-6) / 1.0;
  EXPECT_NE(result.grad_multiplier, static_cast<float>(1.0 / (clip_in_double * 1024.0)));
  // Clipped gradients have (almost exactly) max_norm: norm 8, max 2 -> multiplier ~ 1/4.
  const UnscaleAndClip unscaled = compute_unscale_and_clip(8.0f, 1.0, 2.0);
  EXPECT_NEAR(8.0 * unscaled.grad_multiplier, 2.0, 1e-6);
}

TEST(UnscaleAndClip, MaxNormZeroDisablesAndNanDoesNotClip) {
  const UnscaleAndClip disabled = compute_unscale_and_clip(1e30f, 256.0, 0.0);
  EXPECT_FALSE(disabled.clipped);
  EXPECT_EQ(disabled.grad_multiplier, 1.0f / 256.0f);
  const UnscaleAndClip nan_norm = compute_unscale_and_clip(std::numeric_limits<float>::quiet_NaN(), 1.0, 1.0);
  EXPECT_FALSE(nan_norm.clipped);
  EXPECT_EQ(nan_norm.grad_multiplier, 1.0f);
  const UnscaleAndClip sentinel = compute_unscale_and_clip(-1.0f, 1.0, 1.0);  // a non-finite norm's marker
  EXPECT_FALSE(sentinel.clipped);
  // Just at the threshold: clip = (1 + 1e-6) / 1 > 1 clips, by 1e-6.
  EXPECT_TRUE(compute_unscale_and_clip(1.0f, 1.0, 1.0).clipped);
  EXPECT_FALSE(compute_unscale_and_clip(0.999f, 1.0, 1.0).clipped);
}

TEST(HasNonFinite, FindsInfAndNanAnywhere) {
  EXPECT_FALSE(has_non_finite(nullptr, 0));
  std::vector<float> values(10000, 1.0f);
  values[1] = std::numeric_limits<float>::max();
  values[2] = std::numeric_limits<float>::denorm_min();
  values[3] = -0.0f;
  values[4] = -std::numeric_limits<float>::max();
  EXPECT_FALSE(has_non_finite(values.data(), values.size()));
  for (size_t position : {size_t{0}, size_t{4095}, size_t{4096}, size_t{8191}, size_t{9999}}) {
    for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()}) {
      std::vector<float> copy = values;
      copy[position] = bad;
      EXPECT_TRUE(has_non_finite(copy.data(), copy.size())) << position << " " << bad;
      EXPECT_FALSE(has_non_finite(copy.data(), position)) << "the bad value is just past the range";
    }
  }
  const float signaling_nan = std::bit_cast<float>(0x7F800001u);
  EXPECT_TRUE(has_non_finite(&signaling_nan, 1));
}

}  // namespace
}  // namespace zerosim
