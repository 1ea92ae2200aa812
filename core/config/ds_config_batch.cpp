// The batch keys, gradient clipping, steps_per_print, fp16/bf16 and the loss scaler, and the
// communication dtype of a DeepSpeed config.
#include "core/config/ds_config_keys.h"
#include "core/config/ds_config_reading.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace zerosim::ds_config_detail {

void read_batch(Context& context, const Block& top, ResolvedConfig& out, json& resolved) {
  const RunSettings& settings = context.settings;
  const int64_t world = settings.world_size;
  bool ok = world > 0;

  // One of the three keys: concrete (> 0), "auto" (from a run setting), or absent/null.
  auto read_key = [&](std::string_view key, int64_t setting, const SettingName& name) -> std::optional<int64_t> {
    const json* value = top.find(key);
    if (value == nullptr || value->is_null()) return std::nullopt;
    const std::string path(key);
    if (is_auto(*value)) {
      // A defaulted accumulation against a concrete train_batch_size: derive it instead.
      if (&name == &kAccumulationSetting && setting_is_defaulted(settings, name)) {
        const json* train_value = top.find("train_batch_size");
        if (train_value != nullptr && !train_value->is_null() && !is_auto(*train_value)) {
          context.warn(path + " is \"auto\" and train_batch_size is given; derived from it");
          return std::nullopt;
        }
      }
      if (has_positive(setting)) {
        auto_filled(context, path, std::to_string(setting), name);
        return setting;
      }
      auto_needs_setting(context, path, name);
      ok = false;
      return std::nullopt;
    }
    std::optional<int64_t> parsed = parse_int(context, *value, path, false, Bound::kPositive);
    if (!parsed) {
      ok = false;
    } else if (has_positive(setting)) {
      check_match(context, path, std::to_string(*parsed), std::to_string(setting), name);
    }
    return parsed;
  };

  std::optional<int64_t> micro =
      read_key("train_micro_batch_size_per_gpu", settings.micro_batch_size, kMicroBatchSetting);
  std::optional<int64_t> accumulation =
      read_key("gradient_accumulation_steps", settings.gradient_accumulation_steps, kAccumulationSetting);

  std::optional<int64_t> train;
  if (const json* value = top.find("train_batch_size"); value != nullptr && !value->is_null()) {
    if (is_auto(*value)) {
      // world_size x per_device_train_batch_size x gradient_accumulation_steps; where the config
      // gives micro or accumulation concretely the Trainer's argument has to agree with it.
      const int64_t m = micro ? *micro : settings.micro_batch_size;
      const int64_t g = accumulation ? *accumulation : settings.gradient_accumulation_steps;
      if (!has_positive(m) || !has_positive(g)) {
        std::string missing;
        if (!has_positive(m)) missing = kMicroBatchSetting.flag;
        if (!has_positive(g)) missing += std::string(missing.empty() ? "" : " and ") + kAccumulationSetting.flag;
        context.error_text("train_batch_size is \"auto\"; give " + missing +
                           " (the HF Trainer fills it with world_size x per_device_train_batch_size x "
                           "gradient_accumulation_steps)");
        ok = false;
      } else if (world > 0) {
        train = checked_product({world, m, g});
        if (!train) {
          context.error("train_batch_size", "world size x micro batch x gradient_accumulation_steps overflows");
          ok = false;
        } else {
          context.warn("train_batch_size is \"auto\"; filled with " + std::to_string(*train) +
                       " = world size " + std::to_string(world) + " x micro batch " + std::to_string(m) +
                       " x gradient_accumulation_steps " + std::to_string(g));
        }
      }
    } else {
      train = parse_int(context, *value, "train_batch_size", false, Bound::kPositive);
      if (!train) {
        ok = false;
      } else if (has_positive(settings.micro_batch_size) && has_positive(settings.gradient_accumulation_steps) &&
                 !setting_is_defaulted(settings, kMicroBatchSetting) &&
                 !setting_is_defaulted(settings, kAccumulationSetting) && world > 0) {
        if (std::optional<int64_t> expected =
                checked_product({world, settings.micro_batch_size, settings.gradient_accumulation_steps})) {
          if (*expected != *train) {
            context.error("train_batch_size",
                          "the config gives " + std::to_string(*train) + " but world size x " +
                              kMicroBatchSetting.flag + " x " + kAccumulationSetting.flag + " is " +
                              std::to_string(*expected) +
                              "; the HF Trainer refuses this mismatch (write \"auto\" or make them agree)");
          }
        }
      }
    }
  }
  if (!ok) return;

  // DeepSpeed's _set_batch_related_parameters + _batch_assertion.
  const std::string w = std::to_string(world);
  if (train && micro && accumulation) {
    const std::optional<int64_t> product = checked_product({*micro, *accumulation, world});
    if (!product || *product != *train) {
      context.error("train_batch_size",
                    std::to_string(*train) + " != train_micro_batch_size_per_gpu " + std::to_string(*micro) +
                        " x gradient_accumulation_steps " + std::to_string(*accumulation) + " x world size " + w +
                        (product ? " (= " + std::to_string(*product) + ")" : std::string()) +
                        "; DeepSpeed requires train_batch_size = micro batch x gradient_accumulation_steps x "
                        "world size");
      return;
    }
  } else if (train && micro) {
    const std::optional<int64_t> per_step = checked_product({*micro, world});
    if (!per_step || *train % *per_step != 0) {
      context.error("train_batch_size", std::to_string(*train) +
                                            " is not divisible by train_micro_batch_size_per_gpu " +
                                            std::to_string(*micro) + " x world size " + w +
                                            ", so gradient_accumulation_steps cannot be derived");
      return;
    }
    accumulation = *train / *per_step;
  } else if (train && accumulation) {
    const std::optional<int64_t> per_micro = checked_product({*accumulation, world});
    if (!per_micro || *train % *per_micro != 0) {
      context.error("train_batch_size", std::to_string(*train) + " is not divisible by gradient_accumulation_steps " +
                                            std::to_string(*accumulation) + " x world size " + w +
                                            ", so train_micro_batch_size_per_gpu cannot be derived");
      return;
    }
    micro = *train / *per_micro;
  } else if (micro && accumulation) {
    train = checked_product({*micro, *accumulation, world});
  } else if (train) {
    if (*train % world != 0) {
      context.error("train_batch_size", std::to_string(*train) + " is not divisible by world size " + w +
                                            ", so train_micro_batch_size_per_gpu cannot be derived");
      return;
    }
    accumulation = 1;
    micro = *train / world;
  } else if (micro) {
    accumulation = 1;
    train = checked_product({*micro, world});
  } else {
    // DeepSpeed asserts here; zerosim takes the micro batch from the run settings (or 1) so that
    // a config holding only a zero_optimization block (an autotuning template) can still be used.
    const int64_t m = has_positive(settings.micro_batch_size) ? settings.micro_batch_size : 1;
    const int64_t g = accumulation ? *accumulation
                                   : (has_positive(settings.gradient_accumulation_steps)
                                          ? settings.gradient_accumulation_steps
                                          : 1);
    micro = m;
    accumulation = g;
    train = checked_product({m, g, world});
    context.warn(std::string("train_batch_size and train_micro_batch_size_per_gpu are both missing (DeepSpeed needs "
                             "one of them); zerosim uses micro batch ") +
                 std::to_string(m) +
                 (has_positive(settings.micro_batch_size) ? " from --micro-batch-size" : " (default)") +
                 " and gradient_accumulation_steps " + std::to_string(g));
  }
  if (!train) {
    context.error("train_batch_size", "micro batch x gradient_accumulation_steps x world size overflows");
    return;
  }
  out.train_batch_size = *train;
  out.micro_batch_size = *micro;
  out.gradient_accumulation_steps = *accumulation;
  resolved["train_batch_size"] = *train;
  resolved["train_micro_batch_size_per_gpu"] = *micro;
  resolved["gradient_accumulation_steps"] = *accumulation;
}

void read_gradient_clipping(Context& context, const Block& top, ResolvedConfig& out, json& resolved) {
  const double setting = context.settings.max_grad_norm;
  if (const json* value = top.find("gradient_clipping")) {
    if (is_auto(*value)) {
      if (has(setting)) {
        out.gradient_clipping = setting;
        auto_filled(context, "gradient_clipping", show_number(setting), kMaxGradNormSetting);
      } else {
        auto_needs_setting(context, "gradient_clipping", kMaxGradNormSetting);
      }
    } else if (auto parsed = parse_number(context, *value, "gradient_clipping", false, Bound::kNonNegative)) {
      out.gradient_clipping = *parsed;
      if (has(setting)) {
        check_match(context, "gradient_clipping", show_number(*parsed), show_number(setting), kMaxGradNormSetting);
      }
    }
  }
  resolved["gradient_clipping"] = out.gradient_clipping;
}

void read_steps_per_print(Context& context, const Block& top, ResolvedConfig& out, json& resolved) {
  if (const json* value = top.find("steps_per_print"); value != nullptr && !value->is_null()) {
    if (is_auto(*value)) {
      context.error("steps_per_print", "is \"auto\", but the HF Trainer does not fill this key; give a value");
    } else if (auto parsed = parse_int(context, *value, "steps_per_print", false, Bound::kPositive)) {
      out.steps_per_print = *parsed;
    }
  }
  resolved["steps_per_print"] = out.steps_per_print;
}

PrecisionExtras read_precision(Context& context, const json& document, ResolvedConfig& out, json& resolved) {
  PrecisionExtras extras;
  const RunSettings& settings = context.settings;

  // --- fp16 ---
  const Block fp16 = object_block(context, find_or_null(document, "fp16"), "fp16", true, false);
  json& resolved_fp16 = resolved_object(resolved, "fp16");
  check_keys(context, fp16, kFp16Keys, Unknown::kRefuse, &resolved_fp16);
  bool fp16_enabled = false;
  if (const json* value = fp16.find("enabled")) {
    if (is_auto(*value)) {
      fp16_enabled = settings.auto_precision == Precision::kFp16;
      context.warn(std::string("fp16.enabled is \"auto\"; filled with ") + (fp16_enabled ? "true" : "false") +
                   " from the run precision (" + precision_name(settings.auto_precision) + ")");
    } else {
      fp16_enabled = parse_bool(context, *value, "fp16.enabled", true).value_or(false);
    }
  }
  if (const json* value = fp16.find("fp16_master_weights_and_grads"); value && value->is_boolean()) {
    extras.fp16_master_weights = value->get<bool>();
  }

  // Loss scaler (DeepSpeedFP16Config, fp16/loss_scaler.py).
  double loss_scale = 0.0;
  if (const json* value = fp16.find("loss_scale")) {
    if (is_auto(*value)) {
      unfilled_auto_means_default(context, fp16, "fp16.loss_scale", "0");
    } else if (value->is_boolean()) {
      context.error("fp16.loss_scale", "expected a number >= 0 (0 means dynamic scaling), found " + show(*value));
    } else if (auto parsed = parse_number(context, *value, "fp16.loss_scale", true, Bound::kNonNegative)) {
      loss_scale = *parsed;
    }
  }
  LossScalerConfig& scaler = out.loss_scaler;
  scaler.initial_scale_power = get_int(context, fp16, "initial_scale_power", scaler.initial_scale_power, Bound::kAny);
  // DeepSpeed takes any int; zerosim keeps the scale 2^power a normal fp32 number, since it
  // multiplies fp32 gradients (a negative power is DeepSpeed's too: a scale below 1, raised to
  // min_loss_scale at the first overflow that counts).
  if (scaler.initial_scale_power < -126 || scaler.initial_scale_power > 127) {
    context.error("fp16.initial_scale_power",
                  "expected an integer in [-126, 127] (the initial scale 2^power must be a normal fp32 number), found " +
                      std::to_string(scaler.initial_scale_power));
  }
  const bool dynamic_requested = loss_scale == 0.0;
  // DeepSpeedFP16Config declares both as int and rejects a bool before pydantic would coerce
  // it; an integral float passes (2.0 -> 2), a fractional one does not.
  for (const char* key : {"loss_scale_window", "min_loss_scale"}) {
    const json* value = fp16.find(key);
    if (value == nullptr) continue;
    if (value->is_boolean()) {
      context.error(fp16.at(key), std::string("expected an integer, found ") + show(*value) +
                                      " (DeepSpeed refuses a boolean here)");
    } else if (value->is_number_float() && std::trunc(value->get<double>()) != value->get<double>()) {
      context.error(fp16.at(key), std::string("expected an integer, found ") + show(*value) +
                                      " (DeepSpeed's fp16 config declares it an int)");
    }
  }
  // DeepSpeed's validators reject a window or minimum <= 0 when scaling is dynamic.
  scaler.loss_scale_window = get_int(context, fp16, "loss_scale_window", scaler.loss_scale_window,
                                     dynamic_requested ? Bound::kPositive : Bound::kAny);
  scaler.hysteresis = get_int(context, fp16, "hysteresis", scaler.hysteresis, Bound::kPositive);
  scaler.consecutive_hysteresis = get_bool(context, fp16, "consecutive_hysteresis", scaler.consecutive_hysteresis);
  scaler.min_loss_scale = get_number(context, fp16, "min_loss_scale", scaler.min_loss_scale,
                                     dynamic_requested ? Bound::kPositive : Bound::kAny);

  // --- bf16 (or the old name bfloat16, read only when bf16 is absent) ---
  const json* bf16_value = find_or_null(document, "bf16");
  std::string bf16_path = "bf16";
  if (const json* old = find_or_null(document, "bfloat16")) {
    if (bf16_value == nullptr) {
      bf16_value = old;
      bf16_path = "bfloat16";
      context.warn("bfloat16 is the old name of bf16; read as bf16");
    } else {
      context.warn("bfloat16 is ignored because bf16 is given (DeepSpeed reads bfloat16 only without bf16)");
    }
  }
  const Block bf16 = object_block(context, bf16_value, bf16_path, true, false);
  if (bf16_path == "bfloat16") {
    if (resolved.contains("bfloat16")) resolved["bf16"] = resolved["bfloat16"];
  }
  resolved.erase("bfloat16");
  json& resolved_bf16 = resolved_object(resolved, "bf16");
  check_keys(context, bf16, kBf16Keys, Unknown::kRefuse, &resolved_bf16);
  bool bf16_enabled = false;
  if (const json* value = bf16.find("enabled")) {
    const std::string path = bf16.at("enabled");
    if (is_auto(*value)) {
      bf16_enabled = settings.auto_precision == Precision::kBf16;
      context.warn(path + " is \"auto\"; filled with " + (bf16_enabled ? "true" : "false") +
                   " from the run precision (" + precision_name(settings.auto_precision) + ")");
    } else {
      bf16_enabled = parse_bool(context, *value, path, true).value_or(false);
    }
  }
  if (const json* value = bf16.find("bf16_master_weights_and_grads"); value && value->is_boolean()) {
    extras.bf16_master_weights = value->get<bool>();
  }
  if (const json* value = bf16.find("bf16_optimizer_states"); value && value->is_boolean()) {
    extras.bf16_optimizer_states = value->get<bool>();
  }

  if (fp16_enabled && bf16_enabled) {
    context.error(bf16.at("enabled"), "cannot be true together with fp16.enabled (DeepSpeed: bfloat16 and fp16 "
                                      "modes cannot be simultaneously enabled)");
  }
  out.precision = fp16_enabled ? Precision::kFp16 : (bf16_enabled ? Precision::kBf16 : Precision::kFp32);

  // CreateLossScaler: dynamic scaling only for fp16; bf16 and fp32 use a static scale of 1.
  if (out.precision == Precision::kFp16) {
    scaler.dynamic = dynamic_requested;
    scaler.static_loss_scale = dynamic_requested ? 1.0 : loss_scale;
  } else {
    scaler.dynamic = false;
    scaler.static_loss_scale = 1.0;
  }

  resolved_fp16["enabled"] = fp16_enabled;
  resolved_fp16["loss_scale"] = loss_scale;
  resolved_fp16["initial_scale_power"] = scaler.initial_scale_power;
  resolved_fp16["loss_scale_window"] = scaler.loss_scale_window;
  resolved_fp16["hysteresis"] = scaler.hysteresis;
  resolved_fp16["consecutive_hysteresis"] = scaler.consecutive_hysteresis;
  resolved_fp16["min_loss_scale"] = scaler.min_loss_scale;
  resolved_bf16["enabled"] = bf16_enabled;
  return extras;
}

void read_communication_dtype(Context& context, const Block& top, ResolvedConfig& out, json& resolved) {
  out.communication_dtype = out.precision;
  if (const json* value = top.find("communication_data_type"); value != nullptr && !value->is_null()) {
    const std::string text = value->is_string() ? lowercase(value->get_ref<const std::string&>()) : std::string();
    if (text == "fp32") {
      out.communication_dtype = Precision::kFp32;
    } else if (text == "fp16") {
      out.communication_dtype = Precision::kFp16;
    } else if (text == "bf16") {
      out.communication_dtype = Precision::kBf16;
    } else {
      context.error("communication_data_type", "expected \"fp16\", \"bf16\" or \"fp32\", found " + show(*value));
    }
  }
  resolved["communication_data_type"] = precision_name(out.communication_dtype);
}

}  // namespace zerosim::ds_config_detail
