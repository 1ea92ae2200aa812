// fp16 loss scaling, as DeepSpeed's DynamicLossScaler and static LossScaler do it
// (deepspeed/runtime/fp16/loss_scaler.py; docs/deepspeed-semantics.md §3.4).
//
// Promise: the same sequence of overflow flags gives the same sequence of scales as
// DeepSpeed HEAD, and state() -> restore_state() on a fresh scaler continues that sequence
// exactly, so a checkpoint that stores LossScalerState resumes bit for bit. All four state
// fields influence future scales; a checkpoint that drops any of them diverges later.
//
// The dynamic state machine (scale factor 2), called once per optimizer step, after the
// overflow check (inf/NaN in the scaled gradients, all ranks reduced with MAX):
//
//   overflow:
//     if hysteresis option == 1 or current_hysteresis == 1:     the overflow "counts"
//       if current_scale == min_loss_scale and raise_error_at_min_scale: error, state unchanged
//       else current_scale = max(current_scale / 2, min_loss_scale)
//     else: current_hysteresis -= 1                            tolerated, scale unchanged
//     last_overflow_iteration = current_iteration
//   no overflow:
//     if consecutive_hysteresis: current_hysteresis = hysteresis option   (refill at once)
//     stable = current_iteration - last_overflow_iteration - 1
//     if stable > 0 and stable % loss_scale_window == 0:      a full clean window
//       if not consecutive_hysteresis: current_hysteresis = hysteresis option
//       current_scale *= 2
//   always: current_iteration += 1
//
// So with hysteresis 2 the first overflow only spends one unit of hysteresis and the second
// halves the scale; without consecutive_hysteresis, hysteresis comes back only after a full
// clean window (which also doubles the scale). The step that overflowed is skipped by the
// caller either way: no parameter, moment or scheduler update (§3.4 "Skip behaviour").
//
// raise_error_at_min_scale: DeepSpeed's constructor defaults it to True and CreateLossScaler
// does not override it, so HEAD's fp16 dynamic scaling stops the run when an overflow that
// counts happens at the minimum scale. We default to the same and return kAborted; turning it
// off clamps at min_loss_scale and keeps going.
//
// Static scaling (fp16 with loss_scale > 0, and bf16/fp32 with scale 1): update_scale() never
// changes anything. Under fp16 the ZeRO optimizer still checks overflow and skips the step;
// under bf16/fp32 there is no overflow check at all (checks_overflow() says which).
#pragma once

#include <cstdint>

#include "core/config/ds_config.h"
#include "core/status.h"

namespace zerosim {

struct DynamicLossScalerOptions {
  double initial_scale = 65536.0;      // 2^initial_scale_power
  int64_t loss_scale_window = 1000;    // clean iterations before the scale doubles
  int64_t hysteresis = 2;              // DeepSpeed's delayed_shift: overflows tolerated per window
  bool consecutive_hysteresis = false; // refill hysteresis after any clean iteration
  double min_loss_scale = 1.0;
  bool raise_error_at_min_scale = true;
};

// The scaler's whole mutable state, as DeepSpeed pickles it (cur_scale, cur_iter,
// last_overflow_iter, cur_hysteresis). What a checkpoint must store.
struct LossScalerState {
  double current_scale = 1.0;
  int64_t current_iteration = 0;
  int64_t last_overflow_iteration = -1;  // -1: no overflow yet
  int64_t current_hysteresis = 1;

  bool operator==(const LossScalerState&) const = default;
};

class LossScaler {
 public:
  // Validates like DeepSpeed's _validated_dynamic_loss_args: scales positive and finite,
  // window and hysteresis positive integers. Errors name the fp16.* config key.
  static Result<LossScaler> make_dynamic(const DynamicLossScalerOptions& options);
  // A fixed scale (positive, finite). overflow_checked: whether the step is still skipped on
  // inf/NaN gradients (true for fp16 with a static loss_scale).
  static Result<LossScaler> make_static(double scale, bool overflow_checked);
  // DeepSpeed's CreateLossScaler: dynamic for fp16 with loss_scale 0, static
  // fp16.loss_scale for fp16 otherwise, and a scale of 1 without overflow checks for bf16/fp32.
  static Result<LossScaler> from_config(const LossScalerConfig& config, Precision precision);

  bool is_dynamic() const { return dynamic_; }
  // Whether the caller must check gradients for inf/NaN and skip the step on overflow.
  bool checks_overflow() const { return overflow_checked_; }
  double loss_scale() const { return state_.current_scale; }
  const DynamicLossScalerOptions& options() const { return options_; }

  // One optimizer step's worth of the state machine above. Returns kAborted (state
  // unchanged) only for an overflow that counts at the minimum scale with
  // raise_error_at_min_scale set. Static scalers ignore the call.
  Status update_scale(bool overflow);

  const LossScalerState& state() const { return state_; }
  // Puts back a state saved by state(). Refuses one that this scaler's options could never
  // reach (non-positive scale, hysteresis outside [1, hysteresis option], an overflow
  // iteration at or after the current iteration), naming the field.
  Status restore_state(const LossScalerState& state);

 private:
  LossScaler(bool dynamic, bool overflow_checked, const DynamicLossScalerOptions& options,
             const LossScalerState& state)
      : dynamic_(dynamic), overflow_checked_(overflow_checked), options_(options), state_(state) {}

  bool dynamic_ = false;
  bool overflow_checked_ = false;
  DynamicLossScalerOptions options_;
  LossScalerState state_;
};

}  // namespace zerosim
