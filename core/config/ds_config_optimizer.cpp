// The optimizer and scheduler blocks of a DeepSpeed config, and the keyword arguments only some
// of DeepSpeed's Adam classes take.
#include "core/config/ds_config_keys.h"
#include "core/config/ds_config_reading.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zerosim::ds_config_detail {

namespace {

// A learning-rate-like number that the HF Trainer fills from a double run setting.
std::optional<double> read_filled_number(Context& context, const Block& block, std::string_view key, double setting,
                                         const SettingName& name, Bound bound) {
  const json* value = block.find(key);
  if (value == nullptr) return std::nullopt;
  const std::string path = block.at(key);
  if (is_auto(*value)) {
    if (has(setting)) {
      auto_filled(context, path, show_number(setting), name);
      return setting;
    }
    auto_needs_setting(context, path, name);
    return std::nullopt;
  }
  std::optional<double> parsed = parse_number(context, *value, path, false, bound);
  if (parsed && has(setting)) check_match(context, path, show_number(*parsed), show_number(setting), name);
  return parsed;
}

std::optional<int64_t> read_filled_int(Context& context, const Block& block, std::string_view key, int64_t setting,
                                       const SettingName& name, Bound bound) {
  const json* value = block.find(key);
  if (value == nullptr) return std::nullopt;
  const std::string path = block.at(key);
  if (is_auto(*value)) {
    if (has(setting) && within_bound(setting, bound)) {
      auto_filled(context, path, std::to_string(setting), name);
      return setting;
    }
    auto_needs_setting(context, path, name);
    return std::nullopt;
  }
  std::optional<int64_t> parsed = parse_int(context, *value, path, false, bound);
  if (parsed && has(setting)) check_match(context, path, std::to_string(*parsed), std::to_string(setting), name);
  return parsed;
}

}  // namespace

OptimizerExtras read_optimizer(Context& context, const json& document, ResolvedConfig& out, json& resolved) {
  OptimizerExtras extras;
  OptimizerConfig& optimizer = out.optimizer;
  const RunSettings& settings = context.settings;
  const json* value = find_or_null(document, "optimizer");
  if (value == nullptr) {
    // The HF Trainer then uses its own AdamW built from TrainingArguments.
    optimizer.present = false;
    optimizer.type = "AdamW";
    optimizer.adam_w_mode = true;
    if (has(settings.learning_rate)) optimizer.learning_rate = settings.learning_rate;
    if (has(settings.adam_beta1)) optimizer.beta1 = settings.adam_beta1;
    if (has(settings.adam_beta2)) optimizer.beta2 = settings.adam_beta2;
    if (has(settings.adam_epsilon)) optimizer.epsilon = settings.adam_epsilon;
    if (has(settings.weight_decay)) optimizer.weight_decay = settings.weight_decay;
    context.warn("optimizer: absent; zerosim uses AdamW with lr " + show_number(optimizer.learning_rate) +
                 ", betas [" + show_number(optimizer.beta1) + ", " + show_number(optimizer.beta2) + "], eps " +
                 show_number(optimizer.epsilon) + ", weight_decay " + show_number(optimizer.weight_decay) +
                 " (run settings where given, else DeepSpeedCPUAdam's defaults)");
  } else {
    optimizer.present = true;
    const Block block = object_block(context, value, "optimizer", false, false);
    json& resolved_block = resolved_object(resolved, "optimizer");
    check_keys(context, block, kOptimizerBlockKeys, Unknown::kIgnore, &resolved_block);
    if (block.object == nullptr) return extras;

    // type: DeepSpeed lower-cases the names of its own optimizers.
    const json* type = block.find("type");
    if (type == nullptr || type->is_null()) {
      context.error("optimizer.type", "missing; zerosim supports Adam and AdamW");
      return extras;
    }
    const std::string type_text = type->is_string() ? lowercase(type->get_ref<const std::string&>()) : "";
    if (type_text == "adam") {
      optimizer.type = "Adam";
    } else if (type_text == "adamw") {
      optimizer.type = "AdamW";
    } else {
      context.error("optimizer.type", "zerosim supports Adam and AdamW, found " + show(*type));
      return extras;
    }

    const Block params = object_block(context, block.find("params"), "optimizer.params", false, false);
    json& resolved_params = resolved_object(resolved_block, "params");
    check_keys(context, params, kAdamParamKeys, Unknown::kRefuse, &resolved_params);

    const bool torch_adam = get_bool(context, params, "torch_adam", false);
    const bool adam_w_mode = get_bool(context, params, "adam_w_mode", true);
    if (optimizer.type == "AdamW" && params.find("adam_w_mode") != nullptr && !adam_w_mode) {
      context.warn("optimizer.params.adam_w_mode is false but optimizer.type is AdamW; DeepSpeed uses decoupled "
                   "weight decay (AdamW) regardless");
    }
    // engine._configure_basic_optimizer: "Adam" means AdamW unless adam_w_mode is false.
    optimizer.adam_w_mode = optimizer.type == "AdamW" || adam_w_mode;

    if (auto lr = read_filled_number(context, params, "lr", settings.learning_rate, kLearningRateSetting,
                                     Bound::kNonNegative)) {
      optimizer.learning_rate = *lr;
    }
    if (const json* betas = params.find("betas")) {
      if (is_auto(*betas)) {
        if (has(settings.adam_beta1) && has(settings.adam_beta2)) {
          optimizer.beta1 = settings.adam_beta1;
          optimizer.beta2 = settings.adam_beta2;
          auto_filled(context, "optimizer.params.betas",
                      "[" + show_number(optimizer.beta1) + ", " + show_number(optimizer.beta2) + "]", kBetasSetting);
        } else {
          auto_needs_setting(context, "optimizer.params.betas", kBetasSetting);
        }
      } else {
        const bool well_formed = betas->is_array() && betas->size() == 2 && (*betas)[0].is_number() &&
                                 (*betas)[1].is_number() && (*betas)[0].get<double>() >= 0.0 &&
                                 (*betas)[0].get<double>() < 1.0 && (*betas)[1].get<double>() >= 0.0 &&
                                 (*betas)[1].get<double>() < 1.0;
        if (!well_formed) {
          context.error("optimizer.params.betas", "expected a list of two numbers in [0, 1), found " + show(*betas));
        } else {
          optimizer.beta1 = (*betas)[0].get<double>();
          optimizer.beta2 = (*betas)[1].get<double>();
          if (has(settings.adam_beta1) && has(settings.adam_beta2)) {
            check_match(context, "optimizer.params.betas",
                        "[" + show_number(optimizer.beta1) + ", " + show_number(optimizer.beta2) + "]",
                        "[" + show_number(settings.adam_beta1) + ", " + show_number(settings.adam_beta2) + "]",
                        kBetasSetting);
          }
        }
      }
    }
    if (auto eps = read_filled_number(context, params, "eps", settings.adam_epsilon, kEpsilonSetting,
                                      Bound::kNonNegative)) {
      optimizer.epsilon = *eps;
    }
    // torch.optim.AdamW (torch_adam with AdamW logic) defaults weight_decay to 0.01; FusedAdam and
    // DeepSpeedCPUAdam default it to 0.
    optimizer.weight_decay = torch_adam && optimizer.adam_w_mode ? 0.01 : 0.0;
    if (auto decay = read_filled_number(context, params, "weight_decay", settings.weight_decay, kWeightDecaySetting,
                                        Bound::kNonNegative)) {
      optimizer.weight_decay = *decay;
    }
    if (params.find("bias_correction") != nullptr && torch_adam) {
      context.error("optimizer.params.bias_correction",
                    "torch.optim.Adam(W) has no bias_correction argument (torch_adam is true)");
    }
    optimizer.bias_correction = get_bool(context, params, "bias_correction", true);
    extras.torch_adam = torch_adam;
    extras.amsgrad = get_bool(context, params, "amsgrad", false);
    extras.set_grad_none_given = params.find("set_grad_none") != nullptr;
    (void)get_bool(context, params, "set_grad_none", true);  // FusedAdam's flag: typed only
    if (params.find("max_grad_norm") != nullptr) {
      // engine._configure_basic_optimizer raises ValueError whatever the value.
      context.error(params.at("max_grad_norm"),
                    "DeepSpeed refuses it as an optimizer parameter (ValueError); use the top-level "
                    "gradient_clipping instead");
    }
  }

  json& resolved_block = resolved_object(resolved, "optimizer");
  resolved_block["type"] = optimizer.type;
  json& resolved_params = resolved_object(resolved_block, "params");
  resolved_params["lr"] = optimizer.learning_rate;
  resolved_params["betas"] = json::array({optimizer.beta1, optimizer.beta2});
  resolved_params["eps"] = optimizer.epsilon;
  resolved_params["weight_decay"] = optimizer.weight_decay;
  // torch.optim.Adam(W) (torch_adam) always corrects bias and takes no bias_correction argument.
  const json* torch_adam = resolved_params.contains("torch_adam") ? &resolved_params["torch_adam"] : nullptr;
  if (torch_adam == nullptr || !torch_adam->is_boolean() || !torch_adam->get<bool>()) {
    resolved_params["bias_correction"] = optimizer.bias_correction;
  }
  resolved_params["adam_w_mode"] = optimizer.adam_w_mode;
  return extras;
}

void read_scheduler(Context& context, const json& document, ResolvedConfig& out, json& resolved) {
  SchedulerConfig& scheduler = out.scheduler;
  const RunSettings& settings = context.settings;
  const json* value = find_or_null(document, "scheduler");
  if (value == nullptr) return;
  const Block block = object_block(context, value, "scheduler", false, false);
  if (block.object == nullptr) return;
  json& resolved_block = resolved_object(resolved, "scheduler");
  check_keys(context, block, kSchedulerBlockKeys, Unknown::kIgnore, &resolved_block);

  const json* type = block.find("type");
  if (type == nullptr || type->is_null()) {
    context.warn("scheduler: no type; DeepSpeed configures no scheduler and ignores the block");
    context.mark_inactive("scheduler");
    resolved.erase("scheduler");
    return;
  }
  static const std::vector<std::string_view> kSupported = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
  const std::string type_text = type->is_string() ? type->get<std::string>() : std::string();
  std::span<const KeySpec> specs;
  if (type_text == "WarmupLR") {
    scheduler.type = SchedulerType::kWarmupLR;
    specs = kWarmupLRKeys;
  } else if (type_text == "WarmupDecayLR") {
    scheduler.type = SchedulerType::kWarmupDecayLR;
    specs = kWarmupDecayLRKeys;
  } else if (type_text == "WarmupCosineLR") {
    scheduler.type = SchedulerType::kWarmupCosineLR;
    specs = kWarmupCosineLRKeys;
  } else {
    std::string hint;
    if (type->is_string()) {
      const std::string nearest = nearest_name(type_text, kSupported);
      if (lowercase(nearest) == lowercase(type_text)) {
        hint = "; did you mean " + nearest + "? (the name is case-sensitive)";
      } else if (edit_distance(type_text, nearest) <= 3) {
        hint = "; did you mean " + nearest + "?";
      }
    }
    context.error("scheduler.type",
                  "zerosim supports WarmupLR, WarmupDecayLR and WarmupCosineLR, found " + show(*type) + hint);
    return;
  }

  // The constructors' own defaults (lr_schedules.py): WarmupLR's warmup_max_lr is None, which
  // means the optimizer's lr; WarmupDecayLR passes its own default, 0.001, up to WarmupLR.
  scheduler.warmup_max_lr = scheduler.type == SchedulerType::kWarmupDecayLR ? 1e-3 : out.optimizer.learning_rate;
  if (block.find("params") == nullptr) {
    // engine._scheduler_from_config calls the class with **params: without the key, **None
    // is a TypeError in DeepSpeed.
    context.error("scheduler.params", "missing; DeepSpeed passes it to " + type_text +
                                          " as keyword arguments and fails without it (write {} for the defaults)");
    return;
  }
  const Block params = object_block(context, block.find("params"), "scheduler.params", false, false);
  json& resolved_params = resolved_object(resolved_block, "params");
  // A parameter of another supported schedule gets a precise message; anything else is unknown.
  if (params.object != nullptr) {
    for (auto it = params.object->begin(); it != params.object->end(); ++it) {
      if (find_spec(specs, it.key()) != nullptr) continue;
      for (std::span<const KeySpec> other : {std::span<const KeySpec>(kWarmupLRKeys),
                                             std::span<const KeySpec>(kWarmupDecayLRKeys),
                                             std::span<const KeySpec>(kWarmupCosineLRKeys)}) {
        if (find_spec(other, it.key()) != nullptr) {
          context.error(params.at(it.key()), "not a parameter of " + type_text +
                                                 " (DeepSpeed passes scheduler.params to its constructor)");
          break;
        }
      }
    }
    json filtered = json::object();
    for (auto it = params.object->begin(); it != params.object->end(); ++it) {
      bool other_schedule = false;
      for (std::span<const KeySpec> other : {std::span<const KeySpec>(kWarmupLRKeys),
                                             std::span<const KeySpec>(kWarmupDecayLRKeys),
                                             std::span<const KeySpec>(kWarmupCosineLRKeys)}) {
        other_schedule = other_schedule || find_spec(other, it.key()) != nullptr;
      }
      if (find_spec(specs, it.key()) != nullptr || !other_schedule) filtered[it.key()] = it.value();
    }
    Block filtered_block = params;
    filtered_block.object = &filtered;
    check_keys(context, filtered_block, specs, Unknown::kRefuse, &resolved_params);
  }

  // DeepSpeed's constructors take a starting position, but then leave step 1 at the
  // optimizer's own lr; a run that starts mid-schedule is a resume, which zerosim takes from
  // a checkpoint (the schedule's state is its position).
  if (const json* start = params.find("last_batch_iteration")) {
    if (!(start->is_number_integer() && start->get<int64_t>() == -1)) {
      context.error(params.at("last_batch_iteration"),
                    "zerosim starts every schedule at -1 (found " + show(*start) +
                        "); to start mid-schedule, resume from a checkpoint (--resume)");
    }
  }
  const bool cosine = scheduler.type == SchedulerType::kWarmupCosineLR;
  if (!cosine) {
    if (const json* min_lr = params.find("warmup_min_lr")) {
      if (is_auto(*min_lr)) {
        scheduler.warmup_min_lr = 0.0;  // fill_only: not a Trainer argument
        context.warn("scheduler.params.warmup_min_lr is \"auto\"; filled with 0 (as the HF Trainer does)");
      } else {
        scheduler.warmup_min_lr =
            parse_number(context, *min_lr, "scheduler.params.warmup_min_lr", false, Bound::kNonNegative).value_or(0.0);
      }
    }
    if (auto max_lr = read_filled_number(context, params, "warmup_max_lr", settings.learning_rate,
                                         kLearningRateSetting, Bound::kNonNegative)) {
      scheduler.warmup_max_lr = *max_lr;
    }
  }
  // WarmupLR and WarmupCosineLR check isinstance(warmup_num_steps, int) and > 0: a JSON float
  // (5.0, 1e1) is refused, and true, a Python int, is taken as 1.
  if (const json* warmup = params.find("warmup_num_steps"); warmup != nullptr && warmup->is_number_float()) {
    context.error(params.at("warmup_num_steps"),
                  "expected a positive integer, found " + show(*warmup) +
                      " (DeepSpeed refuses a float here: warmup_num_steps must be a positive integer)");
  } else if (warmup != nullptr && warmup->is_boolean()) {
    context.warn(params.at("warmup_num_steps") + " is " + show(*warmup) +
                 "; DeepSpeed takes a boolean as the integer " + (warmup->get<bool>() ? "1" : "0") +
                 ", and so does zerosim");
    if (!warmup->get<bool>()) {
      context.error(params.at("warmup_num_steps"), "expected a positive integer, found false (0)");
    } else {
      scheduler.warmup_num_steps = 1;
    }
  } else if (auto steps = read_filled_int(context, params, "warmup_num_steps", settings.warmup_steps,
                                          kWarmupStepsSetting, Bound::kPositive)) {
    scheduler.warmup_num_steps = *steps;  // the schedule clamps it to max(2, n), as DeepSpeed does
  }
  if (const json* warmup_type = params.find("warmup_type")) {
    const std::string text = warmup_type->is_string() ? warmup_type->get<std::string>() : std::string();
    if (text == "log") {
      scheduler.warmup_type = WarmupType::kLog;
    } else if (text == "linear") {
      scheduler.warmup_type = WarmupType::kLinear;
    } else if (warmup_type->is_string() && !is_auto(*warmup_type)) {
      scheduler.warmup_type = WarmupType::kLog;
      context.warn("scheduler.params.warmup_type " + show(*warmup_type) +
                   " is unknown; DeepSpeed falls back to \"log\" and so does zerosim");
    } else {
      context.error("scheduler.params.warmup_type", "expected \"log\" or \"linear\", found " + show(*warmup_type));
    }
  }
  if (scheduler.type != SchedulerType::kWarmupLR) {
    if (params.find("total_num_steps") == nullptr) {
      context.error("scheduler.params.total_num_steps", "missing; " + type_text + " requires it");
    } else if (auto total = read_filled_int(context, params, "total_num_steps", settings.total_steps,
                                            kTotalStepsSetting, Bound::kAny)) {
      // DeepSpeed checks nothing here but warns below warmup; 0 or a negative total is accepted
      // as it is (the lr falls to its floor as soon as warmup ends). A fractional total, which
      // DeepSpeed would also take, is refused by parse_int: a step count of 5.5 is a typo.
      scheduler.total_num_steps = *total;
      if (scheduler.total_num_steps < scheduler.warmup_num_steps) {
        context.warn("scheduler.params.total_num_steps " + std::to_string(scheduler.total_num_steps) +
                     " is smaller than warmup_num_steps " + std::to_string(scheduler.warmup_num_steps) +
                     " (DeepSpeed warns too): the schedule " +
                     (cosine ? "holds cos_min_ratio" : "falls to warmup_min_lr") + " as soon as warmup ends");
      }
    }
  }
  if (cosine) {
    scheduler.warmup_min_ratio =
        get_number(context, params, "warmup_min_ratio", scheduler.warmup_min_ratio, Bound::kNonNegative);
    // DeepSpeed takes any cos_min_ratio; max(0, ...) keeps the lr >= 0 below 0, and above 1
    // the lr rises after warmup. Both run as DeepSpeed runs them, with a warning.
    scheduler.cos_min_ratio = get_number(context, params, "cos_min_ratio", scheduler.cos_min_ratio, Bound::kAny);
    if (scheduler.cos_min_ratio < 0.0 || scheduler.cos_min_ratio > 1.0) {
      context.warn("scheduler.params.cos_min_ratio " + show_number(scheduler.cos_min_ratio) + " is outside [0, 1]; " +
                   (scheduler.cos_min_ratio < 0.0 ? "the lr reaches 0 before the end of the decay"
                                                  : "the lr rises after warmup") +
                   " (DeepSpeed accepts it too)");
    }
  }

  resolved_block["type"] = type_text;
  if (!cosine) {
    resolved_params["warmup_min_lr"] = scheduler.warmup_min_lr;
    resolved_params["warmup_max_lr"] = scheduler.warmup_max_lr;
  } else {
    resolved_params["warmup_min_ratio"] = scheduler.warmup_min_ratio;
    resolved_params["cos_min_ratio"] = scheduler.cos_min_ratio;
  }
  resolved_params["warmup_num_steps"] = scheduler.warmup_num_steps;
  resolved_params["warmup_type"] = scheduler.warmup_type == WarmupType::kLog ? "log" : "linear";
  if (scheduler.type != SchedulerType::kWarmupLR) resolved_params["total_num_steps"] = scheduler.total_num_steps;
}

void check_optimizer_class_arguments(Context& context, const OptimizerExtras& extras, const ResolvedConfig& out) {
  if (!out.optimizer.present) return;
  const bool cpu_adam = !extras.torch_adam && out.zero.offload_optimizer.device != OffloadDevice::kNone;
  if (extras.amsgrad) {
    if (cpu_adam) {
      context.warn("optimizer.params.amsgrad is true, but DeepSpeedCPUAdam (optimizer offload) ignores it, and so "
                   "does zerosim: plain Adam(W) runs");
    } else {
      context.error("optimizer.params.amsgrad",
                    extras.torch_adam ? "torch's Adam(W) would run AMSGrad, which zerosim does not implement; found true"
                                      : "DeepSpeed's FusedAdam refuses AMSGrad (RuntimeError); found true");
    }
  }
  if (extras.set_grad_none_given && cpu_adam) {
    context.error("optimizer.params.set_grad_none",
                  "DeepSpeedCPUAdam (optimizer offload) takes no such argument (TypeError in DeepSpeed); only "
                  "FusedAdam does");
  }
}

}  // namespace zerosim::ds_config_detail
