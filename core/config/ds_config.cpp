// The DeepSpeed JSON reader. See ds_config.h for the promise; the rules mirrored here come
// from DeepSpeed HEAD (deepspeed/runtime/config.py, zero/config.py, zero/offload_config.py,
// precision_config.py, swap_tensor/aio_config.py, lr_schedules.py, engine.py) and from the
// HF Trainer's "auto" filling (transformers/integrations/deepspeed.py).
//
// How DeepSpeed reads each part, and so how strict this reader is:
//   - zero_optimization, offload_optimizer, offload_param, fp16, bf16 are pydantic models with
//     extra="forbid": unknown keys are errors, values are coerced in pydantic's lax mode (1e9
//     and "1000" for an int, true as 1), and "auto" is dropped so the default applies.
//   - the top level, aio, optimizer and scheduler are read with dict lookups: "auto" stays a
//     raw string (and would break DeepSpeed) unless the HF Trainer fills it, and values are
//     used as given. Unknown top-level keys are refused here (DeepSpeed ignores them; a typo
//     there silently changes nothing, which is exactly the bug class zerosim exists to catch).
//     Unknown aio keys and unknown keys of the optimizer/scheduler blocks themselves are
//     ignored as DeepSpeed ignores them, with a warning. optimizer.params and scheduler.params
//     are passed to a constructor as keyword arguments, so an unknown name is an error.
// Errors are collected (not just the first), each starting with the key's dotted path.
#include "core/config/ds_config.h"
#include "core/config/ds_config_keys.h"
#include "core/config/ds_config_reading.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zerosim {

bool RunSettings::is_defaulted(const std::string& flag) const {
  return std::find(defaulted_flags.begin(), defaulted_flags.end(), flag) != defaulted_flags.end();
}

const std::string* RunSettings::derivation_of(const std::string& flag) const {
  for (const auto& [derived_flag, how] : derived_from) {
    if (derived_flag == flag) return &how;
  }
  return nullptr;
}

const char* scheduler_type_name(SchedulerType type) {
  switch (type) {
    case SchedulerType::kNone: return "none";
    case SchedulerType::kWarmupLR: return "WarmupLR";
    case SchedulerType::kWarmupDecayLR: return "WarmupDecayLR";
    case SchedulerType::kWarmupCosineLR: return "WarmupCosineLR";
  }
  return "unknown";
}

const char* checkpoint_writer_type_name(CheckpointWriterType type) {
  switch (type) {
    case CheckpointWriterType::kNone: return "none";
    case CheckpointWriterType::kPython: return "PYTHON";
    case CheckpointWriterType::kFast: return "FAST";
  }
  return "?";
}

const char* numerics_mode_name(NumericsMode mode) {
  return mode == NumericsMode::kDeepSpeed ? "deepspeed" : "portable";
}

namespace {

using namespace ds_config_detail;

Result<ResolvedConfig> resolve_document(const json& document, const RunSettings& settings) {
  if (!document.is_object()) {
    return invalid_argument("config: expected a JSON object at the top level, found " + describe(document));
  }
  Context context(settings);
  if (settings.world_size <= 0) {
    context.error("world_size", "expected a run setting > 0, found " + std::to_string(settings.world_size));
  }
  ResolvedConfig out;
  out.input = document;
  json resolved = document;

  const Block top{&document, "", false};
  check_keys(context, top, kTopLevelKeys, Unknown::kRefuse, &resolved);

  read_batch(context, top, out, resolved);
  read_gradient_clipping(context, top, out, resolved);
  read_steps_per_print(context, top, out, resolved);
  const PrecisionExtras extras = read_precision(context, document, out, resolved);
  read_communication_dtype(context, top, out, resolved);
  const OptimizerExtras optimizer_extras = read_optimizer(context, document, out, resolved);
  read_scheduler(context, document, out, resolved);
  read_zero(context, document, out, resolved);
  check_optimizer_class_arguments(context, optimizer_extras, out);
  read_aio(context, document, out, resolved);
  read_checkpoint(context, document, out, resolved);
  read_zerosim(context, document, out, resolved);
  out.scheduler.c_library_math = out.numerics == NumericsMode::kDeepSpeed;
  // DeepSpeed PR #6597, first in 0.15.3: the warm-up schedules set the lr when they are built.
  out.scheduler.first_step_at_optimizer_lr =
      out.deepspeed_release.has_value() && *out.deepspeed_release < DeepSpeedRelease{0, 15, 3};

  // DeepSpeedConfig._do_error_check.
  if (extras.fp16_master_weights && out.zero.stage == 0) {
    context.error("fp16.fp16_master_weights_and_grads", "needs ZeRO stage 1, 2 or 3, found stage 0");
  }
  if (extras.bf16_master_weights && out.zero.stage == 0) {
    context.error("bf16.bf16_master_weights_and_grads", "needs ZeRO stage 1, 2 or 3, found stage 0");
  }
  if (extras.bf16_optimizer_states && !extras.bf16_master_weights) {
    context.error("bf16.bf16_optimizer_states", "needs bf16.bf16_master_weights_and_grads to be true");
  }
  if (const json* enabled = find_or_null(document, "elasticity") != nullptr
                                ? find_or_null(*find_or_null(document, "elasticity"), "enabled")
                                : nullptr;
      enabled != nullptr && enabled->is_boolean() && enabled->get<bool>()) {
    context.warn("elasticity.enabled: zerosim does not compute elastic batch sizes; it uses the batch keys as given");
  }

  if (!context.errors.empty()) {
    std::string message;
    for (const std::string& error : context.errors) {
      if (!message.empty()) message += '\n';
      message += error;
    }
    return invalid_argument(std::move(message));
  }
  out.resolved = std::move(resolved);
  out.warnings = std::move(context.warnings);
  out.inactive_keys = std::move(context.inactive);
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public entry points. None of them throws.

Result<ResolvedConfig> resolve_config(const nlohmann::json& document, const RunSettings& settings) {
  try {
    return resolve_document(document, settings);
  } catch (const std::exception& error) {
    return invalid_argument(std::string("config: unexpected failure while reading the config: ") + error.what());
  }
}

std::string unknown_key_hint(std::string_view key, const std::vector<std::string_view>& valid_names) {
  return suggestion_text(key, nearest_name(key, valid_names));
}

void set_default_hyperparameters(RunSettings& settings) {
  settings.learning_rate = 1e-2;
  settings.adam_beta1 = 0.9;
  settings.adam_beta2 = 0.999;
  settings.adam_epsilon = 1e-8;
  settings.weight_decay = 0.01;
  settings.max_grad_norm = 1.0;
  settings.total_steps = 1000;
}

int64_t deepspeed_min_aio_bytes(const AioConfig& aio) { return std::max<int64_t>(int64_t{1} << 20, aio.block_size); }

Result<DeepSpeedRelease> parse_deepspeed_release(const std::string& text) {
  DeepSpeedRelease release;
  int64_t* parts[] = {&release.major, &release.minor, &release.patch};
  size_t at = 0;
  for (size_t index = 0; index < 3; ++index) {
    const size_t start = at;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9' && at - start < 6) ++at;
    if (at == start) return invalid_argument("DeepSpeed release \"" + text + "\": expected X.Y.Z");
    *parts[index] = std::stoll(text.substr(start, at - start));
    if (index < 2) {
      if (at >= text.size() || text[at] != '.') return invalid_argument("DeepSpeed release \"" + text + "\": expected X.Y.Z");
      ++at;
    }
  }
  if (at != text.size()) return invalid_argument("DeepSpeed release \"" + text + "\": expected X.Y.Z");
  return release;
}

std::string deepspeed_release_text(const DeepSpeedRelease& release) {
  return std::to_string(release.major) + "." + std::to_string(release.minor) + "." + std::to_string(release.patch);
}

}  // namespace zerosim
