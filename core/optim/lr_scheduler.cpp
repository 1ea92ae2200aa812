#include "core/optim/lr_scheduler.h"

#include "core/tensor/portable_math.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

namespace zerosim {
namespace {

// DeepSpeed's self.warmup_num_steps = max(2, warmup_num_steps): log(1) would divide by zero.
int64_t clamped_warmup_steps(const SchedulerConfig& config) { return std::max<int64_t>(2, config.warmup_num_steps); }

// _get_gamma's warmup branch (t in [0, N)); the same expression WarmupCosineLR uses for its
// warmup ratio. Evaluation order follows the Python: inverse_log_warm_up is computed first.
double schedule_log(const SchedulerConfig& config, double x) {
  return config.c_library_math ? std::log(x) : portable_log(x);
}

double schedule_cos(const SchedulerConfig& config, double x) {
  return config.c_library_math ? std::cos(x) : portable_cos(x);
}

double warmup_gamma(const SchedulerConfig& config, int64_t warmup_steps, int64_t last_batch_iteration) {
  if (config.warmup_type == WarmupType::kLog) {
    const double inverse_log_warm_up = 1.0 / schedule_log(config, static_cast<double>(warmup_steps));
    return inverse_log_warm_up * schedule_log(config, static_cast<double>(last_batch_iteration + 1));
  }
  return static_cast<double>(last_batch_iteration) / static_cast<double>(warmup_steps);
}

double warmup_lr(const SchedulerConfig& config, int64_t last_batch_iteration) {
  const int64_t warmup_steps = clamped_warmup_steps(config);
  if (last_batch_iteration < 0) return config.warmup_min_lr;
  double gamma = 1.0;
  if (last_batch_iteration < warmup_steps) {
    gamma = warmup_gamma(config, warmup_steps, last_batch_iteration);
  } else if (config.type == SchedulerType::kWarmupDecayLR) {
    const double remaining = static_cast<double>(config.total_num_steps - last_batch_iteration);
    const double decay_span = std::max(1.0, static_cast<double>(config.total_num_steps - warmup_steps));
    gamma = std::max(0.0, remaining / decay_span);
  }
  const double delta_lr = config.warmup_max_lr - config.warmup_min_lr;
  return config.warmup_min_lr + (delta_lr * gamma);
}

double warmup_cosine_lr(const SchedulerConfig& config, double base_learning_rate, int64_t last_batch_iteration) {
  if (last_batch_iteration < 0) return 0.0;
  const int64_t warmup_steps = clamped_warmup_steps(config);
  double ratio = 0.0;
  if (last_batch_iteration < warmup_steps) {
    ratio = warmup_gamma(config, warmup_steps, last_batch_iteration);
    const double ratio_delta = 1.0 - config.warmup_min_ratio;
    ratio = config.warmup_min_ratio + ratio * ratio_delta;
  } else {
    const int64_t real_last_step = last_batch_iteration - warmup_steps + 1;
    const int64_t real_total_steps = std::max<int64_t>(1, config.total_num_steps - warmup_steps);
    const double cosine_progress =
        std::min(1.0, static_cast<double>(real_last_step) / static_cast<double>(real_total_steps));
    const double ratio_delta = 1.0 - config.cos_min_ratio;
    ratio = (1.0 + schedule_cos(config, std::numbers::pi * cosine_progress)) / 2.0;
    ratio = std::max(0.0, config.cos_min_ratio + ratio_delta * ratio);
  }
  return base_learning_rate * ratio;
}

}  // namespace

Status validate_scheduler_config(const SchedulerConfig& config) {
  if (config.type == SchedulerType::kNone) return Status::ok_status();
  if (config.warmup_num_steps <= 0)
    return invalid_argument("scheduler.params.warmup_num_steps: expected a positive integer, found " +
                            std::to_string(config.warmup_num_steps));
  return Status::ok_status();
}

double learning_rate_at(const SchedulerConfig& config, double base_learning_rate, int64_t last_batch_iteration) {
  ZEROSIM_CHECK(last_batch_iteration >= -1, "scheduler position starts at -1");
  if (last_batch_iteration < 0 && config.first_step_at_optimizer_lr) return base_learning_rate;
  switch (config.type) {
    case SchedulerType::kNone:
      return base_learning_rate;
    case SchedulerType::kWarmupLR:
    case SchedulerType::kWarmupDecayLR:
      return warmup_lr(config, last_batch_iteration);
    case SchedulerType::kWarmupCosineLR:
      return warmup_cosine_lr(config, base_learning_rate, last_batch_iteration);
  }
  ZEROSIM_CHECK(false, "unknown SchedulerType");
  return 0.0;
}

Result<LearningRateScheduler> LearningRateScheduler::create(const SchedulerConfig& config,
                                                            double base_learning_rate) {
  ZEROSIM_RETURN_IF_ERROR(validate_scheduler_config(config));
  return LearningRateScheduler(config, base_learning_rate);
}

Status LearningRateScheduler::restore(int64_t last_batch_iteration) {
  if (last_batch_iteration < -1)
    return invalid_argument("scheduler state: last_batch_iteration must be >= -1, found " +
                            std::to_string(last_batch_iteration));
  last_batch_iteration_ = last_batch_iteration;
  return Status::ok_status();
}

}  // namespace zerosim
