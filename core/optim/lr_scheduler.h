// DeepSpeed's learning-rate schedules WarmupLR, WarmupDecayLR and WarmupCosineLR
// (deepspeed/runtime/lr_schedules.py; docs/deepspeed-semantics.md §3.6), plus "no scheduler".
//
// Promise: learning_rate_at() is a pure function of (config, optimizer lr, t) and evaluates
// DeepSpeed's Python expressions in the same order in double (Python floats are doubles). With
// config.c_library_math (the "deepspeed" numerics) log and cos are the C library's, as
// Python's math module takes them, so the values are DeepSpeed's bit for bit on the machine
// that runs it (tests/data/deepspeed/lr_schedules.json); without it they are zerosim's
// portable ones, the same on every machine, and the fp32 lr the Adam kernel takes is still
// DeepSpeed's in every golden case. Being pure, it makes resume trivial: the only state is t.
//
// The position t is DeepSpeed's last_batch_iteration. It starts at -1; the lr in force at
// t = -1 (min lr, or 0 for WarmupCosineLR) is what the first optimizer step uses, and each
// scheduler step() (taken only after a step that was not skipped for overflow) does t += 1.
// So optimizer step k (1-based, counting only applied steps) runs with learning_rate_at(k - 2).
// DeepSpeed before 0.15.3 did not set the lr when it built a warm-up schedule: there, t = -1
// gives the optimizer's configured lr (config.first_step_at_optimizer_lr; measured on DeepSpeed
// 0.14.5, docs/deepspeed-live.md).
//
// Formulas, with N = max(2, warmup_num_steps), T = total_num_steps, lr_min / lr_max the
// warmup bounds and base_lr the optimizer's configured lr:
//   gamma(t) for t < N:  log:    (1.0 / ln(N)) * ln(t + 1)      (the reciprocal is taken first)
//                        linear: t / N
//   WarmupLR:        t < 0: lr_min;  else lr_min + (lr_max - lr_min) * g,
//                    g = gamma(t) for t < N, 1 after
//   WarmupDecayLR:   as WarmupLR, but g = max(0, (T - t) / max(1, T - N)) for t >= N
//   WarmupCosineLR:  t < 0: 0;  else base_lr * ratio, with
//                    t < N:  ratio = wmr + gamma(t) * (1 - wmr)
//                    t >= N: p = min(1, (t - N + 1) / max(1, T - N)),
//                            ratio = max(0, cmr + (1 - cmr) * ((1 + cos(pi * p)) / 2))
//   kNone:           base_lr for every t.
#pragma once

#include <cstdint>

#include "core/config/ds_config.h"
#include "core/status.h"

namespace zerosim {

// Refuses what DeepSpeed refuses: warmup_num_steps <= 0 for any warmup schedule.
Status validate_scheduler_config(const SchedulerConfig& config);

// The lr at position last_batch_iteration (>= -1). base_learning_rate is the optimizer's
// configured lr: WarmupCosineLR scales it, kNone returns it.
double learning_rate_at(const SchedulerConfig& config, double base_learning_rate, int64_t last_batch_iteration);

// The schedule's position, and the lr in force there. Stateful only in t, which is all a
// checkpoint needs to store for it (DeepSpeed's state_dict is {'last_batch_iteration': t}).
// Unlike DeepSpeed's load_state_dict, restore() also makes current_lr() right at once.
class LearningRateScheduler {
 public:
  static Result<LearningRateScheduler> create(const SchedulerConfig& config, double base_learning_rate);

  // t += 1, as DeepSpeed's step() after an applied optimizer step.
  void step() { last_batch_iteration_ += 1; }
  int64_t last_batch_iteration() const { return last_batch_iteration_; }
  // Puts back a saved position; refuses t < -1.
  Status restore(int64_t last_batch_iteration);
  // The lr the next optimizer step uses (double; the engine casts it to float once).
  double current_lr() const { return learning_rate_at(config_, base_learning_rate_, last_batch_iteration_); }
  const SchedulerConfig& config() const { return config_; }
  double base_learning_rate() const { return base_learning_rate_; }

 private:
  LearningRateScheduler(const SchedulerConfig& config, double base_learning_rate)
      : config_(config), base_learning_rate_(base_learning_rate) {}

  SchedulerConfig config_;
  double base_learning_rate_ = 0.0;
  int64_t last_batch_iteration_ = -1;
};

}  // namespace zerosim
