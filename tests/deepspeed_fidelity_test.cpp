// zerosim against DeepSpeed's own code, run: the golden data in tests/data/deepspeed/ was made
// by executing DeepSpeed's lr_schedules.py and fp16/loss_scaler.py and by compiling its CPU
// Adam (cpu_adam.h, cpu_adam_impl.cpp) with its own flags (README.md there says how). Every
// value is compared bit for bit. Where zerosim departs on purpose, the departure is listed
// here with its reason (and in docs/deepspeed-fidelity.md's table), and the test holds zerosim to it.
// Regenerate the data with scripts/deepspeed_golden/make_golden.sh; a changed value then
// fails here naming the case and the step.
#include <algorithm>
#include <bit>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/config/ds_config.h"
#include "core/optim/adamw.h"
#include "core/optim/loss_scaler.h"
#include "core/optim/lr_scheduler.h"
#include "core/tensor/dtype.h"

namespace zerosim {
namespace {

using json = nlohmann::json;

json load_golden(const std::string& name) {
  const std::string path = std::string(ZEROSIM_TEST_DATA_DIR) + "/deepspeed/" + name;
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << "cannot open " << path;
  return json::parse(file);
}

// "3f800000..." -> the fp32 bit patterns, 8 hex digits each, most significant first.
std::vector<uint32_t> hex_bits(const std::string& text) {
  EXPECT_EQ(text.size() % 8, 0u);
  std::vector<uint32_t> bits;
  for (size_t i = 0; i + 8 <= text.size(); i += 8) bits.push_back(static_cast<uint32_t>(std::stoul(text.substr(i, 8), nullptr, 16)));
  return bits;
}

std::string hex(float value) {
  char text[16];
  std::snprintf(text, sizeof(text), "%08x", std::bit_cast<uint32_t>(value));
  return text;
}

// A DeepSpeed config around one scheduler block: the optimizer's lr is the golden cases' 3e-4.
Result<ResolvedConfig> resolve_scheduler(const json& golden_case, const char* numerics = "portable") {
  json document = {{"train_micro_batch_size_per_gpu", 1},
                   {"gradient_accumulation_steps", 1},
                   {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", golden_case.at("optimizer_lr")}}}}}};
  json scheduler = {{"type", golden_case.at("type")}};
  if (!golden_case.at("params").is_null()) scheduler["params"] = golden_case.at("params");
  document["scheduler"] = scheduler;
  document["zerosim"] = {{"numerics", numerics}};
  RunSettings settings;
  return resolve_config(document, settings);
}

// Where zerosim's verdict on a scheduler config departs from DeepSpeed's, and why.
const std::map<std::string, std::string>& scheduler_verdict_departures() {
  static const std::map<std::string, std::string> departures = {
      // A negative warmup ratio makes the warmup's lr negative: gradient ascent, which zerosim
      // refuses for every lr of the schedule rather than run.
      {"WarmupCosineLR_warmup_min_ratio_neg0.1", "refused: a negative lr during warmup"},
      // DeepSpeed starts the schedule at 5 but leaves step 1 at the optimizer's own lr; a run
      // that starts mid-schedule is a resume, which goes through a checkpoint in zerosim.
      {"WarmupLR_last_batch_iteration_5", "refused: resume through a checkpoint"},
      {"WarmupDecayLR_last_batch_iteration_5", "refused: resume through a checkpoint"},
      {"WarmupCosineLR_last_batch_iteration_5", "refused: resume through a checkpoint"},
      // min above max, a negative max: the lr goes negative (ascent) or falls during warmup;
      // zerosim refuses a negative lr anywhere in the schedule.
      {"WarmupLR_negative_max_lr", "refused: a negative lr"},
      {"WarmupDecayLR_negative_max_lr", "refused: a negative lr"},
      // One param group: DeepSpeed takes a one-element list as the group's value; zerosim's
      // model has one group and takes a number.
      {"WarmupLR_max_lr_list1", "refused: a list for one param group"},
      {"WarmupDecayLR_max_lr_list1", "refused: a list for one param group"},
  };
  return departures;
}

// Whether DeepSpeed's formula at position t calls math.log or math.cos: the log warmup, and
// WarmupCosineLR's decay.
bool step_calls_libm(const SchedulerConfig& config, int64_t last_batch_iteration) {
  if (config.type == SchedulerType::kNone || last_batch_iteration < 0) return false;
  const int64_t warmup_steps = std::max<int64_t>(2, config.warmup_num_steps);
  if (last_batch_iteration < warmup_steps) return config.warmup_type == WarmupType::kLog;
  return config.type == SchedulerType::kWarmupCosineLR;
}

// Every lr DeepSpeed's schedule gives, at every optimizer step. With the "deepspeed" numerics
// (log and cos from the C library, as Python takes them), every double is DeepSpeed's bit for
// bit. With the portable numerics, where DeepSpeed's formula is arithmetic alone the double is
// still DeepSpeed's; where it calls log or cos, zerosim's portable functions (the same on every
// machine; glibc's differ between versions and CPU variants, and are not correctly rounded)
// may move the double's last bits, and the fp32 cast, the lr the Adam kernel takes, must be
// DeepSpeed's bit for bit.
TEST(DeepSpeedLrSchedules, EveryCaseGivesDeepSpeedsLrAtEveryStep) {
  const json golden = load_golden("lr_schedules.json");
  ASSERT_GT(golden.at("cases").size(), 100u);
  int64_t libm_steps = 0, portable_double_differs = 0;
  for (const char* numerics : {"deepspeed", "portable"}) {
    const bool exact = std::string(numerics) == "deepspeed";
    for (const json& golden_case : golden.at("cases")) {
      const std::string name = golden_case.at("name");
      if (scheduler_verdict_departures().count(name) != 0) continue;  // refused: checked below
      Result<ResolvedConfig> config = resolve_scheduler(golden_case, numerics);
      ASSERT_TRUE(config.ok()) << name << ": " << config.status().message();
      Result<LearningRateScheduler> scheduler =
          LearningRateScheduler::create(config->scheduler, config->optimizer.learning_rate);
      ASSERT_TRUE(scheduler.ok()) << name << ": " << scheduler.status().message();
      const json& lrs = golden_case.at("lrs");
      for (size_t k = 0; k < lrs.size(); ++k) {
        const double expected = lrs[k].get<double>();
        const double actual = scheduler->current_lr();
        const std::string where = name + " (" + numerics + " numerics): optimizer step " + std::to_string(k + 1) +
                                  " (last_batch_iteration " + std::to_string(scheduler->last_batch_iteration()) + ")";
        ASSERT_EQ(std::bit_cast<uint32_t>(static_cast<float>(actual)),
                  std::bit_cast<uint32_t>(static_cast<float>(expected)))
            << where << ": the kernel's fp32 lr differs: " << actual << " against " << expected;
        if (exact || !step_calls_libm(config->scheduler, scheduler->last_batch_iteration())) {
          ASSERT_EQ(std::bit_cast<uint64_t>(actual), std::bit_cast<uint64_t>(expected))
              << where << " runs with lr " << actual << ", DeepSpeed's is " << expected;
        } else {
          ++libm_steps;
          if (actual != expected) ++portable_double_differs;
        }
        scheduler->step();
      }
      EXPECT_EQ(scheduler->last_batch_iteration(),
                golden_case.at("state_dict").at("last_batch_iteration").get<int64_t>())
          << name;
    }
  }
  EXPECT_GT(libm_steps, 1000);
  std::printf("portable numerics: %lld lr steps through log/cos, %lld of them differ from this machine's glibc "
              "in the double (none in the fp32 lr)\n",
              static_cast<long long>(libm_steps), static_cast<long long>(portable_double_differs));
}

TEST(DeepSpeedLrSchedules, RefusesWhatDeepSpeedRefusesAndAcceptsTheRest) {
  const json golden = load_golden("lr_schedules.json");
  ASSERT_GT(golden.at("refusals").size(), 50u);
  for (const json& probe : golden.at("refusals")) {
    const std::string name = probe.at("name");
    Result<ResolvedConfig> config = resolve_scheduler(probe);
    bool accepted = config.ok();
    if (accepted) {
      // Whatever the config reader lets through must also build a schedule whose every lr the
      // engine accepts (validate_training_options walks them the same way).
      Result<LearningRateScheduler> scheduler =
          LearningRateScheduler::create(config->scheduler, config->optimizer.learning_rate);
      accepted = scheduler.ok();
    }
    const bool departs = scheduler_verdict_departures().count(name) != 0;
    const bool deepspeed_accepts = probe.at("accepted").get<bool>();
    if (departs) {
      EXPECT_TRUE(deepspeed_accepts && !accepted) << name << ": listed as a departure (" << scheduler_verdict_departures().at(name)
                                                  << "), but zerosim " << (accepted ? "accepts" : "refuses")
                                                  << " and DeepSpeed " << (deepspeed_accepts ? "accepts" : "refuses");
    } else {
      EXPECT_EQ(accepted, deepspeed_accepts)
          << name << ": DeepSpeed " << (deepspeed_accepts ? "accepts" : "refuses") << " it"
          << (probe.at("error").is_null() ? std::string() : " (" + probe.at("error").get<std::string>() + ")")
          << "; zerosim " << (accepted ? "accepts" : "refuses: " + config.status().message());
    }
  }
}

TEST(DeepSpeedLossScaler, EveryOverflowSequenceGivesDeepSpeedsScalesAndErrors) {
  const json golden = load_golden("loss_scaler.json");
  ASSERT_GT(golden.at("cases").size(), 40u);
  int traced = 0;
  for (const json& golden_case : golden.at("cases")) {
    const std::string name = golden_case.at("name");
    const json& fp16 = golden_case.at("fp16_config");
    // The config DeepSpeed's pydantic model refuses must be refused by zerosim's reader too,
    // and the other way round, but for hysteresis <= 0: DeepSpeed accepts it and the scale
    // then never decreases, so an fp16 run can never leave an overflow; zerosim refuses it.
    const bool departs = fp16.value("hysteresis", 2) <= 0;
    json document = {{"train_micro_batch_size_per_gpu", 1}, {"gradient_accumulation_steps", 1}, {"fp16", fp16}};
    Result<ResolvedConfig> config = resolve_config(document, RunSettings());
    EXPECT_EQ(config.ok(), golden_case.at("config_error").is_null() && !departs)
        << name << ": DeepSpeed's fp16 config says " << golden_case.at("config_error").dump() << "; zerosim "
        << (config.ok() ? std::string("accepts it") : config.status().message());
    if (!config.ok()) continue;
    Result<LossScaler> scaler = LossScaler::from_config(config->loss_scaler, config->precision);
    ASSERT_TRUE(scaler.ok()) << name << ": " << scaler.status().message();
    const json& initial = golden_case.at("initial");
    EXPECT_EQ(scaler->loss_scale(), initial[0].get<double>()) << name;
    const std::string overflows = golden_case.at("overflows");
    const json& trace = golden_case.at("trace");
    const json& raised_at = golden_case.at("raised_at");
    for (size_t i = 0; i < overflows.size(); ++i) {
      const Status status = scaler->update_scale(overflows[i] == '1');
      if (!raised_at.is_null() && i == raised_at.get<size_t>()) {
        EXPECT_EQ(status.code(), StatusCode::kAborted)
            << name << ": DeepSpeed raises at update " << i << " (" << golden_case.at("error").dump() << ")";
        break;
      }
      ASSERT_TRUE(status.ok()) << name << " update " << i << ": " << status.message();
      const json& expected = trace.at(i);
      const LossScalerState& state = scaler->state();
      ASSERT_EQ(state.current_scale, expected[0].get<double>()) << name << ": scale after update " << i;
      if (!expected[1].is_null()) {
        ASSERT_EQ(state.current_hysteresis, expected[1].get<int64_t>()) << name << ": hysteresis after update " << i;
        ASSERT_EQ(state.last_overflow_iteration, expected[2].get<int64_t>()) << name << ": last overflow, update " << i;
        ASSERT_EQ(state.current_iteration, expected[3].get<int64_t>()) << name << ": iteration after update " << i;
      }
    }
    ++traced;
  }
  EXPECT_GT(traced, 40);
}

AdamHyperparameters golden_hyperparameters(const json& run, float learning_rate) {
  AdamHyperparameters h;
  h.learning_rate = learning_rate;
  h.beta1 = static_cast<float>(run.contains("betas") ? run.at("betas")[0].get<double>() : run.at("beta1").get<double>());
  h.beta2 = static_cast<float>(run.contains("betas") ? run.at("betas")[1].get<double>() : run.at("beta2").get<double>());
  h.epsilon = static_cast<float>(run.value("eps", 1e-8));
  h.weight_decay = static_cast<float>(run.value("weight_decay", 0.0));
  h.adamw_mode = run.value("adamw_mode", true);
  h.bias_correction = run.at("bias_correction").get<bool>();
  return h;
}

// DeepSpeedCPUAdam's step scalars of an uninterrupted run: the running fp32 products of the
// betas and the fp32 bias corrections, 20,000 steps for (0.9, 0.999). beta^t computed in double
// instead gives a bias_correction2 that differs on a third of them.
TEST(DeepSpeedCpuAdam, StepScalarsOfAnUninterruptedRun) {
  const json golden = load_golden("cpu_adam.json");
  ASSERT_GE(golden.at("scalars").size(), 5u);
  bool saw_long_run = false;
  for (const json& run : golden.at("scalars")) {
    const int64_t steps = run.at("steps");
    saw_long_run = saw_long_run || steps >= 20000;
    const AdamHyperparameters h = golden_hyperparameters(run, static_cast<float>(run.at("lr").get<double>()));
    const std::vector<uint32_t> beta1_power = hex_bits(run.at("betta1_t"));
    const std::vector<uint32_t> beta2_power = hex_bits(run.at("betta2_t"));
    const std::vector<uint32_t> correction1 = hex_bits(run.at("bias_correction1"));
    const std::vector<uint32_t> correction2 = hex_bits(run.at("bias_correction2"));
    const std::vector<uint32_t> step_size = hex_bits(run.at("step_size"));
    ASSERT_EQ(correction2.size(), static_cast<size_t>(steps));
    const std::string label = "betas (" + std::to_string(h.beta1) + ", " + std::to_string(h.beta2) + ") lr " +
                              std::to_string(h.learning_rate) + (h.bias_correction ? "" : " uncorrected");
    for (int64_t t = 1; t <= steps; ++t) {
      const size_t i = static_cast<size_t>(t - 1);
      const AdamStepScalars scalars = make_adam_step_scalars(h, t);
      ASSERT_EQ(std::bit_cast<uint32_t>(scalars.bias_correction1), correction1[i]) << label << " step " << t;
      ASSERT_EQ(std::bit_cast<uint32_t>(scalars.bias_correction2_rsqrt), correction2[i]) << label << " step " << t;
      ASSERT_EQ(std::bit_cast<uint32_t>(scalars.step_size), step_size[i]) << label << " step " << t;
      // The running products themselves, up to where running_beta_power stops (after which
      // only 1 - power is promised, and checked above).
      for (auto [beta, expected] : {std::pair{h.beta1, beta1_power[i]}, std::pair{h.beta2, beta2_power[i]}}) {
        const float power = running_beta_power(beta, t);
        if (1.0f - power != 1.0f) {
          ASSERT_EQ(std::bit_cast<uint32_t>(power), expected) << label << " beta^t, step " << t;
        }
      }
    }
  }
  EXPECT_TRUE(saw_long_run);
}

// DeepSpeed after a restart: a fresh Adam_Optimizer called with step t+1 takes std::pow, so
// its resumed run departs from its uninterrupted run. zerosim keeps the uninterrupted bits
// (a resume must be bit-identical); this test pins that choice against DeepSpeed's data.
TEST(DeepSpeedCpuAdam, AfterRestartZerosimKeepsTheUninterruptedBits) {
  const json golden = load_golden("cpu_adam.json");
  AdamHyperparameters h;  // (0.9, 0.999), as the restart probes
  int deepspeed_departs = 0;
  for (const json& probe : golden.at("after_restart")) {
    const int64_t step = probe.at("step");
    const AdamStepScalars scalars = make_adam_step_scalars(h, step);
    EXPECT_EQ(hex(scalars.bias_correction2_rsqrt), probe.at("bias_correction2_uninterrupted").get<std::string>())
        << "step " << step;
    EXPECT_EQ(hex(scalars.bias_correction1), probe.at("bias_correction1_uninterrupted").get<std::string>())
        << "step " << step;
    if (probe.at("bias_correction2") != probe.at("bias_correction2_uninterrupted")) ++deepspeed_departs;
  }
  // The data itself shows the departure zerosim documents (docs/deepspeed-fidelity.md: "after a restart").
  EXPECT_GT(deepspeed_departs, 0);
}

uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The golden inputs' formula (tests/data/deepspeed/README.md): exact in fp32.
float golden_input(uint64_t seed, uint64_t step, uint64_t i, int scale_log2) {
  const uint64_t x = splitmix64(seed * 1000003ull + step * 65537ull + i);
  const int64_t mantissa = static_cast<int64_t>(x >> 40) - (int64_t{1} << 23);
  return std::ldexp(static_cast<float>(mantissa), scale_log2 - 23);
}

// The element update over 50 steps with a varying lr, on every ISA path zerosim has. DeepSpeed
// runs the last n mod 16 elements of each call through a scalar tail whose compiler-chosen
// fusion rounds differently from its AVX body; zerosim runs every element as the body does
// (which elements fall in DeepSpeed's tail depends on W and the sub-group size), so the body
// is compared bit for bit and the tail is only counted.
TEST(DeepSpeedCpuAdam, ElementUpdatesMatchDeepSpeedsAvxBody) {
  const json golden = load_golden("cpu_adam.json");
  ASSERT_GE(golden.at("elements").size(), 10u);
  for (const json& run : golden.at("elements")) {
    const uint64_t seed = run.at("seed");
    const size_t n = run.at("n");
    const int steps = run.at("steps");
    const int scale_log2 = run.at("grad_scale_log2");
    const size_t tail_begin = run.at("scalar_tail")[0];
    const std::vector<uint32_t> lrs = hex_bits(run.at("lrs"));
    const std::vector<uint32_t> expected_step1 = hex_bits(run.at("params_step1"));
    const std::vector<uint32_t> expected_params = hex_bits(run.at("params"));
    const std::vector<uint32_t> expected_exp_avg = hex_bits(run.at("exp_avg"));
    const std::vector<uint32_t> expected_exp_avg_sq = hex_bits(run.at("exp_avg_sq"));
    const std::vector<uint32_t> initial = hex_bits(run.at("initial_params"));
    ASSERT_EQ(expected_params.size(), n);
    for (SimdPath path : {SimdPath::kScalar, SimdPath::kAvx2, SimdPath::kAvx512}) {
      if (!simd_path_available(path)) continue;
      std::vector<float> params(n), grads(n), exp_avg(n, 0.0f), exp_avg_sq(n, 0.0f);
      for (size_t i = 0; i < n; ++i) {
        params[i] = golden_input(seed, 0, i, 0);
        ASSERT_EQ(std::bit_cast<uint32_t>(params[i]), initial[i]) << "the input formula drifted from the data's";
      }
      const std::string label = "seed " + std::to_string(seed) + " n " + std::to_string(n) + " on " + simd_path_name(path);
      for (int step = 1; step <= steps; ++step) {
        for (size_t i = 0; i < n; ++i) grads[i] = golden_input(seed, static_cast<uint64_t>(step), i, scale_log2);
        const float lr = std::bit_cast<float>(lrs[static_cast<size_t>(step - 1)]);
        adam_update(path, make_adam_step_scalars(golden_hyperparameters(run, lr), step), 1.0f, params.data(),
                    grads.data(), exp_avg.data(), exp_avg_sq.data(), n);
        if (step == 1) {
          for (size_t i = 0; i < tail_begin; ++i)
            ASSERT_EQ(std::bit_cast<uint32_t>(params[i]), expected_step1[i]) << label << " element " << i << " step 1";
        }
      }
      for (size_t i = 0; i < tail_begin; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(params[i]), expected_params[i]) << label << " param " << i;
        ASSERT_EQ(std::bit_cast<uint32_t>(exp_avg[i]), expected_exp_avg[i]) << label << " exp_avg " << i;
        ASSERT_EQ(std::bit_cast<uint32_t>(exp_avg_sq[i]), expected_exp_avg_sq[i]) << label << " exp_avg_sq " << i;
      }
    }
  }
}

}  // namespace
}  // namespace zerosim
