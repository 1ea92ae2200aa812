#include "core/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace zerosim {
namespace {

// DeepSpeed's scale_factor; not configurable there either.
constexpr double kScaleFactor = 2.0;

bool positive_finite(double value) { return value > 0.0 && std::isfinite(value); }

std::string number_text(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  return buffer;
}

}  // namespace

Result<LossScaler> LossScaler::make_dynamic(const DynamicLossScalerOptions& options) {
  if (!positive_finite(options.initial_scale))
    return invalid_argument("fp16.initial_scale_power: the initial loss scale must be positive and finite, found " +
                            number_text(options.initial_scale));
  if (options.loss_scale_window <= 0)
    return invalid_argument("fp16.loss_scale_window: expected a positive integer, found " +
                            std::to_string(options.loss_scale_window));
  if (options.hysteresis <= 0)
    return invalid_argument("fp16.hysteresis: expected a positive integer, found " +
                            std::to_string(options.hysteresis));
  if (!positive_finite(options.min_loss_scale))
    return invalid_argument("fp16.min_loss_scale: expected a positive finite value, found " +
                            number_text(options.min_loss_scale));
  LossScalerState state;
  state.current_scale = options.initial_scale;
  state.current_iteration = 0;
  state.last_overflow_iteration = -1;
  state.current_hysteresis = options.hysteresis;
  return LossScaler(/*dynamic=*/true, /*overflow_checked=*/true, options, state);
}

Result<LossScaler> LossScaler::make_static(double scale, bool overflow_checked) {
  if (!positive_finite(scale))
    return invalid_argument("fp16.loss_scale: expected a positive finite value, found " + number_text(scale));
  DynamicLossScalerOptions options;
  options.initial_scale = scale;
  options.hysteresis = 1;
  options.min_loss_scale = scale;
  LossScalerState state;
  state.current_scale = scale;
  state.current_hysteresis = 1;
  return LossScaler(/*dynamic=*/false, overflow_checked, options, state);
}

Result<LossScaler> LossScaler::from_config(const LossScalerConfig& config, Precision precision) {
  if (precision != Precision::kFp16) return make_static(1.0, /*overflow_checked=*/false);
  if (!config.dynamic) return make_static(config.static_loss_scale, /*overflow_checked=*/true);
  // 2^power as Python's 2**power gives it (exact for any power a double can hold).
  if (config.initial_scale_power > 1023 || config.initial_scale_power < -1074)
    return invalid_argument("fp16.initial_scale_power: 2^" + std::to_string(config.initial_scale_power) +
                            " is not a finite positive double");
  DynamicLossScalerOptions options;
  options.initial_scale = std::ldexp(1.0, static_cast<int>(config.initial_scale_power));
  options.loss_scale_window = config.loss_scale_window;
  options.hysteresis = config.hysteresis;
  options.consecutive_hysteresis = config.consecutive_hysteresis;
  options.min_loss_scale = config.min_loss_scale;
  options.raise_error_at_min_scale = true;  // CreateLossScaler leaves DeepSpeed's default on
  return make_dynamic(options);
}

Status LossScaler::update_scale(bool overflow) {
  if (!dynamic_) return Status::ok_status();
  LossScalerState next = state_;
  if (overflow) {
    if (options_.hysteresis == 1 || next.current_hysteresis == 1) {
      if (next.current_scale == options_.min_loss_scale && options_.raise_error_at_min_scale)
        return aborted("loss scale overflow at the minimum loss scale " + number_text(options_.min_loss_scale) +
                       " (iteration " + std::to_string(next.current_iteration) +
                       "): cannot decrease the scale any further");
      next.current_scale = std::max(next.current_scale / kScaleFactor, options_.min_loss_scale);
    } else {
      next.current_hysteresis -= 1;
    }
    next.last_overflow_iteration = next.current_iteration;
  } else {
    if (options_.consecutive_hysteresis) next.current_hysteresis = options_.hysteresis;
    const int64_t stable_interval = next.current_iteration - next.last_overflow_iteration - 1;
    if (stable_interval > 0 && stable_interval % options_.loss_scale_window == 0) {
      if (!options_.consecutive_hysteresis) next.current_hysteresis = options_.hysteresis;
      next.current_scale *= kScaleFactor;
    }
  }
  next.current_iteration += 1;
  state_ = next;
  return Status::ok_status();
}

Status LossScaler::restore_state(const LossScalerState& state) {
  if (!positive_finite(state.current_scale))
    return invalid_argument("loss scaler state: current_scale must be positive and finite, found " +
                            number_text(state.current_scale));
  if (state.current_iteration < 0)
    return invalid_argument("loss scaler state: current_iteration must be >= 0, found " +
                            std::to_string(state.current_iteration));
  if (state.last_overflow_iteration < -1 || state.last_overflow_iteration >= state.current_iteration)
    return invalid_argument("loss scaler state: last_overflow_iteration " +
                            std::to_string(state.last_overflow_iteration) + " must be in [-1, current_iteration " +
                            std::to_string(state.current_iteration) + ")");
  if (state.current_hysteresis < 1 || state.current_hysteresis > options_.hysteresis)
    return invalid_argument("loss scaler state: current_hysteresis " + std::to_string(state.current_hysteresis) +
                            " is outside [1, " + std::to_string(options_.hysteresis) + "] (fp16.hysteresis)");
  state_ = state;
  return Status::ok_status();
}

}  // namespace zerosim
